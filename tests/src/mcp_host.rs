//! The MCP Python SDK as a host (`tests/fixtures/mcp_host.py`), as the tests run it: its
//! stdout lines as they come, its stderr (childguard's and the server's too: the SDK passes its
//! own stderr down) kept, the `childguard` it started, the stubborn server's pidfile and the
//! launchers in front of it. Used by `tests/mcp_host.rs` (as root) and
//! `tests/mcp_host_unprivileged.rs` (as the suite's user); [`Streams`] also by
//! `tests/runc_contain.rs`, for its host in a container.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use childguard_cli::procs::children_of;

use crate::{eventually, pidfd, Pins};

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

    /// The end of a session the host closes itself: `SESSION OK` (the echo tool's answer),
    /// then `CLOSED SECONDS` (how long the SDK's close took), then the host's exit, which must
    /// be a success. Returns those seconds and the host's stderr.
    pub fn closed(&mut self, limit: Duration) -> (f64, String) {
        let ok = self.expect_line("SESSION OK", limit);
        assert!(ok.contains("echo"), "{ok}");
        let closed = self.expect_line("CLOSED", limit);
        let took: f64 = closed["CLOSED ".len()..].parse().expect("seconds");
        let status = self.child.wait().unwrap();
        let stderr = self.stderr();
        assert!(
            status.success(),
            "the host failed: {status}; stderr:\n{stderr}"
        );
        (took, stderr)
    }

    /// Once a `--hang` session is up, until the host hangs in it: `SESSION OK`, with
    /// `fork_holder` (the host was given `--fork-holder`) its `HOLDER PID` line — that pid
    /// pinned in `holder_pins` and returned — then `HANGING`.
    pub fn hanging(
        &self,
        fork_holder: bool,
        holder_pins: &mut Pins,
        limit: Duration,
    ) -> Option<u32> {
        self.expect_line("SESSION OK", limit);
        let holder: Option<u32> = fork_holder.then(|| {
            let line = self.expect_line("HOLDER", limit);
            line["HOLDER ".len()..].parse().expect("holder pid")
        });
        holder_pins.pin(holder);
        self.expect_line("HANGING", limit);
        holder
    }

    /// SIGKILLs the host (through a pidfd).
    pub fn sigkill(&self) {
        rustix::process::pidfd_send_signal(pidfd(self.child.id()), rustix::process::Signal::KILL)
            .expect("SIGKILL the host");
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

/// `sh -c 'python3 STUBBORN --pidfile P; exit $?'` (`stubborn`: `stubborn_mcp.py`): a
/// launcher shell that stays (the `; exit` keeps a shell from exec'ing its last command), as
/// `npm exec`'s `sh -c` does.
pub fn behind_sh(stubborn: &Path, pidfile: &Path) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "python3 '{}' --pidfile '{}'; exit $?",
            stubborn.display(),
            pidfile.display()
        ),
    ]
}

/// Makes `project` a project directory whose `node_modules/.bin/stubborn-mcp` is
/// `stubborn_js` (the node stubborn fixture, `stubborn_mcp.js`), and returns the command
/// `npx --no-install stubborn-mcp --pidfile P` to run from it: the launcher chain a host's
/// `"command": "npx"` gives (npx → `npm exec` → `sh -c stubborn-mcp` → node), with no network.
pub fn npx_project(project: &Path, stubborn_js: &Path, pidfile: &Path) -> Vec<String> {
    let bin_dir = project.join("node_modules/.bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::write(
        project.join("package.json"),
        r#"{"name": "mcp-host-test", "private": true}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink(stubborn_js, bin_dir.join("stubborn-mcp")).unwrap();
    ["npx", "--no-install", "stubborn-mcp", "--pidfile"]
        .iter()
        .map(|s| s.to_string())
        .chain([pidfile.display().to_string()])
        .collect()
}
