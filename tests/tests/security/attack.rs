//! The harness of the attack tests: the attacker user, a lab directory under `/tmp` with the
//! programs staged where that user can run them, what root must keep (a victim file, a chosen
//! directory), the tally of the spawns, the ways to spawn (the CLI, the library), and the frame
//! of the attacks on the runtime directory. The attacker process is in `attacker.rs`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use childguard_tests::bin;
use childguard_tests::postgres::skip_peers;

use super::attacker::{Attacker, Did};

/// The second, unprivileged user the attacks run as (tests/run.sh makes it).
pub const ATTACKER: &str = "childguard-attacker";

/// How many spawns each test makes: `CHILDGUARD_ATTACK_SPAWNS`, default 200.
pub fn spawns() -> usize {
    match std::env::var("CHILDGUARD_ATTACK_SPAWNS") {
        Ok(text) => text
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("CHILDGUARD_ATTACK_SPAWNS={text:?}: a count above 0")),
        Err(_) => 200,
    }
}

/// After this many spawns that went wrong a test stops (each may cost a readiness timeout),
/// unless `CHILDGUARD_ATTACK_KEEP_GOING=1` (to measure how often an attack wins).
const MAX_BAD: usize = 5;

/// One attack test at a time in this binary: two attackers would act on each other's
/// directories, and the library's tests set `XDG_RUNTIME_DIR` for the whole process.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Clone, Copy)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
}

/// Root, and the attacker user from `/etc/passwd`. Fails the test without them — unless
/// `CHILDGUARD_SKIP_PEERS=1` and only the user is missing (`None`: skipped, said on stderr).
pub fn attacker(test: &str) -> Option<User> {
    assert!(
        rustix::process::geteuid().is_root(),
        "{test}: precondition: run as root (CI does): the attacks are on root's childguard, \
         by the unprivileged user {ATTACKER}"
    );
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let Some(line) = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{ATTACKER}:")))
    else {
        if skip_peers() {
            eprintln!("SKIPPED {test}: no user {ATTACKER} (CHILDGUARD_SKIP_PEERS=1)");
            return None;
        }
        panic!(
            "{test}: no user {ATTACKER} in /etc/passwd: run `bash tests/run.sh` once (it makes \
             it: useradd --system {ATTACKER}), or set CHILDGUARD_SKIP_PEERS=1"
        );
    };
    let fields: Vec<&str> = line.split(':').collect();
    let user = User {
        uid: fields[2].parse().unwrap(),
        gid: fields[3].parse().unwrap(),
    };
    assert_ne!(user.uid, 0, "{ATTACKER} must not be root: {line}");
    Some(user)
}

/// A fresh directory `/tmp/cg-attack-…` (root's, 0755), removed on drop with all it holds —
/// also what the attacker swapped out. Under `/tmp` itself: the attacker's links must be on
/// the same filesystem as the directories it swaps them with, and it must reach the staged
/// programs (the build directory may be under `/root`).
#[derive(Debug)]
pub struct Lab {
    pub root: PathBuf,
    pub user: User,
}

