//! Newline-delimited JSON read within a deadline (MCP's stdio framing, and the SDK scripts'
//! two lines), and the `initialize` round-trip written by hand.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::Result;

/// The `initialize` request (id 1), as every side sends it.
pub fn initialize_request() -> serde_json::Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "childguard-bench", "version": "1.0.0"},
        },
    })
}

/// The `notifications/initialized` that ends the handshake.
pub fn initialized_notification() -> serde_json::Value {
    serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
}

/// Lines of JSON from a pipe, each read within a deadline.
#[derive(Debug)]
pub struct Lines<R> {
    reader: R,
    buffered: Vec<u8>,
}

impl<R: Read + AsFd> Lines<R> {
    pub fn new(reader: R) -> Lines<R> {
        Lines {
            reader,
            buffered: Vec::new(),
        }
    }

    /// The next line, parsed as JSON. `what` names the peer in errors.
    pub fn next_json(&mut self, timeout: Duration, what: &str) -> Result<serde_json::Value> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(end) = self.buffered.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffered.drain(..=end).collect();
                let text = String::from_utf8_lossy(&line);
                if text.trim().is_empty() {
                    continue;
                }
                return serde_json::from_str(&text)
                    .map_err(|e| format!("{what}: not a JSON line ({e}): {text:?}").into());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("{what}: no line within {timeout:?}").into());
            }
            let wait = Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let fd = self.reader.as_fd();
            match poll(&mut [PollFd::new(&fd, PollFlags::IN)], Some(&wait)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => {}
                Err(e) => return Err(format!("{what}: poll: {e}").into()),
            }
            let mut chunk = [0u8; 8192];
            let n = match self.reader.read(&mut chunk) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                n => n.map_err(|e| format!("{what}: read: {e}"))?,
            };
            if n == 0 {
                let seen = String::from_utf8_lossy(&self.buffered);
                return Err(format!("{what}: end of output (unfinished: {seen:?})").into());
            }
            self.buffered.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The `initialize` round-trip over a server's stdin and stdout, then `initialized`: the
/// server is up and past its handshake when this returns.
pub fn initialize<W: Write, R: Read + AsFd>(
    stdin: &mut W,
    stdout: &mut Lines<R>,
    timeout: Duration,
    what: &str,
) -> Result<()> {
    writeln!(stdin, "{}", initialize_request())?;
    stdin.flush()?;
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = stdout.next_json(left, what)?;
        if message["id"] != 1 {
            continue; // a notification or a request of the server's: not our answer
        }
        if message.get("result").is_none() {
            return Err(format!("{what}: initialize failed: {message}").into());
        }
        break;
    }
    writeln!(stdin, "{}", initialized_notification())?;
    stdin.flush()?;
    Ok(())
}
