//! The handle's waits on its capture: [`Captured::sync`] and [`Captured::wait_for_line`],
//! through the one wait primitive ([`crate::core::wait`]) on a bell the event loop rings on
//! every change (see [`crate::core::bell`] for the lost wake-up this avoids).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::dispatch::{PassedOn, PASS_ON_MAX};
use super::{drain, Captured, Shared, State};
use crate::core::bell::Bell;
use crate::core::wait::Wait;

impl Captured {
    /// Waits until the event loop has read everything the pipes hold *now* (or they are
    /// at EOF), or `deadline` passes. Called once the child is gone, so that the tail ends with
    /// the last thing it wrote, whoever wins the race between its exit and our read.
    pub(crate) fn sync(&self, deadline: Instant) {
        // Listening before the ask: the loop's answer rings the bell.
        let listening = self.shared.listen();
        let asked = self.shared.sync_asked.fetch_add(1, Ordering::SeqCst) + 1;
        drain::wake();
        self.wait(&listening, deadline, |state| {
            state.synced >= asked || !state.open.contains(&true)
        });
    }

    /// After the child is gone: [`sync`](Captured::sync) by `sync_deadline`, then waits (at
    /// most [`PASS_ON_MAX`]) until the callback thread has passed every line read on to
    /// `on_line` and the passthrough, so the close returns after the last one was delivered.
    /// A note for the report when lines were still waiting: the close was made from a callback
    /// (which cannot wait for its own thread), or a callback held the thread past the bound.
    pub(crate) fn settle(&self, sync_deadline: Instant) -> Option<String> {
        self.sync(sync_deadline);
        let sink = self.sink.as_ref()?;
        match sink.wait_passed_on(Instant::now() + PASS_ON_MAX) {
            PassedOn::All => None,
            PassedOn::FromCallback(n) => Some(format!(
                "{n} line(s) still queued for on_line/passthrough when the close returned: \
                 a close made inside a callback does not wait for the callback thread"
            )),
            PassedOn::TimedOut(n) => Some(format!(
                "{n} line(s) not yet passed on to on_line/passthrough when the close returned: \
                 the callback thread was busy for over {PASS_ON_MAX:?} (PASS_ON_MAX); they are \
                 passed on later"
            )),
        }
    }

    /// Waits until a line containing the watched text (given to [`Capture::start`]) was read
    /// (`true`), both streams are at EOF (`false`), or `deadline` passes (`false`); `stop` is
    /// asked at least every `slice` (e.g. "has the child exited?", the caller's interrupt
    /// check) and ends the wait when it says so. A capture started without a watch never sees
    /// its line (`false` at once).
    pub(crate) fn wait_for_line(
        &self,
        deadline: Instant,
        slice: std::time::Duration,
        mut stop: impl FnMut() -> bool,
    ) -> bool {
        let seen = |state: &State| state.watch.as_ref().is_some_and(|w| w.seen);
        {
            // A look first, without a bell (the readiness combinations look often).
            let state = self.shared.lock();
            if state.watch.is_none() {
                return false;
            }
            if seen(&state) {
                return true;
            }
            if Instant::now() >= deadline || !state.open.contains(&true) {
                return false;
            }
        }
        let listening = self.shared.listen();
        loop {
            if stop() {
                return false;
            }
            let slice_end = deadline.min(Instant::now() + slice);
            let done = self.wait(&listening, slice_end, |state| {
                seen(state) || !state.open.contains(&true)
            });
            if done {
                return seen(&self.shared.lock());
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// Waits (the one wait primitive, on the bell) until `done` holds for the state, or
    /// `deadline`. Returns whether `done` held.
    fn wait(
        &self,
        listening: &Listening<'_>,
        deadline: Instant,
        done: impl Fn(&State) -> bool,
    ) -> bool {
        loop {
            // Cleared before the look (see `core::bell`: the lost wake-up).
            if let Some(bell) = &listening.bell {
                let _ = bell.clear();
            }
            if done(&self.shared.lock()) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let woke = match &listening.bell {
                Some(bell) => Wait::until(deadline).fds(&[bell.fd()]).run(),
                // No fd for a bell (EMFILE): look again every millisecond.
                None => Wait::until(deadline.min(now + std::time::Duration::from_millis(1))).run(),
            };
            if woke.is_err() {
                return done(&self.shared.lock());
            }
        }
    }
}

/// A waiter's bell, rung by the event loop on every change of the capture; unregistered when
/// dropped. `None`: no fd for one (the wait then looks every millisecond).
struct Listening<'a> {
    shared: &'a Shared,
    bell: Option<Arc<Bell>>,
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        if let Some(bell) = &self.bell {
            lock_bells(&self.shared.bells).retain(|b| !Arc::ptr_eq(b, bell));
        }
    }
}

fn lock_bells(bells: &Mutex<Vec<Arc<Bell>>>) -> MutexGuard<'_, Vec<Arc<Bell>>> {
    bells.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// A bell for a waiter, rung on every change from now on.
    fn listen(&self) -> Listening<'_> {
        let bell = Bell::new().ok().map(Arc::new);
        if let Some(bell) = &bell {
            lock_bells(&self.bells).push(Arc::clone(bell));
        }
        Listening { shared: self, bell }
    }

    /// Wakes every waiter (after the state changed: see `core::bell`).
    pub(super) fn changed(&self) {
        for bell in lock_bells(&self.bells).iter() {
            bell.ring();
        }
    }
}