impl Lab {
    pub fn new(name: &str, user: User) -> Lab {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let root = PathBuf::from(format!("/tmp/cg-attack-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let lab = Lab { root, user };
        lab.root_dir("", 0o755);
        let bin_dir = lab.root_dir("bin", 0o755);
        for program in ["cg-attacker", "cg-notify"] {
            let staged = bin_dir.join(program);
            std::fs::copy(bin(program), &staged).unwrap();
            std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        lab
    }

    pub fn program(&self, name: &str) -> PathBuf {
        self.root.join("bin").join(name)
    }

    /// A directory of root's in the lab, with exactly `mode`.
    pub fn root_dir(&self, name: &str, mode: u32) -> PathBuf {
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        dir
    }

    /// A directory of the attacker's in the lab, with exactly `mode`.
    pub fn user_dir(&self, name: &str, mode: u32) -> PathBuf {
        let dir = self.root_dir(name, mode);
        std::os::unix::fs::chown(&dir, Some(self.user.uid), Some(self.user.gid)).unwrap();
        dir
    }

    /// An empty file of the attacker's, for a server run as that user to write to.
    pub fn user_file(&self, name: &str) -> PathBuf {
        let file = self.root.join(name);
        std::fs::write(&file, "").unwrap();
        std::os::unix::fs::chown(&file, Some(self.user.uid), Some(self.user.gid)).unwrap();
        file
    }

    /// The notify server: appends its `NOTIFY_SOCKET` to `log`, sends `READY=1` from its own
    /// pid (`cg-notify`), then sleeps until it is closed. Its argv holds no `--`.
    pub fn server_argv(&self, log: &Path) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            r#"echo "$NOTIFY_SOCKET" >> "$0"; exec "$1" READY=1 -- sleep 600"#.into(),
            log.display().to_string(),
            self.program("cg-notify").display().to_string(),
        ]
    }

    pub fn server(&self, log: &Path) -> Command {
        let argv = self.server_argv(log);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The socket directories named in a server log (one `NOTIFY_SOCKET` a line).
pub fn logged_dirs(log: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| Some(Path::new(l).parent()?.to_path_buf()))
        .collect()
}

/// What root must keep as it is, whatever the attacker does: a root-owned 0600 file (the
/// victim of a chown), or a root-owned 0755 empty directory of the attacker's choosing (the
/// target of a chmod or a chown, where root's socket must not land either).
#[derive(Debug)]
pub struct Kept {
    pub path: PathBuf,
    dir: bool,
}

impl Kept {
    pub fn victim_file(lab: &Lab) -> Kept {
        let kept = Kept {
            path: lab.root_dir("victim", 0o755).join("secret"),
            dir: false,
        };
        kept.restore();
        kept
    }

    pub fn chosen_dir(lab: &Lab) -> Kept {
        let kept = Kept {
            path: lab.root.join("chosen"),
            dir: true,
        };
        kept.restore();
        kept
    }

    /// How it differs from what it must be, if it does.
    pub fn changed(&self) -> Option<String> {
        let meta = match std::fs::symlink_metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) => return Some(format!("{}: {e}", self.path.display())),
        };
        let want = if self.dir { 0o040755 } else { 0o100600 };
        let mut entries = Vec::new();
        if self.dir && meta.is_dir() {
            for e in std::fs::read_dir(&self.path).unwrap().flatten() {
                entries.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        let same = (meta.uid(), meta.gid(), meta.mode()) == (0, 0, want) && entries.is_empty();
        (!same).then(|| {
            format!(
                "{} is {}:{} mode {:o} (was 0:0 mode {want:o}){}",
                self.path.display(),
                meta.uid(),
                meta.gid(),
                meta.mode(),
                match entries.is_empty() {
                    true => String::new(),
                    false => format!(", holding {entries:?}"),
                }
            )
        })
    }

    pub fn restore(&self) {
        let _ = std::fs::remove_dir_all(&self.path);
        let _ = std::fs::remove_file(&self.path);
        if self.dir {
            std::fs::create_dir(&self.path).unwrap();
            std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o755)).unwrap();
        } else {
            std::fs::write(&self.path, "root's secret\n").unwrap();
            std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        std::os::unix::fs::chown(&self.path, Some(0), Some(0)).unwrap();
    }
}

/// The spawns of one test: those that went wrong (root's server not ready, CMD not run) and
/// those after which a [`Kept`] had changed (restored each time, to count the next).
#[derive(Debug)]
pub struct Tally {
    test: &'static str,
    began: Instant,
    pub spawns: usize,
    pub failed: Vec<String>,
    pub harmed: Vec<String>,
}

impl Tally {
    pub fn new(test: &'static str) -> Tally {
        Tally {
            test,
            began: Instant::now(),
            spawns: 0,
            failed: Vec::new(),
            harmed: Vec::new(),
        }
    }

    /// Spawn `i`'s outcome, and the look at `kept` after it.
    pub fn record(&mut self, outcome: Result<(), String>, kept: Option<&Kept>) {
        let i = self.spawns;
        self.spawns += 1;
        if let Err(e) = outcome {
            self.failed.push(format!("spawn {i}: {e}"));
        }
        if let Some(change) = kept.and_then(Kept::changed) {
            self.harmed.push(format!("spawn {i}: {change}"));
            kept.unwrap().restore();
        }
    }

    /// Whether to go on to the next spawn.
    pub fn go_on(&self) -> bool {
        let keep_going = std::env::var_os("CHILDGUARD_ATTACK_KEEP_GOING").is_some_and(|v| v == "1");
        self.spawns < spawns() && (keep_going || self.failed.len().max(self.harmed.len()) < MAX_BAD)
    }

