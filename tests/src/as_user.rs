//! Test bed (a) of issue 50: childguard run by an unprivileged user of the suite's own,
//! `childguard-user` (tests/run.sh makes it), in root's cgroup with nothing delegated to it —
//! where a cgroup of its own cannot be made and containment must come from another backend.
//!
//! The test runs as root and starts the user's processes itself ([`Bed::command`]: std's
//! `uid`/`gid`, which also drops root's supplementary groups), from a [`Bed`]: a directory of
//! root's under `/tmp` holding copies of the programs the user runs (the build directory may be
//! under `/root`, out of that user's reach), and directories of the user's own (`0700`) for its
//! `HOME` and the files its servers write. The Python peers come from a venv made for that user
//! ([`user_python`]: a pyenv python under `/root` cannot be run by it).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cgroups::{cgroup_mount, cgroup_of};
use crate::postgres::skip_peers;

/// The unprivileged user of the bed.
pub const SUITE_USER: &str = "childguard-user";

/// Where tests/run.sh makes the user's venv (`CHILDGUARD_USER_VENV` overrides it).
pub const USER_VENV: &str = "/opt/childguard-tests/user-venv";

/// The `PATH` the user's processes get, after the bed's `bin/`: Debian's programs, no pyenv
/// shims (under `/root`).
const SYSTEM_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
}

/// Fails the test naming the fix, or returns `None` (saying so) under `CHILDGUARD_SKIP_PEERS=1`.
fn missing<T>(test: &str, why: &str) -> Option<T> {
    if skip_peers() {
        eprintln!("SKIPPED {test}: {why} (CHILDGUARD_SKIP_PEERS=1)");
        return None;
    }
    panic!(
        "{test}: {why}: run `bash tests/run.sh` once (it makes it), or set CHILDGUARD_SKIP_PEERS=1"
    );
}

/// [`SUITE_USER`] from `/etc/passwd`. The test must run as root (CI does): it starts the
/// user's processes and reads theirs.
pub fn suite_user(test: &str) -> Option<User> {
    assert!(
        rustix::process::geteuid().is_root(),
        "{test}: precondition: run as root (CI does): the test starts childguard as the \
         unprivileged user {SUITE_USER}"
    );
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let Some(line) = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{SUITE_USER}:")))
    else {
        return missing(
            test,
            &format!("no user {SUITE_USER} in /etc/passwd (useradd --system {SUITE_USER})"),
        );
    };
    let fields: Vec<&str> = line.split(':').collect();
    let user = User {
        uid: fields[2].parse().expect("a uid"),
        gid: fields[3].parse().expect("a gid"),
    };
    assert_ne!(user.uid, 0, "{SUITE_USER} must not be root: {line}");
    Some(user)
}

/// A directory of root's (`0755`) under `/tmp` for one test's runs as the user, removed with
/// all it holds on drop.
#[derive(Debug)]
pub struct Bed {
    pub root: PathBuf,
    pub user: User,
}

