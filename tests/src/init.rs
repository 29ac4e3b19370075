//! Helpers for tests/init.rs: `childguard init` under its two names, as PID 1 of a new PID
//! namespace (`unshare --pid --fork --mount-proc`), and the process tree under it.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::{bin, eventually, scratch};

/// How the CLI is invoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// `childguard init …`.
    Init,
    /// `tini …` (a symlink named `tini`).
    Tini,
}

/// Both names, for tests that run each behaviour under each.
pub const NAMES: [Name; 2] = [Name::Init, Name::Tini];

/// `tini`: a symlink to the CLI, in a directory of its own.
pub fn tini_link() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = scratch("tini-bin");
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("tini");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(bin("cg-childguard"), &link).unwrap();
        link
    })
    .clone()
}

impl Name {
    /// The program and the arguments that select init (`["init"]`, or none for `tini`).
    pub fn argv(self) -> Vec<std::ffi::OsString> {
        match self {
            Name::Init => vec![bin("cg-childguard").into(), "init".into()],
            Name::Tini => vec![tini_link().into()],
        }
    }

    /// A command running init with `args`.
    pub fn command<S: AsRef<OsStr>>(self, args: &[S]) -> Command {
        let argv = self.argv();
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).args(args).stdin(Stdio::null());
        // init passes on the signal state it was started with (tini's restore_signals): a
        // clean one, whatever started the tests.
        crate::sys::clean_start(&mut cmd);
        // The tests choose the subreaper and the group themselves.
        for var in [
            "TINI_SUBREAPER",
            "CHILDGUARD_SUBREAPER",
            "TINI_KILL_PROCESS_GROUP",
            "TINI_VERBOSITY",
            "POSIXLY_CORRECT",
            "CHILDGUARD_LADDER",
            "CHILDGUARD_STOP_BUDGET",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    /// A command running init with `args` as PID 1 of a new PID namespace (with its own
    /// `/proc`). The process spawned is `unshare`; init is its only child.
    pub fn as_pid1<S: AsRef<OsStr>>(self, args: &[S]) -> Command {
        let inner = self.command(args);
        let mut cmd = Command::new("unshare");
        cmd.args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .arg(inner.get_program())
            .args(inner.get_args())
            .stdin(Stdio::null());
        crate::sys::clean_start(&mut cmd);
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd
    }
}

/// Whether PID namespaces can be made here. Without `unshare` (or without the right to use
/// it) this fails the test, saying what to install — unless `CHILDGUARD_SKIP_PEERS=1`, where
/// it returns false and the test says it was skipped.
pub fn pid_namespaces(test: &str) -> bool {
    static WORKS: OnceLock<Result<(), String>> = OnceLock::new();
    let works = WORKS.get_or_init(|| {
        match Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "true"])
            .stdin(Stdio::null())
            .output()
        {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(format!(
                "`unshare --pid --fork --mount-proc true` failed ({}): {} — run the tests as \
                 root (or with CAP_SYS_ADMIN)",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Err(format!(
                "`unshare` cannot be run ({e}): install util-linux (Debian: apt-get install \
                 util-linux)"
            )),
        }
    });
    match works {
        Ok(()) => true,
        Err(why) if std::env::var_os("CHILDGUARD_SKIP_PEERS").is_some_and(|v| v == "1") => {
            eprintln!("{test}: skipped (CHILDGUARD_SKIP_PEERS=1): {why}");
            false
        }
        Err(why) => panic!("{test}: precondition: {why} (or set CHILDGUARD_SKIP_PEERS=1)"),
    }
}

pub use childguard_cli::procs::{children_of, descendants_of};

/// init's pid (in our namespace) under `unshare`, once it is there.
pub fn init_under_unshare(unshare: &Child) -> u32 {
    let mut init = None;
    assert!(
        eventually(Duration::from_secs(30), || {
            init = children_of(unshare.id()).first().copied();
            init.is_some()
        }),
        "unshare never started init"
    );
    init.unwrap()
}

/// Waits (bounded) until init (`pid`) has at least `n` descendants: CMD is up and has
/// started what the test needs.
pub fn await_descendants(pid: u32, n: usize) {
    assert!(
        eventually(Duration::from_secs(30), || descendants_of(pid).len() >= n),
        "init {pid} never had {n} descendants: {:?}",
        descendants_of(pid)
    );
}

/// Sends `signo` to `pid`.
pub fn send(pid: u32, signo: i32) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).expect("pid"),
        rustix::process::Signal::from_named_raw(signo).expect("named signal"),
    )
    .expect("kill");
}

/// `SigIgn` and `SigBlk` of a `/proc/PID/status` text, as bit sets (bit n-1: signal n).
pub fn sig_sets(status: &str) -> (u64, u64) {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .unwrap_or_else(|| panic!("{name} missing in {status}"))
    };
    (field("SigIgn:"), field("SigBlk:"))
}

/// The set with these signals.
pub fn set_of(signals: &[i32]) -> u64 {
    signals.iter().fold(0, |acc, &s| acc | (1u64 << (s - 1)))
}

/// The command name (`comm`) of `pid`, if it exists.
pub fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim().to_string())
}

/// Waits (bounded) until `pid`'s command name is `name` — it has exec'd what the test needs,
/// with the dispositions it was given — and returns `pid`.
pub fn await_exec(pid: u32, name: &str) -> u32 {
    assert!(
        eventually(Duration::from_secs(30), || comm(pid).as_deref()
            == Some(name)),
        "{pid} never became {name} (it is {:?})",
        comm(pid)
    );
    pid
}

/// Waits (bounded) until init (`pid`) has at least `n` descendants named `name`.
pub fn await_named_descendants(pid: u32, name: &str, n: usize) {
    let count = || {
        descendants_of(pid)
            .into_iter()
            .filter(|&d| comm(d).as_deref() == Some(name))
            .count()
    };
    assert!(
        eventually(Duration::from_secs(30), || count() >= n),
        "init {pid} never had {n} descendants named {name}: {:?}",
        descendants_of(pid)
    );
}
