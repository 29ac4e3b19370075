//! [`NotReady`]: why a readiness wait ended without the condition holding.

use std::io;
use std::process::ExitStatus;

use crate::core::wait;

/// Why the server did not become ready.
#[derive(Debug)]
pub(crate) enum NotReady {
    /// It exited first.
    Exited(ExitStatus),
    /// It was reaped by someone else before it became ready.
    Lost,
    /// It sent `ERRNO=`.
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    // Linux-only callers
    Errno(i32),
    /// The timeout passed; with an HTTP or exec condition, what its last attempt got.
    TimedOut(Option<String>),
    /// Waiting failed (or a `Connect` failure no retry fixes).
    Failed(io::Error),
    /// The caller's [`Interrupt`](crate::Interrupt) check ended the wait (its error).
    Interrupted(io::Error),
}

impl NotReady {
    /// A failed wait: [`NotReady::Interrupted`] if the interrupt check ended it.
    pub(super) fn from_wait(e: io::Error) -> NotReady {
        if wait::is_interrupt(&e) {
            NotReady::Interrupted(e)
        } else {
            NotReady::Failed(e)
        }
    }
}
