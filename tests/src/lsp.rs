//! A tiny Language Server Protocol client over a child's piped stdin/stdout (issue 31 item 7):
//! `Content-Length:` framing, JSON through serde_json, and every read bounded by a deadline —
//! a `poll` with a timeout on the stdout fd, so a server that stops answering never hangs a
//! test. The client owns the server's stdout; it writes to whatever stdin it is lent for each
//! call (`handle.stdin()`), so that our end of the stdin stays in the handle and the close
//! closes it (EOF for the server).
//!
//! While it waits for a response, the client answers the server's own requests the way a
//! minimal editor does: `workspace/configuration` with one `null` per item asked, anything
//! else with a `null` result. Notifications are kept in [`LspClient::notifications`].

use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Why no message came.
#[derive(Debug)]
pub enum LspError {
    /// Nothing complete came within the deadline.
    Timeout(Duration),
    /// The server closed its stdout (it exited, or closed it).
    Eof,
    /// A read, write or poll failed.
    Io(io::Error),
    /// The bytes are not an LSP message: a header without `Content-Length`, a body that is
    /// not JSON …
    BadFrame(String),
    /// The server answered our request with an error object.
    ErrorResponse(Value),
}

impl fmt::Display for LspError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LspError::Timeout(d) => write!(f, "no complete LSP message within {d:?}"),
            LspError::Eof => f.write_str("the server closed its stdout"),
            LspError::Io(e) => write!(f, "LSP I/O: {e}"),
            LspError::BadFrame(why) => write!(f, "not an LSP message: {why}"),
            LspError::ErrorResponse(e) => write!(f, "the server answered with an error: {e}"),
        }
    }
}

impl std::error::Error for LspError {}

/// The largest message body accepted (a bound against a garbled `Content-Length`).
const MAX_BODY: usize = 64 << 20;

/// Writes one message: `Content-Length: N\r\n\r\n` and the JSON body, then flushes.
pub fn write_message(to: &mut impl Write, message: &Value) -> io::Result<()> {
    let body = serde_json::to_vec(message).map_err(io::Error::other)?;
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(&body);
    to.write_all(&frame)?;
    to.flush()
}

/// The client side of one LSP connection: reads the server's stdout `R`.
#[derive(Debug)]
pub struct LspClient<R> {
    from: R,
    buf: Vec<u8>,
    next_id: i64,
    /// The server's notifications seen so far (`window/logMessage`, diagnostics …), in order.
    pub notifications: Vec<Value>,
    /// The methods of the server's requests the client answered, in order.
    pub answered: Vec<String>,
}

impl<R: Read + AsFd> LspClient<R> {
    /// A client reading the server's stdout `from` (e.g. `handle.take_stdout()`).
    pub fn new(from: R) -> LspClient<R> {
        LspClient {
            from,
            buf: Vec::new(),
            next_id: 1,
            notifications: Vec::new(),
            answered: Vec::new(),
        }
    }

    /// Sends the notification `method` with `params`.
    pub fn notify(&mut self, to: &mut impl Write, method: &str, params: Value) -> io::Result<()> {
        write_message(
            to,
            &json!({"jsonrpc": "2.0", "method": method, "params": params}),
        )
    }

    /// Sends the request `method` with `params` (`Value::Null`: none) and returns its id.
    pub fn send_request(
        &mut self,
        to: &mut impl Write,
        method: &str,
        params: Value,
    ) -> io::Result<i64> {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if !params.is_null() {
            message["params"] = params;
        }
        write_message(to, &message)?;
        Ok(id)
    }

    /// Sends the request and waits up to `wait` for its response, answering the server's
    /// requests meanwhile. Returns the response's `result`.
    pub fn request(
        &mut self,
        to: &mut impl Write,
        method: &str,
        params: Value,
        wait: Duration,
    ) -> Result<Value, LspError> {
        let id = self
            .send_request(to, method, params)
            .map_err(LspError::Io)?;
        self.response(to, id, wait)
    }

