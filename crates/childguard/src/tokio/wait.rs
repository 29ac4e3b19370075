//! The one async wait: a tokio timer raced against what the child's state change wakes.

use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::BorrowedFd;
use std::task::Poll;
use std::time::Instant;

use crate::process::{Process, WaitOn};
use crate::sys;

/// Waits, without blocking the thread, until something `process` waits for may have changed
/// (a pidfd turned readable, a `SIGCHLD` arrived), `also` turned readable, or `deadline`
/// passes. Like [`Process::wait_until`], spurious wake-ups are allowed: the caller re-checks.
/// Tells the process when its pidfd was seen readable ([`Process::note_readable`]) — never
/// for `also` (the climb's notify socket), which says nothing about the child's state.
pub(super) async fn wait_change(
    process: &Process,
    also: Option<BorrowedFd<'_>>,
    deadline: Instant,
) -> io::Result<()> {
    let deadline = process.wake_by(deadline);
    let mut sleep = std::pin::pin!(::tokio::time::sleep_until(deadline.into()));
    // A duplicate, registered for this wait only (as the pidfds below).
    let also = also
        .map(|fd| sys::async_readable(fd.try_clone_to_owned()?))
        .transpose()?;
    let also_ready = |cx: &mut std::task::Context<'_>| {
        also.as_ref()
            .is_some_and(|fd| fd.poll_read_ready(cx).is_ready())
    };
    match process.wait_on() {
        WaitOn::Fds(fds) => {
            // Each wait registers duplicates of the fds: the set changes (leader, then group
            // survivors), and a duplicate is ours to deregister and close whatever the
            // process does with its own fds meanwhile.
            let fds = fds
                .into_iter()
                .map(|fd| sys::async_readable(fd.try_clone_to_owned()?))
                .collect::<io::Result<Vec<_>>>()?;
            poll_fn(|cx| {
                if sleep.as_mut().poll(cx).is_ready() || also_ready(cx) {
                    return Poll::Ready(Ok(()));
                }
                for fd in &fds {
                    if let Poll::Ready(ready) = fd.poll_read_ready(cx) {
                        process.note_readable();
                        return Poll::Ready(ready.map(drop));
                    }
                }
                Poll::Pending
            })
            .await
        }
        WaitOn::Sigchld(seen) => {
            let notifier = crate::core::sigchld::notifier()?;
            poll_fn(|cx| {
                if sleep.as_mut().poll(cx).is_ready() || also_ready(cx) {
                    return Poll::Ready(Ok(()));
                }
                notifier.poll_change_from(seen, cx).map(Ok)
            })
            .await
        }
    }
}
