//! The restart policy: when to restart (systemd's `Restart=`), how long to wait first (a delay
//! that doubles from a first to a maximum value, systemd's `RestartSec=` with
//! `RestartSteps=`/`RestartMaxDelaySec=`), and when to give up (a crash-loop limit, systemd's
//! `StartLimitBurst=` in `StartLimitIntervalSec=`, Erlang/OTP's MaxR in MaxT). Pure functions
//! of the times and exits they are given, so every rule is unit-tested.

use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// When a supervised server is restarted (systemd's `Restart=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum RestartPolicy {
    /// Never: an exit ends the supervision (`Restart=no`).
    #[default]
    Never,
    /// After a non-zero exit or a signal (one our close did not send: the close ends the
    /// supervision first), not after exit 0 (`Restart=on-failure`).
    OnFailure,
    /// After any exit (`Restart=always`).
    Always,
}

/// How a [`Supervisor`](crate::Supervisor) restarts: the policy, the delays and the
/// crash-loop limit. The defaults: systemd's `RestartSec=100ms` doubling up to 5 s (no jitter:
/// the delays are the same in every run, which makes them testable; several servers that
/// crash together restart together), at most 5 starts in 60 s (VS Code's language client: 5
/// crashes in 3 minutes), a start good once it has run (and been ready) for 1 s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restart {
    pub(crate) policy: RestartPolicy,
    pub(crate) first_delay: Duration,
    pub(crate) max_delay: Duration,
    pub(crate) burst: u32,
    pub(crate) interval: Duration,
    pub(crate) hold: Duration,
}

impl Restart {
    /// `policy` with the default delays, limit and hold (see [`Restart`]).
    pub fn new(policy: RestartPolicy) -> Restart {
        Restart {
            policy,
            first_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(5),
            burst: 5,
            interval: Duration::from_secs(60),
            hold: Duration::from_secs(1),
        }
    }

    /// The delay before the first restart, doubled after each start that did not hold, up to
    /// `max` (`first` zero: restarts at once, without a timer). `max` below `first` is `first`.
    pub fn delay(mut self, first: Duration, max: Duration) -> Restart {
        self.first_delay = first;
        self.max_delay = max.max(first);
        self
    }

    /// The crash-loop limit: when a restart would be the `burst + 1`-th start within
    /// `interval`, the supervisor gives up ([`ErrorKind::CrashLoop`](crate::ErrorKind::CrashLoop))
    /// instead. `burst` 0 is 1.
    pub fn limit(mut self, burst: u32, interval: Duration) -> Restart {
        self.burst = burst.max(1);
        self.interval = interval;
        self
    }

    /// How long a start must run, after its readiness (if any) was reached, to count as good:
    /// the next crash after a good start waits only the first delay again.
    pub fn hold(mut self, hold: Duration) -> Restart {
        self.hold = hold;
        self
    }

    /// The policy.
    pub fn policy(&self) -> RestartPolicy {
        self.policy
    }

    /// Whether this exit calls for a restart.
    pub(crate) fn wants_restart(&self, status: Option<ExitStatus>) -> bool {
        match self.policy {
            RestartPolicy::Never => false,
            RestartPolicy::Always => true,
            // A status lost (reaped by someone else) counts as a failure: nothing says it was
            // a clean exit.
            RestartPolicy::OnFailure => {
                status.is_none_or(|s| s.code() != Some(0) || s.signal().is_some())
            }
        }
    }
}

/// The supervisor's record of its starts, for the delays and the crash-loop limit.
#[derive(Debug, Default)]
pub(crate) struct Starts {
    /// When each start within the last `interval` happened.
    recent: VecDeque<Instant>,
    /// Starts in a row that did not hold (the exponent of the delay).
    failed_in_a_row: u32,
}

impl Starts {
    /// Notes a start at `at`.
    pub(crate) fn started(&mut self, at: Instant) {
        self.recent.push_back(at);
    }

