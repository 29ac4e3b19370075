//! What [`Ready::Http`](super::Ready::Http) and [`Ready::Exec`](super::Ready::Exec) share: the
//! error for a condition that cannot be parsed, and the schedule of attempts.

use std::fmt;
use std::time::{Duration, Instant};

use crate::core::wait::later;

/// A readiness condition that cannot be used as given (an unparsable URL, an empty probe
/// command): names the input and says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyParseError {
    input: String,
    why: String,
}

impl ReadyParseError {
    pub(crate) fn new(input: &str, why: &str) -> ReadyParseError {
        ReadyParseError {
            input: input.to_owned(),
            why: why.to_owned(),
        }
    }

    /// The input as given.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for ReadyParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid readiness condition {:?}: {}",
            self.input, self.why
        )
    }
}

impl std::error::Error for ReadyParseError {}

/// The pause after an attempt that reached nothing (connection refused, no socket file): as
/// [`Ready::Connect`](super::Ready::Connect) retries, 0.1 ms doubling to 0.5 ms — it costs the
/// server nothing.
pub(crate) const QUICK: (Duration, Duration) =
    (Duration::from_micros(100), Duration::from_micros(500));

/// The pause after an attempt the server (or the probe command) had to work for — an HTTP
/// answer that was not the status asked for, a probe that exited non-zero: 10 ms doubling to
/// 100 ms, so a server answering `503` while it starts is asked at most ~10 times a second
/// once it is slow, and a probe command is not forked in a tight loop.
pub(crate) const PATIENT: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_millis(100));

/// When the next attempt of one condition is due.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    next: Option<Instant>,
    pause: Duration,
    patient: bool,
}

impl Schedule {
    pub(crate) fn new() -> Schedule {
        Schedule {
            next: None,
            pause: QUICK.0,
            patient: false,
        }
    }

    /// Whether an attempt is due at `now` (the first one is due at once).
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.next.is_none_or(|next| now >= next)
    }

    /// When the next attempt is due (now, if none was made).
    pub(crate) fn next(&self, now: Instant) -> Instant {
        self.next.unwrap_or(now)
    }

    /// An attempt ended at `now`: `patient` after one the server worked for, else quick. The
    /// pause doubles within its kind and starts over when the kind changes.
    pub(crate) fn done(&mut self, now: Instant, patient: bool) {
        let (first, max) = if patient { PATIENT } else { QUICK };
        self.pause = if self.next.is_some() && self.patient == patient {
            (self.pause * 2).min(max)
        } else {
            first
        };
        self.patient = patient;
        self.next = Some(later(now, self.pause));
    }
}

/// The bound that ended an attempt still waiting, for messages: `1s (the attempt timeout)`,
/// or, when the ready timeout came first, `420ms (the ready timeout)`.
pub(crate) fn bound_text(started: Instant, attempt_timeout: Duration, until: Instant) -> String {
    let by_attempt = until >= later(started, attempt_timeout);
    let (took, which) = if by_attempt {
        (attempt_timeout, "the attempt timeout")
    } else {
        let ms = until.saturating_duration_since(started).as_millis();
        (
            Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)),
            "the ready timeout",
        )
    };
    format!("{} ({which})", humantime::format_duration(took))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_within_a_kind_and_start_over_when_it_changes() {
        let t0 = Instant::now();
        let mut s = Schedule::new();
        assert!(s.due(t0), "the first attempt is due at once");
        let pause = |s: &Schedule, at: Instant| s.next(at) - at;
        s.done(t0, false);
        assert_eq!(pause(&s, t0), QUICK.0);
        assert!(!s.due(t0));
        for expected in [200, 400, 500, 500] {
            s.done(t0, false);
            assert_eq!(pause(&s, t0), Duration::from_micros(expected));
        }
        s.done(t0, true);
        assert_eq!(pause(&s, t0), PATIENT.0);
        for expected in [20, 40, 80, 100, 100] {
            s.done(t0, true);
            assert_eq!(pause(&s, t0), Duration::from_millis(expected));
        }
        s.done(t0, false);
        assert_eq!(pause(&s, t0), QUICK.0);
        assert!(s.due(t0 + QUICK.0));
    }

    #[test]
    fn the_bound_that_ended_an_attempt_is_named() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        assert_eq!(
            bound_text(t0, second, t0 + second),
            "1s (the attempt timeout)"
        );
        assert_eq!(
            bound_text(t0, second, t0 + Duration::from_millis(420)),
            "420ms (the ready timeout)"
        );
    }
}
