//! Status codes, the per-thread last error, and the guard every entry point runs in: no panic
//! crosses into C.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use childguard::ErrorKind;

/// What a call returns: `CG_OK`, `CG_RUNNING` (only `cg_try_wait()` / `cg_wait_timeout()`:
/// the child has not exited; no failure), or which step failed. The message of the last
/// failure on this thread is `cg_last_error_message()`.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum cg_status {
    /// Success.
    CG_OK = 0,
    /// A required pointer argument was NULL.
    CG_ERR_NULL_ARGUMENT = 1,
    /// An argument was out of range or malformed (an unknown mode, a signal number that does
    /// not exist, a string that is not UTF-8, an address that does not parse).
    CG_ERR_INVALID_ARGUMENT = 2,
    /// A configuration value was rejected (a ladder string that does not parse, …).
    CG_ERR_CONFIG = 3,
    /// Creating the socket (or the socket directory) before spawning failed.
    CG_ERR_SOCKET = 4,
    /// `fork`/`exec` of the program failed (not found, not executable, out of fds …).
    CG_ERR_SPAWN = 5,
    /// Taking the spawned child over failed (pidfd and the portable fallback).
    CG_ERR_PIDFD = 6,
    /// Sending a signal failed.
    CG_ERR_SIGNAL = 7,
    /// Waiting for or reaping the child failed.
    CG_ERR_WAIT = 8,
    /// This process ignores `SIGCHLD` (or set `SA_NOCLDWAIT`): children cannot be waited for.
    CG_ERR_SIGCHLD_IGNORED = 9,
    /// Making the child's cgroup, or placing the child in it, failed.
    CG_ERR_CONTAINMENT = 10,
    /// Connecting to a socket-activated server failed.
    CG_ERR_CONNECT = 11,
    /// The server did not become ready (it exited first, or the ready timeout passed).
    CG_ERR_READY = 12,
    /// The handle's child belongs to another process (inherited through `fork()`).
    CG_ERR_INHERITED = 13,
    /// A bug in childguard: a Rust panic, caught at the boundary. The message says where.
    CG_ERR_PANIC = 14,
    /// Any other failure (a newer childguard error kind); the message says what.
    CG_ERR_OTHER = 15,
    /// Not a failure: `cg_try_wait()` found the child still running, or `cg_wait_timeout()`'s
    /// timeout passed before it exited. The last error is left as it was.
    CG_RUNNING = 16,
    /// A wait was ended by its `cg_cancel` (`cg_builder_cancel`, `cg_wait_timeout_cancel`,
    /// `cg_close_cancel`): what became of the child depends on the call (see `cg_cancel`).
    CG_ERR_INTERRUPTED = 17,
    /// A supervisor gave up: its crash-loop limit was reached, or the start could not be made
    /// again; the message names the last exits and their output.
    CG_ERR_CRASH_LOOP = 18,
}

impl cg_status {
    pub(crate) fn of(kind: ErrorKind) -> cg_status {
        match kind {
            ErrorKind::Socket => cg_status::CG_ERR_SOCKET,
            ErrorKind::Spawn => cg_status::CG_ERR_SPAWN,
            ErrorKind::Pidfd => cg_status::CG_ERR_PIDFD,
            ErrorKind::Signal => cg_status::CG_ERR_SIGNAL,
            ErrorKind::Wait => cg_status::CG_ERR_WAIT,
            ErrorKind::SigchldIgnored => cg_status::CG_ERR_SIGCHLD_IGNORED,
            ErrorKind::Config => cg_status::CG_ERR_CONFIG,
            ErrorKind::Containment => cg_status::CG_ERR_CONTAINMENT,
            ErrorKind::Connect => cg_status::CG_ERR_CONNECT,
            ErrorKind::Ready => cg_status::CG_ERR_READY,
            ErrorKind::Inherited => cg_status::CG_ERR_INHERITED,
            ErrorKind::Interrupted => cg_status::CG_ERR_INTERRUPTED,
            ErrorKind::CrashLoop => cg_status::CG_ERR_CRASH_LOOP,
            _ => cg_status::CG_ERR_OTHER,
        }
    }
}

/// A failed call: its status and its message (without the function's name, added by
/// [`guard`]).
#[derive(Debug)]
pub(crate) struct Failure {
    status: cg_status,
    message: String,
}

