//! Linux: a child observed through its pidfd.
//!
//! Race avoided (PID reuse): a pid names a process only until it is reaped; after that the
//! kernel may hand it to a stranger. A pidfd names the process itself, so signals sent through
//! it after the child died fail with `ESRCH` instead of reaching whoever got the pid.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::ExitStatus;
use std::time::Instant;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::process::{pidfd_open, pidfd_send_signal, PidfdFlags, WaitId};

use crate::signal::Signal;
use crate::sys;

#[derive(Debug)]
pub(crate) struct PidFd(OwnedFd);

impl PidFd {
    /// `pidfd_open(2)` for our unreaped child `pid`, verified to be our child.
    pub(crate) fn open_child(pid: u32) -> io::Result<PidFd> {
        let pid = super::pid(pid)?;
        let fd = PidFd(pidfd_open(pid, PidfdFlags::empty())?);
        // waitid on a pidfd that is not our child fails with ECHILD: proof we got the right one.
        fd.observe_exit(false)?;
        Ok(fd)
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// `pidfd_send_signal(2)`.
    pub(crate) fn send(&self, signal: Signal) -> io::Result<()> {
        Ok(pidfd_send_signal(&self.0, sys::rustix_signal(signal)?)?)
    }

    /// `waitid(P_PIDFD)`: see [`super::observe_exit`].
    pub(crate) fn observe_exit(&self, reap: bool) -> io::Result<Option<ExitStatus>> {
        super::observe_exit(WaitId::PidFd(self.0.as_fd()), reap)
    }

    /// `poll(2)` until the pidfd is readable (the child exited) or `deadline` passes.
    pub(crate) fn wait_readable(&self, deadline: Instant) -> io::Result<()> {
        poll_until(&[self.0.as_fd()], deadline)
    }
}

/// Polls `fds` for readability until one is readable or `deadline` passes. EINTR counts as a
/// wake-up (the caller re-checks).
pub(crate) fn poll_until(fds: &[BorrowedFd<'_>], deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    // The kernel lets a poll timeout fire late by 0.1% of its length (0.5% when niced; at
    // least the 50 µs timer slack): 1 ms late on a 1 s rung. Aim that much early instead;
    // every caller re-polls until the deadline has really passed, so the remainder is short.
    let left = left - left / 200;
    let timeout = rustix::event::Timespec::try_from(left).unwrap_or(rustix::event::Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    });
    // One pidfd is the common case (a child that leads no group): no allocation for it.
    let polled = match fds {
        [fd] => poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&timeout)),
        _ => {
            let mut pollfds: Vec<PollFd<'_>> = fds
                .iter()
                .map(|fd| PollFd::new(fd, PollFlags::IN))
                .collect();
            poll(&mut pollfds, Some(&timeout))
        }
    };
    match polled {
        Ok(_) => Ok(()),
        Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