    /// Notes the end of a start that ran from `started` until `ended`: good (it held) or not.
    pub(crate) fn ended(&mut self, restart: &Restart, started: Instant, ended: Instant) {
        if ended.saturating_duration_since(started) >= restart.hold {
            self.failed_in_a_row = 0;
        } else {
            self.failed_in_a_row = self.failed_in_a_row.saturating_add(1);
        }
    }

    /// Whether a start at `now` would go over the crash-loop limit.
    pub(crate) fn over_limit(&mut self, restart: &Restart, now: Instant) -> bool {
        while self
            .recent
            .front()
            .is_some_and(|&t| now.saturating_duration_since(t) >= restart.interval)
        {
            self.recent.pop_front();
        }
        self.recent.len() >= restart.burst as usize
    }

    /// The delay before the next start: the first delay doubled once per start in a row that
    /// did not hold, beyond the first, up to the maximum.
    pub(crate) fn delay(&self, restart: &Restart) -> Duration {
        let doublings = self.failed_in_a_row.saturating_sub(1).min(32);
        restart
            .first_delay
            .saturating_mul(1u32 << doublings.min(31))
            .min(restart.max_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(raw: i32) -> ExitStatus {
        ExitStatus::from_raw(raw)
    }

    #[test]
    fn which_exits_restart() {
        let on_failure = Restart::new(RestartPolicy::OnFailure);
        assert!(!on_failure.wants_restart(Some(status(0))));
        assert!(on_failure.wants_restart(Some(status(1 << 8))), "exit 1");
        assert!(
            on_failure.wants_restart(Some(status(9))),
            "SIGKILL (the OOM killer)"
        );
        assert!(on_failure.wants_restart(None), "status lost");
        assert!(Restart::new(RestartPolicy::Always).wants_restart(Some(status(0))));
        assert!(!Restart::new(RestartPolicy::Never).wants_restart(Some(status(9))));
    }

    #[test]
    fn delays_double_from_first_to_max_and_reset_after_a_start_that_held() {
        let r = Restart::new(RestartPolicy::Always)
            .delay(Duration::from_millis(100), Duration::from_millis(500))
            .hold(Duration::from_secs(1));
        let mut s = Starts::default();
        let t0 = Instant::now();
        let ms = |s: &Starts| s.delay(&r).as_millis();
        s.ended(&r, t0, t0);
        assert_eq!(ms(&s), 100);
        s.ended(&r, t0, t0);
        assert_eq!(ms(&s), 200);
        s.ended(&r, t0, t0);
        assert_eq!(ms(&s), 400);
        s.ended(&r, t0, t0);
        assert_eq!(ms(&s), 500, "capped");
        s.ended(&r, t0, t0 + Duration::from_secs(2));
        s.ended(&r, t0, t0);
        assert_eq!(ms(&s), 100, "a start that held resets the backoff");
        let zero = Restart::new(RestartPolicy::Always).delay(Duration::ZERO, Duration::ZERO);
        assert_eq!(s.delay(&zero), Duration::ZERO);
        for _ in 0..100 {
            s.ended(&r, t0, t0);
        }
        assert_eq!(ms(&s), 500, "no overflow after many failures");
    }

    #[test]
    fn the_crash_loop_limit_counts_starts_within_the_window() {
        let r = Restart::new(RestartPolicy::Always).limit(3, Duration::from_secs(10));
        let mut s = Starts::default();
        let t0 = Instant::now();
        for i in 0..3 {
            assert!(!s.over_limit(&r, t0 + Duration::from_secs(i)));
            s.started(t0 + Duration::from_secs(i));
        }
        assert!(
            s.over_limit(&r, t0 + Duration::from_secs(3)),
            "a 4th start in 10 s"
        );
        assert!(
            !s.over_limit(&r, t0 + Duration::from_secs(10)),
            "the first start left the window"
        );
    }
}