    /// Waits up to `wait` for the response to request `id`, answering the server's requests
    /// (through `to`) and keeping its notifications meanwhile.
    pub fn response(
        &mut self,
        to: &mut impl Write,
        id: i64,
        wait: Duration,
    ) -> Result<Value, LspError> {
        let deadline = Instant::now() + wait;
        loop {
            let message = match self.read_message(deadline) {
                Err(LspError::Timeout(_)) => return Err(LspError::Timeout(wait)),
                other => other?,
            };
            let has_method = message.get("method").is_some();
            match (message.get("id"), has_method) {
                // A response: ours, or a late one to an earlier request (dropped).
                (Some(got), false) => {
                    if got.as_i64() != Some(id) {
                        continue;
                    }
                    if let Some(error) = message.get("error") {
                        return Err(LspError::ErrorResponse(error.clone()));
                    }
                    return Ok(message.get("result").cloned().unwrap_or(Value::Null));
                }
                // A request of the server's.
                (Some(server_id), true) => {
                    let method = message["method"].as_str().unwrap_or_default().to_owned();
                    let result = match method.as_str() {
                        "workspace/configuration" => {
                            let items = message["params"]["items"].as_array().map_or(0, Vec::len);
                            Value::Array(vec![Value::Null; items])
                        }
                        _ => Value::Null,
                    };
                    let reply = json!({"jsonrpc": "2.0", "id": server_id, "result": result});
                    write_message(to, &reply).map_err(LspError::Io)?;
                    self.answered.push(method);
                }
                (None, _) => self.notifications.push(message),
            }
        }
    }

    /// Reads one whole message, waiting until `deadline` at most: each wait for bytes is a
    /// `poll` on the fd bounded by the time left, never a blocking read.
    pub fn read_message(&mut self, deadline: Instant) -> Result<Value, LspError> {
        let wait = deadline.saturating_duration_since(Instant::now());
        loop {
            if let Some(message) = self.take_buffered()? {
                return Ok(message);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.wait_readable(left)? {
                return Err(LspError::Timeout(wait));
            }
            let mut chunk = [0u8; 64 * 1024];
            // Readable: this read does not block (it returns what is there, or 0 at EOF).
            let n = match self.from.read(&mut chunk) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                n => n.map_err(LspError::Io)?,
            };
            if n == 0 {
                return Err(LspError::Eof);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Whether the fd became readable (or hung up) within `wait`.
    fn wait_readable(&self, wait: Duration) -> Result<bool, LspError> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let end = Instant::now() + wait;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let timeout = Timespec::try_from(left)
                .map_err(|_| LspError::BadFrame(format!("a wait of {left:?} is too long")))?;
            let mut fds = [PollFd::new(&self.from, PollFlags::IN)];
            match poll(&mut fds, Some(&timeout)) {
                Ok(n) => return Ok(n > 0),
                // A signal handler in this process (SIGCHLD: ours, tokio's) interrupts the poll.
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(LspError::Io(e.into())),
            }
        }
    }

    /// The first whole message in the buffer, removed from it; `None` if it is not all there.
    fn take_buffered(&mut self) -> Result<Option<Value>, LspError> {
        let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            if self.buf.len() > 8192 {
                return Err(LspError::BadFrame(format!(
                    "8 KiB without the end of a header: {:?}",
                    String::from_utf8_lossy(&self.buf[..200])
                )));
            }
            return Ok(None);
        };
        let header = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        let length = header
            .split("\r\n")
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.trim()
                    .eq_ignore_ascii_case("Content-Length")
                    .then(|| value.trim().parse::<usize>())
            })
            .ok_or_else(|| LspError::BadFrame(format!("no Content-Length in {header:?}")))?
            .map_err(|e| LspError::BadFrame(format!("bad Content-Length in {header:?}: {e}")))?;
        if length > MAX_BODY {
            return Err(LspError::BadFrame(format!(
                "Content-Length {length} is over {MAX_BODY}"
            )));
        }
        let body_start = end + 4;
        if self.buf.len() < body_start + length {
            return Ok(None);
        }
        let body: Vec<u8> = self
            .buf
            .drain(..body_start + length)
            .skip(body_start)
            .collect();
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| LspError::BadFrame(format!("body is not JSON: {e}")))
    }

    /// The server's stdout back (e.g. to read what it writes after the protocol ended).
    pub fn into_inner(self) -> R {
        self.from
    }
}

/// A `file://` URI for an absolute path of plain characters (the tests' scratch paths).
pub fn file_uri(path: &std::path::Path) -> String {
    format!("file://{}", path.display())
}
