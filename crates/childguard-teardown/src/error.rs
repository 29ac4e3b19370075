//! Why [`enable`](crate::enable) failed.

use std::fmt;
use std::io;
use std::time::Duration;

/// Why [`enable`](crate::enable) could not start the teardown helper.
///
/// Every failure leaves the process as it was: no helper is left running (a helper that failed
/// its setup has exited and been reaped), and the process exits the ordinary way, paying for its
/// own memory teardown.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Not available on this operating system (only Linux has `clone(CLONE_VM)` and pidfds).
    Unsupported,
    /// A system call made by `enable()` itself failed, e.g. `pidfd_open` (`ENOSYS`: Linux older
    /// than 5.3), `mmap` for the helper's stack, or `clone` (`EAGAIN`: process limit, or a
    /// seccomp policy refusing it).
    Sys {
        /// The call, e.g. `"clone"`.
        call: &'static str,
        /// The error it returned.
        source: io::Error,
    },
    /// The helper started but one of its setup steps failed; it has exited.
    HelperSetup {
        /// The step, e.g. `"setsid"`.
        step: &'static str,
        /// The error it returned.
        source: io::Error,
    },
    /// The helper disappeared during its setup without reporting a failure (someone killed it).
    HelperVanished,
    /// The helper did not finish its setup in this time; it was killed.
    Timeout(Duration),
}

#[cfg(target_os = "linux")]
impl Error {
    pub(crate) fn sys(call: &'static str, source: io::Error) -> Self {
        Error::Sys { call, source }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unsupported => f.write_str("asynchronous teardown is only supported on Linux"),
            Error::Sys { call, source } => {
                write!(f, "cannot start the teardown helper: {call}: {source}")
            }
            Error::HelperSetup { step, source } => {
                write!(f, "teardown helper failed to set up: {step}: {source}")
            }
            Error::HelperVanished => {
                f.write_str("teardown helper disappeared during its setup (killed?)")
            }
            Error::Timeout(limit) => write!(
                f,
                "teardown helper did not finish its setup within {limit:?}; it was killed"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Sys { source, .. } | Error::HelperSetup { source, .. } => Some(source),
            _ => None,
        }
    }
}
