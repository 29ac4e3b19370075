//! Messages on stderr (and the few lines on stdout) that never panic.
//!
//! `eprintln!` panics when stderr is closed or full (`2>/dev/full`, `2>&1 | :` after the reader
//! left), and a panic would leave CMD unsupervised. Here a failed write is dropped: what
//! childguard has to say is worth less than finishing the supervision and exiting with the
//! right status. (Rust's runtime ignores `SIGPIPE`, so a write to a closed pipe is `EPIPE`,
//! never a signal.)

use std::fmt;
use std::io::{self, Write};
use std::sync::OnceLock;

/// The prefix of every message: `childguard`, or `timeout` when run under that name.
static PROGRAM: OnceLock<&'static str> = OnceLock::new();

/// Sets the prefix (once, before the first message).
pub fn set_program(name: &'static str) {
    let _ = PROGRAM.set(name);
}

/// The prefix of every message.
pub fn program() -> &'static str {
    PROGRAM.get().copied().unwrap_or("childguard")
}

/// Writes `PROGRAM: message` and a newline to stderr; a failed write is dropped.
pub fn say_line(message: fmt::Arguments<'_>) {
    let line = format!("{}: {message}\n", program());
    let _ = io::stderr().lock().write_all(line.as_bytes());
}

/// Writes `text` to stderr as it is; a failed write is dropped.
pub fn raw_stderr(text: &str) {
    let _ = io::stderr().lock().write_all(text.as_bytes());
}

/// Writes `text` to stdout and flushes; returns whether it got through.
pub fn stdout(text: &str) -> bool {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

/// `say!("…", args)`: [`say_line`] with `format!` syntax.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::messages::say_line(format_args!($($arg)*))
    };
}
pub(crate) use say;
