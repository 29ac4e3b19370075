//! `--ready COND --ready-file PATH`: a file that exists exactly while CMD is ready, for a
//! Kubernetes `exec` readiness probe (`test -e PATH`). A thread tries to connect to CMD's
//! socket (`tcp:HOST:PORT`, `unix:PATH`), every 50 ms until it accepts — a probe, as the
//! engine's own — then writes the file (through a temporary name and a rename, so a probe
//! never sees it half-made). At the stop the file is removed first, so the endpoint is taken
//! out of service before CMD gets its first signal.

use std::fs;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use childguard::ConnectTo;

use crate::messages::say;

/// How often the thread tries to connect.
const EVERY: Duration = Duration::from_millis(50);

/// The readiness watch: the file appears once CMD accepts a connection.
#[derive(Debug)]
pub struct ReadyFile {
    path: PathBuf,
    stopped: Arc<AtomicBool>,
}

impl ReadyFile {
    /// Starts the thread that waits for `to` and then writes `path`.
    pub fn watch(to: ConnectTo, path: PathBuf) -> std::io::Result<ReadyFile> {
        let stopped = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stopped);
        let file = path.clone();
        thread::Builder::new()
            .name("childguard-ready".into())
            .spawn(move || {
                while !flag.load(Ordering::SeqCst) {
                    if accepts(&to) {
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

fn accepts(to: &ConnectTo) -> bool {
    match to {
        ConnectTo::Tcp(addr) => TcpStream::connect_timeout(addr, Duration::from_secs(1)).is_ok(),
        ConnectTo::Unix(path) => UnixStream::connect(path).is_ok(),
        _ => false,
    }
}

/// Writes `path` through a temporary name in the same directory, then renames it.
fn write(path: &Path) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    fs::write(&tmp, format!("{}\n", std::process::id()))?;
    fs::rename(&tmp, path)
}
