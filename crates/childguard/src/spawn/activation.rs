//! Socket activation ([`SocketMode::Activation`](crate::SocketMode::Activation)): the server
//! gets an already-listening Unix socket on fd 3, as from systemd (`sd_listen_fds(3)`), and we
//! connect to it.
//!
//! Steps: a private directory (mode 0700, random name, under `$XDG_RUNTIME_DIR` or `/tmp`);
//! `socket` + `bind` + `listen(SOMAXCONN)` on `DIR/sock`; the exec of the child prepared before
//! the fork (argv, environment with `LISTEN_FDS=1`, `LISTEN_FDNAMES` and a buffer for
//! `LISTEN_PID`); fork; in the child the listener goes to fd 3 and its pid into `LISTEN_PID`;
//! in the parent, `connect`, then wait until the server has *accepted* that connection.
//!
//! Races avoided:
//! - **Connect before the server listens.** The socket is bound and listening before the fork,
//!   so a `connect` right after the spawn is queued in the backlog instead of failing with
//!   `ECONNREFUSED`/`ENOENT`: no sleep-and-retry guesswork about the server's start-up.
//! - **Connected but never accepted.** A queued connection succeeds even if the server never
//!   calls `accept` (wrong program, crash at start-up). We keep our copy of the listener until
//!   its accept queue is empty — only the server can empty it — checking the child's exit and
//!   the timeout in between, so a dead server is an error at spawn, not a hang on first read.
//! - **`LISTEN_PID` of the wrong process.** The value must be the pid of the process that
//!   execs the server, known only after `fork`. It is written by the child itself, into a
//!   buffer allocated before the fork (no allocation between fork and exec, where another
//!   thread of ours may have held the allocator's lock). Inherited `LISTEN_*` are removed, so a
//!   server never mistakes our own activation variables for its own.
//! - **Our environment instead of the caller's.** The environment is built here, not by std:
//!   it starts empty after the Command's `env_clear` (read back by `command_debug`, which
//!   refuses when unsure), so a secret of ours never reaches a server whose caller cleared it.
//! - **Predictable or shared socket path.** The directory is created with `mkdirat` under a
//!   random name (retried on `EEXIST`, never following an existing entry) and mode 0700, in a
//!   base only root and we can change, and everything after is done through its fd
//!   (`base/socket_dir.rs`), so nobody else can connect first or swap the socket file.
//! - **Path too long.** `sun_path` holds 108 bytes with the NUL; a longer path would be
//!   truncated by some APIs and bind a different name. It is checked before anything is made.
//! - **Leftovers.** [`SocketDir`] removes the socket file and the directory on drop: after the
//!   socket was closed on [`close`](crate::ChildHandle::close), and on every error path.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};

use crate::base::socket_dir::{check_path_fits, make_private_dir};
use crate::base::trusted_dir::open_base;
use crate::core::wait::Interrupt;
use crate::error::ErrorKind;
use crate::process::Process;
use crate::spawn::own_exec;
use crate::sys::PidExec;

pub(crate) use crate::base::socket_dir::SocketDir;

/// The `LISTEN_FDNAMES` value when none is given (what systemd uses for an unnamed socket).
pub(crate) const DEFAULT_NAME: &str = "unknown";

/// Longest `LISTEN_FDNAMES` entry systemd accepts (`FDNAME_MAX`).
const FDNAME_MAX: usize = 255;

pub(crate) use crate::spawn::own_exec::Failure;

/// Everything made before the fork.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The directory and socket path (removed when dropped).
    pub(crate) dir: SocketDir,
    /// Our copy of the listening socket, kept until the server accepted our connection.
    pub(crate) listener: OwnedFd,
    /// The child's exec, moved into the pre-exec hook.
    pub(crate) exec: PidExec,
}

/// Validates the name, resolves the program, makes the directory and the listening socket, and
/// builds the child's exec (`own_exec.rs`) — all before the fork. `watchdog`: the child's
/// environment names its pid in `WATCHDOG_PID` too.
pub(crate) fn prepare(
    command: &Command,
    name: Option<&str>,
    runtime_dir: Option<&Path>,
    watchdog: bool,
) -> Result<Prepared, Failure> {
    let name = name.unwrap_or(DEFAULT_NAME);
    validate_name(name).map_err(|e| (ErrorKind::Config, e))?;
    let base = open_base(runtime_dir).map_err(|e| (ErrorKind::Config, e))?;
    check_path_fits(base.path()).map_err(|e| (ErrorKind::Config, e))?;
    let dir = make_private_dir(base).map_err(|e| (ErrorKind::Socket, e))?;
    let listener = listen_on(&dir).map_err(|e| (ErrorKind::Socket, e))?;
    let pid_keys: &[&str] = if watchdog {
        &["LISTEN_PID", "WATCHDOG_PID"]
    } else {
        &["LISTEN_PID"]
    };
    let exec = own_exec::prepare(
        command,
        |vars| activation_env(vars, name),
        pid_keys,
        Some(listener.as_raw_fd()),
    )?;
    Ok(Prepared {
        dir,
        listener,
        exec,
    })
}

