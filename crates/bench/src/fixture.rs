//! The embedded slowserver fixture, spawned two ways: through childguard (ours) and through
//! plain `std::process::Command` over a `UnixStream` pair (the baselines). Both run the same
//! program — this very binary, as `childguard-bench slowserver ARGS…` — with its end of the
//! socket on stdin and stdout, and both wait for the `READY` line before anything is timed.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use childguard::{ChildHandle, Ladder, SocketMode};
use rustix::process::{Pid, Signal};

use crate::Result;

/// The subcommand that makes this binary act as slowserver.
pub const SUBCOMMAND: &str = "slowserver";

/// How long we wait for `READY` before giving up (the `big` scenario's children touch up to
/// 8 GiB before they are ready).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long we leave a freshly sent request to reach the server before timing starts.
pub const SETTLE: Duration = Duration::from_millis(20);

/// A `Command` running the embedded slowserver with `args`.
pub fn command(args: &[&str]) -> io::Result<Command> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.arg(SUBCOMMAND).args(args);
    Ok(cmd)
}

/// Ours: slowserver `args` in a [`ChildHandle`] over [`SocketMode::Stdio`] with `ladder`,
/// returned once it printed `READY`.
pub fn spawn_ours(args: &[&str], ladder: Ladder) -> Result<ChildHandle> {
    let handle = ChildHandle::builder(command(args)?)
        .socket(SocketMode::Stdio)
        .ladder(ladder)
        .spawn()?;
    let socket = handle.socket().ok_or("the handle has no socket")?;
    let pid = read_ready(socket)?;
    if Some(pid) != handle.id() {
        return Err(format!("READY names pid {pid}, the handle {:?}", handle.id()).into());
    }
    Ok(handle)
}

/// Baseline: slowserver `args` spawned by plain `std::process::Command`, the child's end of a
/// `UnixStream::pair` on its stdin and stdout, returned once it printed `READY`.
pub fn spawn_plain(args: &[&str]) -> Result<(Child, UnixStream)> {
    let (ours, theirs) = UnixStream::pair()?;
    let theirs = OwnedFd::from(theirs);
    let mut cmd = command(args)?;
    cmd.stdin(Stdio::from(theirs.try_clone()?))
        .stdout(Stdio::from(theirs));
    let mut child = cmd.spawn()?;
    // The child's end must live only in the child, or it never sees EOF.
    drop(cmd);
    match read_ready(&ours) {
        Ok(pid) if pid == child.id() => Ok((child, ours)),
        other => {
            let _ = child.kill();
            let _ = child.wait();
            match other {
                Ok(pid) => Err(format!("READY names pid {pid}, spawned {}", child.id()).into()),
                Err(e) => Err(e),
            }
        }
    }
}

/// Reads slowserver's `READY pid=… grandchild=…` line byte by byte (nothing past the newline
/// is consumed) and returns the pid it names.
pub fn read_ready(socket: &UnixStream) -> Result<u32> {
    read_ready_line(socket).map(|(pid, _)| pid)
}

/// [`read_ready`], also returning the whole line (for `grandchild=`, `workers=`).
pub fn read_ready_line(mut socket: &UnixStream) -> Result<(u32, String)> {
    socket.set_read_timeout(Some(READY_TIMEOUT))?;
    let mut line = Vec::new();
    let mut byte = [0u8];
    while line.last() != Some(&b'\n') {
        // A SIGCHLD handler (tokio's, ours on the portable mechanism) makes a read with a
        // timeout fail with EINTR even under SA_RESTART: retry.
        let n = match socket.read(&mut byte) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(format!("slowserver printed no READY within {READY_TIMEOUT:?}").into());
            }
            n => n?,
        };
        if n == 0 {
            let seen = String::from_utf8_lossy(&line);
            return Err(format!("slowserver closed its socket before READY (got {seen:?})").into());
        }
        line.push(byte[0]);
    }
    socket.set_read_timeout(None)?;
    let text = String::from_utf8_lossy(&line).into_owned();
    let pid = text
        .strip_prefix(slowserver::READY_PREFIX)
        .and_then(|rest| rest.split_whitespace().find_map(|w| w.strip_prefix("pid=")))
        .and_then(|pid| pid.parse().ok())
        .ok_or_else(|| format!("not a READY line: {text:?}"))?;
    Ok((pid, text))
}

/// Sends one protocol line (`"READ 1"`) to the server.
pub fn send_line(mut socket: &UnixStream, line: &str) -> io::Result<()> {
    socket.write_all(format!("{line}\n").as_bytes())
}

/// `kill(2)` on a child we hold unreaped (so its pid cannot have been recycled), through
/// rustix's safe wrapper.
pub fn kill(child: &Child, signal: Signal) -> io::Result<()> {
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    Ok(rustix::process::kill_process(pid, signal)?)
}

/// A duration in (fractional) milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
