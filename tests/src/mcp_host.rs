//! The MCP Python SDK as a host (`tests/fixtures/mcp_host.py`), as the tests run it: its
//! stdout lines as they come, its stderr (childguard's and the server's too: the SDK passes its
//! own stderr down) kept, the `childguard` it started, the stubborn server's pidfile. Used by
//! `tests/mcp_host.rs` (as root) and `tests/mcp_host_unprivileged.rs` (as the suite's user);
//! [`Streams`] also by `tests/runc_contain.rs`, for its host in a container.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use childguard_cli::procs::children_of;

use crate::eventually;

/// A child's piped stdout, line by line as it comes, and its stderr, kept: each read by a
/// thread of its own.
#[derive(Debug)]
pub struct Streams {
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    stderr_closed: Arc<AtomicBool>,
}

impl Streams {
    /// Takes `child`'s stdout and stderr (both piped) and starts their readers.
    pub fn take(child: &mut Child) -> Streams {
        let (tx, lines) = mpsc::channel();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_closed = Arc::new(AtomicBool::new(false));
        let (into, closed) = (Arc::clone(&stderr), Arc::clone(&stderr_closed));
        let mut pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            closed.store(true, Ordering::SeqCst);
        });
        Streams {
            lines,
            stderr,
            stderr_closed,
        }
    }

    /// What came on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Whether every writer has closed stderr (all of it is in [`Streams::stderr`]).
    pub fn stderr_closed(&self) -> bool {
        self.stderr_closed.load(Ordering::SeqCst)
    }

    /// The next stdout line `wanted` says yes to (the others are passed over), within
    /// `limit`.
    pub fn next_line(
        &self,
        limit: Duration,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<String, RecvTimeoutError> {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left)?;
            if wanted(&line) {
                return Ok(line);
            }
        }
    }
}

/// A running `mcp_host.py`.
#[derive(Debug)]
pub struct Host {
    pub child: Child,
    streams: Streams,
}

impl Host {
    /// Spawns `cmd` (the host's python with its arguments, working directory and
    /// environment), stdin null, stdout and stderr piped and read by threads.
    pub fn spawn(mut cmd: Command) -> Host {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the MCP host");
        let streams = Streams::take(&mut child);
        Host { child, streams }
    }

    pub fn stderr(&self) -> String {
        self.streams.stderr()
    }

    /// The next stdout line starting with `prefix`, within `limit` (a failure says what the
    /// host wrote on stderr).
    pub fn expect_line(&self, prefix: &str, limit: Duration) -> String {
        self.streams
            .next_line(limit, |line| line.starts_with(prefix))
            .unwrap_or_else(|e| {
                panic!(
                    "the host printed no {prefix:?} line within {limit:?} ({e}); its stderr:\n{}",
                    self.stderr()
                )
            })
    }

    /// The `childguard run` the host started: its one child whose `comm` is `comm`.
    pub fn child_named(&self, comm: &str) -> u32 {
        let found: Vec<u32> = children_of(self.child.id())
            .into_iter()
            .filter(|&pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
            })
            .collect();
        assert_eq!(
            found.len(),
            1,
            "the host {} should have one {comm} child: {found:?}",
            self.child.id()
        );
        found[0]
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stubborn fixture's "SERVER_PID WORKER_PID" from its pidfile, waiting up to `limit` for
/// it. Pids as the server sees them: in a PID namespace, not ours.
pub fn read_pidfile(path: &Path, limit: Duration) -> (u32, u32) {
    let mut text = String::new();
    assert!(
        eventually(limit, || {
            text = std::fs::read_to_string(path).unwrap_or_default();
            !text.is_empty()
        }),
        "the stubborn server wrote no pidfile {}",
        path.display()
    );
    let pids: Vec<u32> = text
        .split_whitespace()
        .map(|p| p.parse().expect("a pid"))
        .collect();
    assert_eq!(pids.len(), 2, "pidfile {text:?}");
    (pids[0], pids[1])
}