/// systemd's rules for a `LISTEN_FDNAMES` entry: at most 255 characters, printable ASCII, no
/// `:` (the separator). We also refuse the empty name, which `sd_listen_fds_with_names` would
/// read as no name at all.
pub(crate) fn validate_name(name: &str) -> io::Result<()> {
    let bad = |why: &str| {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid LISTEN_FDNAMES name {name:?}: {why}"),
        ))
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > FDNAME_MAX {
        return bad(&format!("longer than {FDNAME_MAX} characters"));
    }
    if let Some(c) = name.chars().find(|c| !matches!(c, ' '..='~')) {
        return bad(&format!(
            "{c:?} is not printable ASCII (systemd allows only 0x20..=0x7e)"
        ));
    }
    if name.contains(':') {
        return bad("':' separates names in LISTEN_FDNAMES");
    }
    Ok(())
}

/// `socket` (close-on-exec) + `bind` + `listen`, through std: it sets close-on-exec on every
/// Unix (atomically with `SOCK_CLOEXEC` where the platform has it; macOS has not). Bound
/// through the directory's fd ([`SocketDir::local_path`]), then checked to be in it.
fn listen_on(dir: &SocketDir) -> io::Result<OwnedFd> {
    let listener = std::os::unix::net::UnixListener::bind(dir.local_path())
        .map_err(|e| io::Error::new(e.kind(), format!("bind {}: {e}", dir.path().display())))?;
    dir.check_socket()?;
    Ok(OwnedFd::from(listener))
}

/// Every inherited `LISTEN_*` removed (a server must never mistake our own activation
/// variables for its own), `LISTEN_FDS=1` and `LISTEN_FDNAMES=name` added (`LISTEN_PID` is
/// written by the child, `own_exec.rs`).
fn activation_env(vars: &mut Vec<(OsString, OsString)>, name: &str) {
    vars.retain(|(k, _)| !k.as_bytes().starts_with(b"LISTEN_"));
    vars.push(("LISTEN_FDS".into(), "1".into()));
    vars.push(("LISTEN_FDNAMES".into(), name.into()));
}

/// After the fork: connects to the socket and waits until the server has accepted the
/// connection. Fails if the child exits first, or after `timeout`.
pub(crate) fn connect(
    listener: OwnedFd,
    dir: &SocketDir,
    process: &mut Process,
    timeout: Duration,
    interrupt: Option<&Interrupt>,
) -> io::Result<UnixStream> {
    let started = Instant::now();
    // `Duration::MAX` means "no bound": saturate instead of overflowing the Instant.
    let deadline = started
        .checked_add(timeout)
        .unwrap_or_else(|| started + Duration::from_secs(100 * 365 * 24 * 3600));
    let mut backoff = Duration::from_micros(250);
    // Through the directory's fd: the socket we bound, whatever became of its path.
    let local = dir.local_path();
    let path = dir.path();
    // The listener exists, so this normally succeeds at once (queued in the backlog).
    let stream = loop {
        ensure_running(process, path)?;
        match UnixStream::connect(&local) {
            Ok(stream) => break stream,
            Err(e) if is_retryable(&e) => {}
            Err(e) => return Err(e),
        }
        pause(process, &mut backoff, deadline, interrupt, || {
            format!("could not connect to {} within {timeout:?}", path.display())
        })?;
    };
    // Accepted once our listener's queue is empty: only the server can take it off.
    while has_pending_connection(&listener)? {
        ensure_running(process, path)?;
        pause(process, &mut backoff, deadline, interrupt, || {
            format!(
                "the server did not accept a connection on {} within {timeout:?} \
                 (is it socket-activatable? it must accept on fd 3 when LISTEN_FDS is set)",
                path.display()
            )
        })?;
    }
    drop(listener);
    Ok(stream)
}

fn is_retryable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED | libc::ENOENT | libc::EAGAIN | libc::EINTR)
    )
}

