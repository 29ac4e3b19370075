//! `stdin="pipe"` / `stdout="pipe"` and the stderr line socket: the spawn's stdio for the
//! Python layer's MCP adapter (`childguard.mcp`) and for `spawn(stdin=PIPE, stdout=PIPE)`.
//!
//! The pipes are the library's (`ChildHandle::take_stdin`/`take_stdout`): the Python layer
//! takes our ends out of the handle, so each has one owner, and closes them itself — stdin
//! before the close starts, so the server's EOF comes at the moment the close's first rung
//! starts counting (see `python/childguard/_server.py`).
//!
//! The line socket carries the captured stderr's lines (each with its `\n`) to the Python
//! layer, which passes them on to a file (`errlog=`). A `UnixStream` pair: our end stays in the
//! library's `Capture::on_line` callback (run on its callback thread, never the thread reading
//! the pipes), the other is handed to Python. Why not a Python callable called with the GIL
//! from the callback thread: taking the GIL from a foreign thread during interpreter shutdown
//! may hang or end that thread, and the callback thread is shared by every handle. When the
//! capture ends (every holder of the server's stderr gone) the callback is dropped with our
//! end, and the Python reader sees EOF.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use childguard::Capture;
use pyo3::prelude::*;

use crate::errors::config_error;

/// Makes the child's stdin and/or stdout a pipe; refuses combinations that give one fd two
/// meanings.
pub fn pipes(
    py: Python<'_>,
    cmd: &mut Command,
    stdin_pipe: bool,
    stdout_pipe: bool,
    conflicts: (&Option<&str>, bool, bool),
) -> PyResult<()> {
    let (socket, stdin_null, stdout_null) = conflicts;
    let socket_on_stdio = matches!(socket, Some("stdio"));
    if stdin_pipe && (socket_on_stdio || stdin_null) {
        return Err(config_error(
            py,
            "stdin=\"pipe\": the child's stdin is already the socket (socket=\"stdio\") or \
             /dev/null (stdin=DEVNULL)",
        ));
    }
    if stdout_pipe && (socket_on_stdio || stdout_null) {
        return Err(config_error(
            py,
            "stdout=\"pipe\": the child's stdout is already the socket (socket=\"stdio\") or \
             /dev/null (stdout=DEVNULL)",
        ));
    }
    if stdin_pipe {
        cmd.stdin(Stdio::piped());
    }
    if stdout_pipe {
        cmd.stdout(Stdio::piped());
    }
    Ok(())
}

/// Adds the line socket to `capture`: every captured line, with its `\n`, written to our end
/// (blocking: a Python reader that falls behind delays the callback thread only, and the
/// library drops — and counts in the report's notes — the lines its queue cannot hold). A
/// write error (the Python end closed) stops the writes. Returns the capture and Python's end.
pub fn line_socket(py: Python<'_>, capture: Capture) -> PyResult<(Capture, UnixStream)> {
    let (ours, theirs) = UnixStream::pair()
        .map_err(|e| config_error(py, format!("errlog: cannot make the line socket: {e}")))?;
    let ours = Mutex::new(Some(ours));
    let capture = capture.on_line(move |_stream, line| {
        let mut guard = ours.lock().unwrap_or_else(|p| p.into_inner());
        let failed = guard
            .as_mut()
            .is_some_and(|s| s.write_all(line).and_then(|()| s.write_all(b"\n")).is_err());
        if failed {
            *guard = None;
        }
    });
    Ok((capture, theirs))
}
