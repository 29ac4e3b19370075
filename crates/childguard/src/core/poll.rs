//! The small pieces every blocking wait of the library shares today: the saturating deadline,
//! the exit re-check period of the portable (no pidfd) path, and a `poll(2)` on a few fds.
//! Moved here from `close/climb.rs`, `close/close_control.rs` and `spawn/readiness/mod.rs` by
//! the layering (issue 21 item 5), below both the close and the readiness waits that use them;
//! the one wait primitive (`core/wait.rs`, issue 21 item 3) takes their place.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// On the portable mechanism (no pidfd) the child's exit wakes no fd: look at least this often.
pub(crate) const EXIT_CHECK: Duration = Duration::from_millis(5);

/// `at + wait`, saturating: a grace too long for the clock (`Duration::MAX`) means "a century",
/// never an overflow panic.
pub(crate) fn later(at: Instant, wait: Duration) -> Instant {
    at.checked_add(wait)
        .or_else(|| at.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(at)
}

/// `poll(2)` on `watched` and `others` until `deadline`; returns whether `watched` is readable
/// (or hung up: a closed pipe is also worth the caller's look).
pub(crate) fn poll_readable(
    watched: BorrowedFd<'_>,
    others: &[BorrowedFd<'_>],
    deadline: Instant,
) -> io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds: Vec<PollFd<'_>> = std::iter::once(watched)
        .chain(others.iter().copied())
        .map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN))
        .collect();
    let left = deadline.saturating_duration_since(Instant::now());
    let timeout = Timespec::try_from(left).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    });
    match poll(&mut fds, Some(&timeout)) {
        Ok(_) => Ok(!fds[0].revents().is_empty()),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