/// Error if the child has exited (it can no longer accept).
fn ensure_running(process: &mut Process, path: &Path) -> io::Result<()> {
    let status = process.check_exit()?;
    if process.is_running() {
        return Ok(());
    }
    let status = status.map_or_else(|| "status unknown".to_string(), |s| s.to_string());
    Err(io::Error::new(
        io::ErrorKind::ConnectionRefused,
        format!(
            "the server exited ({status}) before accepting a connection on {}",
            path.display()
        ),
    ))
}

/// Sleeps for the current backoff (doubling it, up to 20 ms), woken early by the child's exit;
/// the interrupt's error ends it (and the connect).
fn pause(
    process: &Process,
    backoff: &mut Duration,
    deadline: Instant,
    interrupt: Option<&Interrupt>,
    timed_out: impl FnOnce() -> String,
) -> io::Result<()> {
    let now = Instant::now();
    if now >= deadline {
        return Err(io::Error::new(io::ErrorKind::TimedOut, timed_out()));
    }
    process.wait_until((now + *backoff).min(deadline), interrupt)?;
    *backoff = (*backoff * 2).min(Duration::from_millis(20));
    Ok(())
}

/// Whether a connection waits in the listener's accept queue (a listening socket polls
/// readable exactly then).
fn has_pending_connection(listener: &OwnedFd) -> io::Result<bool> {
    let mut fds = [PollFd::new(listener, PollFlags::IN)];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let ready = poll(&mut fds, Some(&zero))?;
    Ok(ready > 0 && fds[0].revents().contains(PollFlags::IN))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::socket_dir::DIR_PREFIX;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    #[test]
    fn names_follow_systemd_rules() {
        assert!(validate_name("unknown").is_ok());
        assert!(validate_name("nbd sock-1").is_ok());
        assert!(validate_name(&"a".repeat(255)).is_ok());
        for bad in ["", "a:b", "tab\there", "é", &"a".repeat(256)] {
            let err = validate_name(bad).unwrap_err();
            assert!(err.to_string().contains("LISTEN_FDNAMES"), "{err}");
        }
    }

    #[test]
    fn long_base_is_refused_before_anything_is_made() {
        let base = PathBuf::from(format!("/tmp/{}", "d".repeat(90)));
        let err = check_path_fits(&base).unwrap_err();
        assert!(err.to_string().contains("sun_path"), "{err}");
        assert!(check_path_fits(Path::new("/tmp")).is_ok());
    }

    #[test]
    fn private_dir_is_0700_and_removed() {
        let base = crate::base::trusted_dir::open_trusted(Path::new("/tmp")).unwrap();
        let dir = make_private_dir(base).unwrap();
        let parent = dir.path().parent().unwrap().to_path_buf();
        let dir_name = parent.file_name().unwrap().to_string_lossy().into_owned();
        assert!(dir_name.starts_with(DIR_PREFIX), "{dir_name}");
        let mode = std::fs::metadata(&parent).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let _listener = listen_on(&dir).unwrap();
        assert!(dir.path().exists());
        dir.remove().unwrap();
        assert!(!parent.exists());
    }

    #[test]
    fn env_drops_inherited_listen_vars_and_applies_command() {
        let mut cmd = Command::new("x");
        cmd.env("CG_A", "1")
            .env("LISTEN_FDS", "7")
            .env_remove("HOME");
        let env = strings(build_env(&cmd, false, "n"));
        assert!(env.contains(&"CG_A=1".to_string()));
        assert!(env.contains(&"LISTEN_FDS=1".to_string()));
        assert!(env.contains(&"LISTEN_FDNAMES=n".to_string()));
        assert!(!env.iter().any(|e| e.starts_with("HOME=")));
        assert_eq!(env.iter().filter(|e| e.starts_with("LISTEN_")).count(), 2);
    }

    /// The child's environment as activation builds it (the pid entries aside).
    fn build_env(cmd: &Command, env_clear: bool, name: &str) -> Vec<(OsString, OsString)> {
        own_exec::env_for(cmd, env_clear, |v| activation_env(v, name), &["LISTEN_PID"])
    }

    fn strings(env: Vec<(OsString, OsString)>) -> Vec<String> {
        env.iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .collect()
    }

    #[test]
    fn env_clear_starts_from_nothing() {
        let mut cmd = Command::new("x");
        cmd.env_clear().env("CG_A", "1").env("LISTEN_PID", "7");
        let hidden = crate::spawn::command_debug::read(&cmd).unwrap();
        assert!(hidden.env_clear);
        let mut env = strings(build_env(&cmd, hidden.env_clear, "n"));
        env.sort();
        assert_eq!(env, ["CG_A=1", "LISTEN_FDNAMES=n", "LISTEN_FDS=1"]);
    }
}
