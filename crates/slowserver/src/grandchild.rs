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