    /// Says what happened (on stderr, `--nocapture` shows it), then asserts that root kept
    /// what it must and that every spawn succeeded.
    pub fn assert_held(&self, attacker_did: &str) {
        let summary = format!(
            "{}: {} spawns in {:.1} s; attacker: {attacker_did}; harmed after {} spawn(s), \
             failed {}",
            self.test,
            self.spawns,
            self.began.elapsed().as_secs_f64(),
            self.harmed.len(),
            self.failed.len(),
        );
        eprintln!("{summary}");
        for line in self.harmed.iter().chain(&self.failed).take(10) {
            eprintln!("  {line}");
        }
        assert!(
            self.harmed.is_empty(),
            "{summary}\nwhat the attacker changed: {:#?}",
            self.harmed
        );
        assert!(
            self.failed.is_empty(),
            "{summary}\nroot's spawns that failed: {:#?}",
            self.failed
        );
        assert_eq!(self.spawns, spawns(), "{summary}");
    }
}

/// `childguard ARGS` (the CLI under test), with `XDG_RUNTIME_DIR` as given (unset: `None`);
/// `Ok` if it exited with one of `codes`, else its status and stderr's tail.
pub fn cli(args: &[String], xdg: Option<&Path>, codes: &[i32]) -> Result<(), String> {
    let mut cmd = Command::new(bin("cg-childguard"));
    cmd.args(args)
        .stdin(Stdio::null())
        .env_remove("XDG_RUNTIME_DIR");
    if let Some(dir) = xdg {
        cmd.env("XDG_RUNTIME_DIR", dir);
    }
    let out = cmd.output().expect("running the childguard CLI");
    match out.status.code() {
        Some(code) if codes.contains(&code) => Ok(()),
        _ => {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(4).collect();
            Err(format!(
                "{}: {}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ))
        }
    }
}

/// Sets `XDG_RUNTIME_DIR` for this process (the library reads it at each spawn) while it
/// lives, then restores it. Only under [`one_at_a_time`].
#[derive(Debug)]
pub struct RuntimeDirEnv(Option<std::ffi::OsString>);

impl RuntimeDirEnv {
    pub fn set(dir: Option<&Path>) -> RuntimeDirEnv {
        let old = std::env::var_os("XDG_RUNTIME_DIR");
        match dir {
            Some(dir) => std::env::set_var("XDG_RUNTIME_DIR", dir),
            None => std::env::remove_var("XDG_RUNTIME_DIR"),
        }
        RuntimeDirEnv(old)
    }
}

impl Drop for RuntimeDirEnv {
    fn drop(&mut self) {
        match self.0.take() {
            Some(old) => std::env::set_var("XDG_RUNTIME_DIR", old),
            None => std::env::remove_var("XDG_RUNTIME_DIR"),
        }
    }
}

/// A spawn through the library: `Ready::Notify` (5 s), with `notify_owner` and `runtime_dir`
/// when given, then a close; `Ok` once ready and closed.
pub fn library_spawn(
    command: Command,
    owner: Option<User>,
    runtime_dir: Option<&Path>,
) -> Result<(), String> {
    let mut builder = childguard::ChildHandle::builder(command)
        .ready(childguard::Ready::Notify)
        .ready_timeout(Duration::from_secs(5))
        .ladder(childguard_tests::ladder("TERM:2s,KILL:2s"));
    if let Some(user) = owner {
        builder = builder.notify_owner(user.uid, user.gid);
    }
    if let Some(dir) = runtime_dir {
        builder = builder.runtime_dir(dir);
    }
    let handle = builder.spawn().map_err(|e| format!("spawn: {e}"))?;
    let _report = handle.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}

/// The attacks on an `XDG_RUNTIME_DIR` the attacker owns (0700, its own), which root's
/// childguard is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRuntimeDir {
    /// On the `chmod`'s `IN_ATTRIB` (and a little later): root's directory renamed aside, the
    /// attacker's own directory and datagram socket in its place.
    Steal,
    /// On `IN_CREATE`: root's new directory swapped for a symlink to the chosen directory.
    SwapOnCreate,
    /// On the `chmod`'s `IN_ATTRIB`: the same swap.
    SwapOnChmod,
}

/// The frame of an attack on the runtime directory: the lab, the attacker's `xdg` directory
/// (also this process's `XDG_RUNTIME_DIR` meanwhile), the attacker armed and its decoy taken,
/// then `spawn(lab, xdg, log)` until [`Tally::go_on`] says to stop (the chosen directory
/// checked after each, for the swaps), the decoy taken again, and the verdict.
pub fn runtime_dir_attack(
    test: &'static str,
    attack: OnRuntimeDir,
    mut spawn: impl FnMut(&Lab, &Path, &Path) -> Result<(), String>,
) {
    let _serial = one_at_a_time();
    let Some(user) = attacker(test) else { return };
    let lab = Lab::new("xdg", user);
    let xdg = lab.user_dir("xdg", 0o700);
    let log = lab.user_file("servers.log");
    let _env = RuntimeDirEnv::set(Some(&xdg));
    let kept = (attack != OnRuntimeDir::Steal).then(|| Kept::chosen_dir(&lab));
    let target = kept.as_ref().map(|k| k.path.display().to_string());
    let xdg_text = xdg.display().to_string();
    let mut args = vec!["--watch", &xdg_text];
    args.extend(match attack {
        OnRuntimeDir::Steal => ["--on", "attrib", "--action", "steal"],
        OnRuntimeDir::SwapOnCreate => ["--on", "create", "--action", "swap-dir"],
        OnRuntimeDir::SwapOnChmod => ["--on", "attrib", "--action", "swap-dir"],
    });
    if let Some(target) = &target {
        args.extend(["--target", target]);
    }
    let mut attacker = Attacker::start(&lab, &args);
    attacker.must_take_decoy(&xdg);
    let mut tally = Tally::new(test);
    while tally.go_on() {
        let outcome = spawn(&lab, &xdg, &log);
        tally.record(outcome, kept.as_ref());
    }
    attacker.must_take_decoy(&xdg);
    let did = Did::of(&attacker.stop(), None, user.uid);
    tally.assert_held(&format!("{did}; took its decoy before and after"));
}
