//! The MCP Python SDK as a host (`tests/fixtures/mcp_host.py`), as the tests run it: its
//! stdout lines as they come, its stderr (childguard's and the server's too: the SDK passes its
//! own stderr down) kept, the `childguard` it started, the stubborn server's pidfile. Used by
//! `tests/mcp_host.rs` (as root) and `tests/mcp_host_unprivileged.rs` (as the suite's user).

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use childguard_cli::procs::children_of;

use crate::eventually;

/// A running `mcp_host.py`.
#[derive(Debug)]
pub struct Host {
    pub child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
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
        let into = Arc::clone(&stderr);
        let mut pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    return;
                }
                into.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Host {
            child,
            lines,
            stderr,
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The next stdout line starting with `prefix`, within `limit` (a failure says what the
    /// host wrote on stderr).
    pub fn expect_line(&self, prefix: &str, limit: Duration) -> String {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(e) => panic!(
                    "the host printed no {prefix:?} line within {limit:?} ({e}); its stderr:\n{}",
                    self.stderr()
                ),
            }
        }
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
