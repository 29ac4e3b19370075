//! `--fork-grandchild`: a worker process that holds the socket open.

use std::env;
use std::io;
use std::process::{Command, Stdio};

use crate::{exit, signals};

/// The hidden argument that turns a re-exec of this binary into the worker.
pub const WORKER_FLAG: &str = "--grandchild-worker";

/// Arguments placed before [`WORKER_FLAG`] when re-executing (see `main_with`).
pub static REEXEC_PREFIX: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

/// Re-executes this binary as the worker, sharing stdin, stdout and stderr
/// and staying in the same process group; returns its pid. It is never
/// waited for.
pub fn spawn() -> io::Result<u32> {
    let exe = env::current_exe()?;
    let prefix = REEXEC_PREFIX.get().map(Vec::as_slice).unwrap_or_default();
    let child = Command::new(exe)
        .args(prefix)
        .arg(WORKER_FLAG)
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()?;
    Ok(child.id())
}

/// The worker's whole life: undo any inherited `SIG_IGN`, then block forever.
pub fn run_worker() -> ! {
    signals::reset_all_to_default();
    exit::never()
}

/// `--main-worker LOG`: starts this binary again as a plain server (`--log LOG
/// --ignore-eof`, stdin on `/dev/null`), waits for its READY line; its pid goes out as `MAINPID=`; a thread waits for
/// it and ends this process with it (exit code, or 128 + the signal that ended it), as a
/// wrapper that forks its server does.
pub fn spawn_main_worker(log: &std::path::Path) -> io::Result<u32> {
    let exe = env::current_exe()?;
    let prefix = REEXEC_PREFIX.get().map(Vec::as_slice).unwrap_or_default();
    let mut child = Command::new(exe)
        .args(prefix)
        .arg("--log")
        .arg(log)
        .arg("--ignore-eof")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let pid = child.id();
    // Its READY line: its signal handlers are in place (a TERM before them would kill it
    // without a log line).
    if let Some(out) = child.stdout.take() {
        let mut line = String::new();
        io::BufRead::read_line(&mut io::BufReader::new(out), &mut line)?;
        if !line.starts_with("READY") {
            return Err(io::Error::other(format!("the worker said {line:?}")));
        }
    }
    std::thread::Builder::new()
        .name("main-worker".into())
        .spawn(move || {
            use std::os::unix::process::ExitStatusExt;
            let code = match child.wait() {
                Ok(status) => status
                    .code()
                    .or_else(|| status.signal().map(|s| 128 + s))
                    .unwrap_or(1),
                Err(_) => 1,
            };
            std::process::exit(code)
        })?;
    Ok(pid)
}
