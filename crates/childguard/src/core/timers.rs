//! The event loop's deadline heap: one-shot timers, cancellable, run on the loop thread.
//!
//! A cancelled timer stays in the heap until its deadline comes up and is skipped then (no
//! search through the heap on cancel): the heap holds at most one entry per timer ever set
//! and not yet due, so it stays bounded by the live timers plus those cancelled since.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

/// Names a timer, for [`Timers::cancel`]. Never reused within a loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct TimerId(u64);

/// Timers by deadline, nearest first.
pub(crate) struct Timers<F> {
    heap: BinaryHeap<Reverse<(Instant, TimerId)>>,
    live: HashMap<TimerId, F>,
    next: u64,
}

impl<F> Default for Timers<F> {
    fn default() -> Self {
        Timers {
            heap: BinaryHeap::new(),
            live: HashMap::new(),
            next: 0,
        }
    }
}

impl<F> Timers<F> {
    /// Sets a timer that runs `f` once `at` has come.
    pub(crate) fn add(&mut self, at: Instant, f: F) -> TimerId {
        self.next += 1;
        let id = TimerId(self.next);
        self.live.insert(id, f);
        self.heap.push(Reverse((at, id)));
        id
    }

    /// Forgets a timer that has not run yet (nothing if it has).
    pub(crate) fn cancel(&mut self, id: TimerId) {
        self.live.remove(&id);
    }

    /// The nearest deadline of a timer still set.
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if self.live.contains_key(&id) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Takes the timers whose deadline is `now` or earlier, nearest first.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<F> {
        let mut due = Vec::new();
        while let Some(&Reverse((at, id))) = self.heap.peek() {
            if at > now {
                break;
            }
            self.heap.pop();
            if let Some(f) = self.live.remove(&id) {
                due.push(f);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn due_timers_come_nearest_first_and_cancelled_ones_never() {
        let now = Instant::now();
        let mut t = Timers::default();
        let a = t.add(now + Duration::from_secs(3), 'a');
        t.add(now + Duration::from_secs(1), 'b');
        t.add(now + Duration::from_secs(2), 'c');
        t.cancel(a);
        assert_eq!(t.next_deadline(), Some(now + Duration::from_secs(1)));
        assert_eq!(t.take_due(now + Duration::from_secs(5)), ['b', 'c']);
        assert_eq!(t.next_deadline(), None);
    }
}