impl Bed {
    /// Made the safe way: any old entry of that name is removed (a link itself, not what it
    /// points to), then `mkdir`, which fails if someone made it again meanwhile. Below it only
    /// root can create entries, so the user's directories made there are ours to hand over.
    pub fn new(name: &str, user: User) -> Bed {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let root = PathBuf::from(format!("/tmp/cg-user-{}-{n}-{name}", std::process::id()));
        match std::fs::symlink_metadata(&root) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&root).unwrap(),
            Ok(_) => std::fs::remove_file(&root).unwrap(),
            Err(_) => {}
        }
        let bed = Bed { root, user };
        bed.mkdir(&bed.root, 0o755);
        bed.mkdir(&bed.root.join("bin"), 0o755);
        bed.mkdir(&bed.root.join("fixtures"), 0o755);
        bed.user_dir("home");
        bed
    }

    fn mkdir(&self, dir: &Path, mode: u32) {
        std::fs::DirBuilder::new()
            .mode(mode)
            .create(dir)
            .unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        // The umask may have taken bits off.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A directory of the user's (`0700`), for its servers' files (a pidfile: written as
    /// `PATH.tmp`, then renamed, so the directory must be theirs).
    pub fn user_dir(&self, name: &str) -> PathBuf {
        let dir = self.root.join(name);
        self.mkdir(&dir, 0o700);
        std::os::unix::fs::chown(&dir, Some(self.user.uid), Some(self.user.gid)).unwrap();
        dir
    }

    /// The user's `HOME` (npm keeps its cache there).
    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    /// A copy of the program `from` in the bed's `bin/` (on the user's `PATH`) as `name`.
    pub fn stage(&self, from: &Path, name: &str) -> PathBuf {
        let staged = self.root.join("bin").join(name);
        std::fs::copy(from, &staged)
            .unwrap_or_else(|e| panic!("copy {} to the bed: {e}", from.display()));
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
        staged
    }

    /// A copy of `tests/fixtures/NAME`, readable by all.
    pub fn fixture(&self, name: &str) -> PathBuf {
        let staged = self.root.join("fixtures").join(name);
        std::fs::copy(crate::stdio_peers::fixture(name), &staged).unwrap();
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
        staged
    }

    /// `program` run as the user: its uid and gid (std drops root's supplementary groups
    /// with them), a clean environment (`HOME`, `USER`, `LOGNAME`, `PATH` with the bed's
    /// `bin/` first, `LANG`), from `HOME`.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.uid(self.user.uid)
            .gid(self.user.gid)
            .env_clear()
            .env("HOME", self.home())
            .env("USER", SUITE_USER)
            .env("LOGNAME", SUITE_USER)
            .env(
                "PATH",
                format!("{}:{SYSTEM_PATH}", self.root.join("bin").display()),
            )
            .env("LANG", "C.UTF-8")
            .current_dir(self.home());
        cmd
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The python of the user's venv, with the MCP Python SDK, checked by running it as the user
/// (`import mcp`). Missing: fails saying to run tests/run.sh (or `None` with
/// `CHILDGUARD_SKIP_PEERS=1`).
pub fn user_python(test: &str, bed: &Bed) -> Option<PathBuf> {
    let venv = std::env::var_os("CHILDGUARD_USER_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(USER_VENV));
    let python = venv.join("bin/python");
    let out = bed.command(&python).args(["-c", "import mcp"]).output();
    match out {
        Ok(out) if out.status.success() => Some(python),
        Ok(out) => missing(
            test,
            &format!(
                "{} cannot import mcp as {SUITE_USER}: {}",
                python.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        ),
        Err(e) => missing(
            test,
            &format!("{} cannot be run as {SUITE_USER}: {e}", python.display()),
        ),
    }
}

/// `/proc/PID/status`'s field `key` (`Uid`, `CapEff`, `NSpid`), its value trimmed.
pub fn status_field(pid: u32, key: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// The pids of `pid` in each PID namespace from ours inwards (`NSpid`): one for a process of
/// our namespace, two for one in a namespace below it.
pub fn ns_pids(pid: u32) -> Vec<u32> {
    status_field(pid, "NSpid")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Of `among` (pids as we see them), the one whose own pid — in its innermost namespace — is
/// `inner`: what a server in a PID namespace wrote as its pid.
pub fn our_pid_of(inner: u32, among: &[u32]) -> Option<u32> {
    among
        .iter()
        .copied()
        .find(|&p| ns_pids(p).last() == Some(&inner))
}

/// Asserts that `pid` runs as `user` with no capability at all, in the cgroup this (root's)
/// test runs in, a cgroup the user cannot write: where `childguard --contain` cannot make a
/// cgroup of its own.
pub fn assert_unprivileged_in_roots_cgroup(pid: u32, user: User) {
    assert_users_in_roots_cgroup(pid, user);
    assert_eq!(
        status_field(pid, "CapEff").as_deref(),
        Some("0000000000000000"),
        "{pid}'s effective capabilities"
    );
}

/// [`assert_unprivileged_in_roots_cgroup`] but for the capabilities: for the tree init of a
/// PID namespace, which has them all — in the user namespace of the user's own ids it made,
/// which gives nothing over anything outside it.
pub fn assert_users_in_roots_cgroup(pid: u32, user: User) {
    let uid = status_field(pid, "Uid").unwrap_or_default();
    let want = format!("{0}\t{0}\t{0}\t{0}", user.uid);
    assert_eq!(uid, want, "{pid}'s Uid (real, effective, saved, fs)");
    let gid = status_field(pid, "Gid").unwrap_or_default();
    assert_eq!(gid, format!("{0}\t{0}\t{0}\t{0}", user.gid), "{pid}'s Gid");
    assert_eq!(
        status_field(pid, "Groups").unwrap_or_default(),
        "",
        "{pid}'s supplementary groups"
    );
    let ours = cgroup_of(std::process::id()).expect("our cgroup");
    assert_eq!(
        cgroup_of(pid).as_deref(),
        Some(ours.as_str()),
        "{pid} should be in root's cgroup, the test's own"
    );
    let dir = cgroup_mount().join(ours.trim_start_matches('/'));
    let meta = std::fs::metadata(&dir).unwrap();
    let writable = (meta.uid() == user.uid && meta.mode() & 0o200 != 0)
        || (meta.gid() == user.gid && meta.mode() & 0o020 != 0)
        || meta.mode() & 0o002 != 0;
    assert!(
        !writable,
        "{} must not be writable by {SUITE_USER} (nothing delegated): uid {} mode {:o}",
        dir.display(),
        meta.uid(),
        meta.mode()
    );
}
