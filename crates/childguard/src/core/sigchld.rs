//! The process-wide `SIGCHLD` notifier that wakes the waits of children on the portable
//! mechanism (`kill` + `waitid(P_PID)`: [`crate::process::sigchld`]). It sits in the core, below
//! the process layer, because the one wait primitive ([`super::wait`]) waits on it.
//!
//! Race avoided (SIGCHLD ownership): a program has one `SIGCHLD` disposition. We never replace
//! it: signal-hook chains our handler after whatever the host installed, and we only ever wait
//! for our own pids (`waitid(P_PID)`), never `waitpid(-1)`, so the host's children stay the
//! host's. Lost wake-up: waiters read the generation counter *before* checking the child, and
//! sleep only while the counter is unchanged, so a `SIGCHLD` between check and sleep is seen.

use std::io;
use std::sync::{Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use crate::core::per_process::PerProcess;
use crate::failpoint::Point;

/// Counts `SIGCHLD` deliveries and wakes every waiter on each: threads blocked in
/// [`Notifier::wait_change_from`], and tasks that polled [`Notifier::poll_change_from`].
#[derive(Debug)]
pub(crate) struct Notifier {
    generation: Mutex<u64>,
    changed: Condvar,
    wakers: Mutex<Vec<Waker>>,
}

/// This process's notifier, once its thread runs (see [`crate::core::per_process`] for `fork()`).
static NOTIFIER: PerProcess<Notifier> = PerProcess::new();

/// The process-wide notifier, started on first use. A failed start is tried again on the next
/// use (the caller gets the error: a spawn that needs the notifier fails cleanly); see
/// [`PerProcess::get_or_start`] for the race of two first uses and for `fork()`.
pub(crate) fn notifier() -> io::Result<&'static Notifier> {
    NOTIFIER.get_or_start(
        "childguard-sigchld",
        || {
            let signals = signal_hook::iterator::Signals::new([libc::SIGCHLD])?;
            crate::failpoint::check(Point::NotifierStart)?;
            let fresh = Notifier {
                generation: Mutex::new(0),
                changed: Condvar::new(),
                wakers: Mutex::new(Vec::new()),
            };
            Ok((fresh, signals))
        },
        |n, mut signals| {
            for _ in signals.forever() {
                n.count_one();
            }
        },
    )
}

impl Notifier {
    /// One `SIGCHLD` came: a new generation, every waiter woken.
    fn count_one(&self) {
        *self.generation.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        self.changed.notify_all();
        let wakers = std::mem::take(&mut *self.wakers.lock().unwrap_or_else(|p| p.into_inner()));
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl Notifier {
    /// The current generation; pass it to [`Notifier::wait_change_from`].
    pub(crate) fn generation(&self) -> u64 {
        *self.generation.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps until a `SIGCHLD` arrives after generation `seen`, or `deadline`.
    pub(crate) fn wait_change_from(&self, seen: u64, deadline: Instant) {
        let mut generation = self.generation.lock().unwrap_or_else(|p| p.into_inner());
        while *generation == seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            generation = self
                .changed
                .wait_timeout(generation, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Notifier {
    /// The non-blocking [`wait_change_from`](Notifier::wait_change_from): ready once a `SIGCHLD`
    /// arrived after generation `seen`; else the task is woken by the next one.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn poll_change_from(&self, seen: u64, cx: &mut Context<'_>) -> Poll<()> {
        // The generation lock is held while the waker is stored: a SIGCHLD counted after our
        // check must take that lock first, so it finds our waker.
        let generation = self.generation.lock().unwrap_or_else(|p| p.into_inner());
        if *generation != seen {
            return Poll::Ready(());
        }
        let mut wakers = self.wakers.lock().unwrap_or_else(|p| p.into_inner());
        if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
            wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
