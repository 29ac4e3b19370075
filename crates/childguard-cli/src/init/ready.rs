//! `--ready COND --ready-file PATH`: a file that exists exactly while CMD is ready, for a
//! Kubernetes `exec` readiness probe (`test -e PATH`). A thread checks the condition from
//! outside CMD every 50 ms — the library's readiness kinds that need no part in the spawn:
//! a connect (`tcp:HOST:PORT`, `unix:PATH`), an HTTP `GET` (`http:URL`), a probe command
//! (`exec:CMD`), each one attempt of [`Ready::check_once`], the same attempt the spawn's wait
//! makes — until it holds, then writes the file (through a temporary name and a rename, so a
//! probe never sees it half-made). At the stop the file is removed first, so the endpoint is
//! taken out of service before CMD gets its first signal.
//!
//! `notify` and `line:` are refused (`args.rs`): they would need init's spawn of CMD to wait
//! for readiness, and PID 1 cannot block in a spawn while signals and orphans wait.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use childguard::Ready;

use crate::messages::say;

/// How often the thread checks.
/// The ready thread's tid (0: none). An `exec:` probe is forked by this thread (the library's
/// `Ready::check_once`), so it is listed in `/proc/self/task/TID/children`; init's reaper
/// leaves those to the probe's own handle ([`crate::init::reap::reap_others`]). Race avoided
/// (*a probe reaped by init*): init reaps every child but CMD on each SIGCHLD, and a probe that
/// exits in a millisecond (`test -e FILE`) was reaped by it first — its status lost, the check
/// counted as failed, the ready file written only when the probe happened to win (5–25 s
/// instead of 0.3 s, seen in the init tests).
pub static PROBE_THREAD: AtomicI32 = AtomicI32::new(0);

const EVERY: Duration = Duration::from_millis(50);

/// The readiness watch: the file appears once the condition holds.
#[derive(Debug)]
pub struct ReadyFile {
    path: PathBuf,
    stopped: Arc<AtomicBool>,
}

impl ReadyFile {
    /// Starts the thread that waits for `ready` and then writes `path`.
    pub fn watch(ready: Ready, path: PathBuf) -> std::io::Result<ReadyFile> {
        let stopped = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stopped);
        let file = path.clone();
        thread::Builder::new()
            .name("childguard-ready".into())
            .spawn(move || {
                PROBE_THREAD.store(
                    rustix::thread::gettid().as_raw_nonzero().get(),
                    Ordering::SeqCst,
                );
                while !flag.load(Ordering::SeqCst) {
                    let holds = match ready.check_once() {
                        Ok(holds) => holds,
                        Err(e) => {
                            // No retry fixes it (a probe that cannot start): said once.
                            say!("--ready: {e}; no ready file will be written");
                            return;
                        }
                    };
                    if holds {
                        // Checked again after the connect: a stop that came meanwhile wins.
                        if !flag.load(Ordering::SeqCst) {
                            if let Err(e) = write(&file) {
                                say!("cannot write the ready file {}: {e}", file.display());
                            }
                        }
                        return;
                    }
                    thread::sleep(EVERY);
                }
            })?;
        Ok(ReadyFile { path, stopped })
    }

    /// The stop: no file from now on, and the one written (if any) removed.
    pub fn withdraw(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = fs::remove_file(&self.path);
    }
}

/// Writes `path` through a temporary name in the same directory, then renames it.
fn write(path: &Path) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    fs::write(&tmp, format!("{}\n", std::process::id()))?;
    fs::rename(&tmp, path)
}
