//! childguard errors → the Python exception classes of `childguard._errors`.
//!
//! The classes are Python's (so that they subclass, pickle and type like any exception); the
//! native module only chooses the class by [`ErrorKind`] and gives it the Rust error's message,
//! word for word, and its parts: the program, the errno, the output tail, the close report.

use childguard::{CloseReport, Error, ErrorKind};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// The kind's name, as `childguard.Error.kind` reads it.
fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Socket => "socket",
        ErrorKind::Spawn => "spawn",
        ErrorKind::Pidfd => "pidfd",
        ErrorKind::Signal => "signal",
        ErrorKind::Wait => "wait",
        ErrorKind::SigchldIgnored => "sigchld_ignored",
        ErrorKind::Config => "config",
        ErrorKind::Containment => "containment",
        ErrorKind::Connect => "connect",
        ErrorKind::Ready => "ready",
        ErrorKind::Inherited => "inherited",
        ErrorKind::CrashLoop => "crash_loop",
        _ => "other",
    }
}

/// A close report as the Python layer takes it: its one-line `Display` and its serde JSON.
pub fn report_parts(report: &CloseReport) -> (String, String) {
    let json = serde_json::to_string(report)
        .unwrap_or_else(|e| format!("{{\"error\":\"report not serializable: {e}\"}}"));
    (report.to_string(), json)
}

/// Builds the exception through `childguard._errors.from_native`.
fn build(
    py: Python<'_>,
    kind: &str,
    message: String,
    program: Option<&str>,
    errno: Option<i32>,
    output_tail: Option<&str>,
    report: Option<(String, String)>,
) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let module = py.import("childguard._errors")?;
        let exc = module.getattr("from_native")?.call1((
            kind,
            message.as_str(),
            program,
            errno,
            output_tail,
            report,
        ))?;
        Ok(PyErr::from_value(exc))
    })();
    // Only a broken install (no childguard/_errors.py) gets here: say so, with the message.
    made.unwrap_or_else(|e| {
        PyRuntimeError::new_err(format!("{message} (and childguard._errors failed: {e})"))
    })
}

/// A childguard [`Error`] as the Python exception of its kind.
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    build(
        py,
        kind_name(e.kind()),
        e.to_string(),
        e.program(),
        e.raw_os_error(),
        e.output_tail(),
        e.close_report().map(report_parts),
    )
}

/// `ConfigError(message)`: an argument the Python caller passed was rejected.
pub fn config_error(py: Python<'_>, message: impl Into<String>) -> PyErr {
    build(py, "config", message.into(), None, None, None, None)
}

/// `ClosedError`: the handle was closed (or detached) already.
pub fn closed_error(py: Python<'_>, program: &str, call: &str) -> PyErr {
    build(
        py,
        "closed",
        format!("{call} on `{program}`: the server was closed already"),
        Some(program),
        None,
        None,
        None,
    )
}

/// `InheritedError`: a `Server` used in a process made by `os.fork()` from the one that
/// spawned it. Its server is the parent's (only the parent may signal, wait for or close it),
/// and the handle's lock may have been held by a thread of the parent at the fork (this
/// process does not have that thread: the lock would never be released), so nothing of it is
/// touched.
pub fn inherited_error(py: Python<'_>, program: &str, owner: u32, call: &str) -> PyErr {
    build(
        py,
        "inherited",
        format!(
            "{call} on `{program}`: this Server was inherited through os.fork(): its server \
             belongs to process {owner}, which spawned it; only that process may use or close \
             it (this is process {})",
            std::process::id()
        ),
        Some(program),
        None,
        None,
        None,
    )
}

/// `ClosedError` for a wait cut short by a `close()` (or `detach()`) on another thread.
pub fn closed_during_wait(py: Python<'_>, program: &str, call: &str) -> PyErr {
    build(
        py,
        "closed",
        format!("{call} on `{program}`: the server was closed by another thread during the wait"),
        Some(program),
        None,
        None,
        None,
    )
}

/// `WaitError`: polling the child's pidfd (or waiting for `SIGCHLD`) failed.
pub fn wait_error(py: Python<'_>, program: &str, e: std::io::Error) -> PyErr {
    build(
        py,
        "wait",
        format!("waiting for `{program}`: {e}"),
        Some(program),
        e.raw_os_error(),
        None,
        None,
    )
}