impl Failure {
    pub(crate) fn new(status: cg_status, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn null(what: &str) -> Failure {
        Failure::new(cg_status::CG_ERR_NULL_ARGUMENT, format!("{what} is NULL"))
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(cg_status::CG_ERR_INVALID_ARGUMENT, message)
    }
}

impl From<childguard::Error> for Failure {
    fn from(e: childguard::Error) -> Failure {
        Failure::new(cg_status::of(e.kind()), e.to_string())
    }
}

thread_local! {
    /// The last failure on this thread, as C reads it.
    static LAST: RefCell<Option<(cg_status, CString)>> = const { RefCell::new(None) };
}

fn record(function: &str, failure: Failure) -> cg_status {
    // A message with a NUL in it (from a program's output) is cut there rather than lost.
    let text = format!("{function}: {}", failure.message);
    let text = match CString::new(text) {
        Ok(s) => s,
        Err(e) => {
            let cut = e.nul_position();
            let mut bytes = e.into_vec();
            bytes.truncate(cut);
            CString::new(bytes).unwrap_or_default()
        }
    };
    let status = failure.status;
    // `try_with`: during this thread's exit (a call from a C thread-local destructor) the
    // slot may be gone; the status is still returned, the message is lost.
    let _ = LAST.try_with(|last| {
        if let Ok(mut last) = last.try_borrow_mut() {
            *last = Some((status, text));
        }
    });
    status
}

/// Runs an entry point's body: a failure is recorded as this thread's last error and its
/// status returned; a panic is caught and becomes `CG_ERR_PANIC`.
pub(crate) fn guard<T>(
    function: &str,
    on_failure: impl FnOnce(cg_status) -> T,
    body: impl FnOnce() -> Result<T, Failure>,
) -> T {
    // AssertUnwindSafe: after a panic the objects the body touched are either dropped by the
    // unwind (a handle taken for a close is closed by its Drop) or left as they were before
    // the call's last step; the caller is told the call failed and frees them as usual.
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => return value,
        Ok(Err(failure)) => failure,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Failure::new(
                cg_status::CG_ERR_PANIC,
                format!("internal error (a Rust panic, caught): {what}"),
            )
        }
    };
    on_failure(record(function, failure))
}

/// [`guard`] for a call that returns a status.
pub(crate) fn guard_status(
    function: &str,
    body: impl FnOnce() -> Result<(), Failure>,
) -> cg_status {
    guard(
        function,
        |status| status,
        || body().map(|()| cg_status::CG_OK),
    )
}

/// The status of the last failed call on the calling thread (`CG_OK` if none failed yet).
///
/// Thread-safety: per thread; safe to call from any thread at any time.
#[no_mangle]
pub extern "C" fn cg_last_error_code() -> cg_status {
    LAST.try_with(|last| last.try_borrow().ok()?.as_ref().map(|(s, _)| *s))
        .ok()
        .flatten()
        .unwrap_or(cg_status::CG_OK)
}

/// The message of the last failed call on the calling thread, naming the function, what
/// failed and why (e.g. `cg_spawn: spawning \`nope\`: No such file or directory (os error
/// 2)`), or NULL if no call failed on this thread yet.
///
/// Ownership: the string belongs to the library; it stays valid until the next failing call
/// on this thread. Do not free it; copy it to keep it.
///
/// Thread-safety: per thread; safe to call from any thread at any time.
#[no_mangle]
pub extern "C" fn cg_last_error_message() -> *const c_char {
    LAST.try_with(|last| Some(last.try_borrow().ok()?.as_ref()?.1.as_ptr()))
        .ok()
        .flatten()
        .unwrap_or(std::ptr::null())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's last message, read from the slot `cg_last_error_message` points into.
    fn last_message() -> String {
        LAST.with(|last| {
            let last = last.borrow();
            let (_, text): &(cg_status, CString) = last.as_ref().expect("no message recorded");
            assert_eq!(cg_last_error_message(), text.as_ptr());
            text.to_string_lossy().into_owned()
        })
    }

    #[test]
    fn a_panic_becomes_cg_err_panic_with_its_message() {
        let got = guard_status("cg_test_entry", || panic!("boom at the boundary"));
        assert_eq!(got, cg_status::CG_ERR_PANIC);
        assert_eq!(cg_last_error_code(), cg_status::CG_ERR_PANIC);
        let message = last_message();
        assert!(
            message.starts_with("cg_test_entry: internal error"),
            "{message}"
        );
        assert!(message.contains("boom at the boundary"), "{message}");
        // A pointer-returning entry point returns its failure value.
        let p: *mut u8 = guard("cg_other", |_| std::ptr::null_mut(), || panic!("{}", 7));
        assert!(p.is_null());
        assert!(last_message().contains("cg_other: internal error (a Rust panic, caught): 7"));
    }

    #[test]
    fn a_failure_is_recorded_per_thread_and_cut_at_a_nul() {
        let got = guard_status("cg_x", || Err(Failure::invalid("bad\0hidden")));
        assert_eq!(got, cg_status::CG_ERR_INVALID_ARGUMENT);
        assert_eq!(last_message(), "cg_x: bad");
        std::thread::spawn(|| {
            assert_eq!(cg_last_error_code(), cg_status::CG_OK);
            assert!(cg_last_error_message().is_null());
        })
        .join()
        .unwrap();
        assert_eq!(guard_status("cg_y", || Ok(())), cg_status::CG_OK);
        assert_eq!(
            cg_last_error_code(),
            cg_status::CG_ERR_INVALID_ARGUMENT,
            "kept until the next failure"
        );
    }
}
