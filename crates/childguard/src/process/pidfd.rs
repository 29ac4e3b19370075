//! Linux: a child observed through its pidfd.
//!
//! Race avoided (PID reuse): a pid names a process only until it is reaped; after that the
//! kernel may hand it to a stranger. A pidfd names the process itself, so signals sent through
//! it after the child died fail with `ESRCH` instead of reaching whoever got the pid.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::ExitStatus;
use std::sync::OnceLock;

use rustix::process::{pidfd_open, pidfd_send_signal, PidfdFlags, WaitId};

use crate::base::signal::Signal;
use crate::failpoint::{self, Point};
use crate::sys;

#[derive(Debug)]
pub(crate) struct PidFd(OwnedFd);

/// Why this process supervises its children without pidfds, once a failure said they cannot
/// work here (`None`: they can, as far as we know).
static UNUSABLE: OnceLock<Unusable> = OnceLock::new();

/// A failure of `pidfd_open` or of the verifying `waitid(P_PIDFD)`, with the step it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unusable {
    /// `"pidfd_open"` or `"waitid(P_PIDFD)"`.
    pub(crate) step: &'static str,
    pub(crate) errno: i32,
    /// Whether the failure holds for the whole process (so later spawns do not even try).
    pub(crate) cached: bool,
}

impl Unusable {
    /// Errors that say pidfds cannot work in this process at all, not just now: `ENOSYS`
    /// (kernel < 5.3), `EINVAL` (5.3 has `pidfd_open` but `waitid` knows no `P_PIDFD`;
    /// nothing else we pass can be invalid), `EPERM`/`EACCES` (a seccomp profile or an LSM).
    /// Anything else (`EMFILE`, `ENFILE`, `ENOMEM` …) may pass: that spawn falls back alone.
    fn holds_for_the_process(errno: i32) -> bool {
        matches!(
            errno,
            libc::ENOSYS | libc::EINVAL | libc::EPERM | libc::EACCES
        )
    }
}

impl PidFd {
    /// `pidfd_open(2)` for our unreaped child `pid`, verified to be our child — or why not.
    ///
    /// Probed once, as tokio's `pidfd_reaper` does: after a failure that holds for the whole
    /// process (see [`Unusable`]), later calls answer at once without a system call. Every
    /// failure, cached or not, sends the caller to the portable mechanism: an error here never
    /// fails a spawn.
    ///
    /// `born`: the pidfd `clone3` gave at the child's birth (our own spawn), used instead of
    /// opening one; it is verified alike.
    pub(crate) fn open_child(pid: u32, born: Option<OwnedFd>) -> Result<PidFd, Unusable> {
        if let Some(known) = UNUSABLE.get() {
            return Err(*known);
        }
        let failed = |step: &'static str, e: io::Error| {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            let cached = Unusable::holds_for_the_process(errno);
            let unusable = Unusable {
                step,
                errno,
                cached,
            };
            if cached {
                // The first such failure is kept; a racing one says the same thing.
                let _ = UNUSABLE.set(unusable);
            }
            unusable
        };
        let fd = match born {
            Some(fd) => PidFd(fd),
            None => {
                let raw = super::pid(pid).map_err(|e| failed("pidfd_open", e))?;
                let opened = crate::failpoint::check(Point::PidfdOpen)
                    .and_then(|()| Ok(pidfd_open(raw, PidfdFlags::empty())?));
                PidFd(opened.map_err(|e| failed("pidfd_open", e))?)
            }
        };
        // waitid on a pidfd that is not our child fails with ECHILD: proof we got the right one.
        // On Linux 5.3 it fails with EINVAL instead (no P_PIDFD yet): no pidfds for us there.
        fd.observe_exit(false)
            .map_err(|e| failed("waitid(P_PIDFD)", e))?;
        Ok(fd)
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// `pidfd_send_signal(2)`.
    pub(crate) fn send(&self, signal: Signal) -> io::Result<()> {
        failpoint::check(Point::PidfdSendSignal)?;
        Ok(pidfd_send_signal(&self.0, sys::rustix_signal(signal)?)?)
    }

    /// `waitid(P_PIDFD)`: see [`super::observe_exit`].
    pub(crate) fn observe_exit(&self, reap: bool) -> io::Result<Option<ExitStatus>> {
        crate::failpoint::check(Point::WaitidPidfd)?;
        super::observe_exit(WaitId::PidFd(self.0.as_fd()), reap)
    }
}
