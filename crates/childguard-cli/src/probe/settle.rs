//! When a server started without `--ready` has **settled**: done installing its signal
//! handlers, so that the signal the probe sends meets the disposition it will have in service.
//!
//! Signalled too early, a server is measured as it is while starting: redis installs its
//! handlers some 35 ms after `exec`, in two steps (`SigCgt`, then `SigIgn` again 1 ms after it
//! listens); a `TERM` sent before meets the kernel's default action, and the probe would
//! recommend `KILL` alone. So, without `--ready`, each run waits before its signal for
//! observable state, read every [`POLL`] by [`super::observe`]:
//!
//! - **settled** (a strong sign): a listening socket of the server has been seen (Unix or TCP:
//!   it is serving), *and* its `SigIgn`/`SigCgt` masks have not changed for [`QUIET`] (a server
//!   may install handlers in several steps, also just after it listens);
//! - **a guess**, when the settle timeout passes first: no listener was seen (a server that
//!   never listens, e.g. on stdio, or one that takes longer), and the masks are whatever they
//!   are then — the output says how long they had been unchanged and warns that the
//!   recommendation may be wrong: pass `--ready`.
//!
//! No fixed sleep: the wait ends as soon as the state says so, bounded by the timeout. This
//! module is the decision alone, on samples (time, masks, listener), so that it is tested on
//! synthetic inputs; [`super::observe`] reads `/proc` and drives it.

use std::time::Duration;

/// How long the signal masks must stay unchanged (with a listener seen) to count as settled.
pub const QUIET: Duration = Duration::from_millis(300);
/// How often the state is read.
pub const POLL: Duration = Duration::from_millis(5);
/// The settle timeout without `--settle-timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// `SigIgn` and `SigCgt` of `/proc/PID/status`: which signals are ignored, which caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Masks {
    pub ignored: u64,
    pub caught: u64,
}

/// A listening socket of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listener {
    /// A Unix stream (or seqpacket) socket, with its path (`@name` when abstract), if bound
    /// to one.
    Unix(Option<String>),
    /// A TCP socket (IPv4 or IPv6) in `LISTEN`, on this port.
    Tcp(u16),
}

impl Listener {
    pub fn describe(&self) -> String {
        match self {
            Listener::Unix(Some(path)) => format!("listening on a unix socket ({path})"),
            Listener::Unix(None) => "listening on a unix socket".into(),
            Listener::Tcp(port) => format!("listening on TCP port {port}"),
        }
    }
}

/// One reading of the server's state, `at` after its spawn.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Duration,
    pub masks: Masks,
    /// A listening socket, if one was seen in this reading.
    pub listener: Option<Listener>,
}

/// How the wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// From the spawn to the end of the wait.
    pub waited: Duration,
    /// How long the masks had been unchanged then (since the first reading, at most).
    pub unchanged: Duration,
    /// The first listener seen, if any.
    pub listener: Option<Listener>,
    /// How many times the masks changed while watched.
    pub changes: u32,
    /// Settled by the rule (a listener, masks quiet); `false`: the timeout passed first.
    pub sure: bool,
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

impl Settled {
    /// What was waited for, in words, e.g. `waited 0.34 s for redis-server to settle:
    /// listening on a unix socket (/tmp/r.sock), signal dispositions unchanged for 0.30 s`.
    pub fn describe(&self, server: &str) -> String {
        let masks = match (self.sure, self.unchanged >= QUIET) {
            (false, false) => format!(
                "signal dispositions still changing (last change {} before)",
                secs(self.unchanged)
            ),
            _ => format!("signal dispositions unchanged for {}", secs(self.unchanged)),
        };
        match (self.sure, &self.listener) {
            (true, Some(listener)) => format!(
                "waited {} for {server} to settle: {}, {masks}",
                secs(self.waited),
                listener.describe()
            ),
            (_, None) => format!(
                "waited {} (the settle timeout) for {server} to settle: {masks}, no listening \
                 socket seen",
                secs(self.waited)
            ),
            (false, Some(listener)) => format!(
                "waited {} (the settle timeout) for {server} to settle: {}, {masks}",
                secs(self.waited),
                listener.describe()
            ),
        }
    }
}

/// The wait's state over the samples.
#[derive(Debug)]
pub struct Watch {
    timeout: Duration,
    last: Option<Masks>,
    /// When the masks took their present value (the first sample's time at first).
    since: Duration,
    listener: Option<Listener>,
    changes: u32,
}

impl Watch {
    pub fn new(timeout: Duration) -> Watch {
        Watch {
            timeout,
            last: None,
            since: Duration::ZERO,
            listener: None,
            changes: 0,
        }
    }

    /// Whether a listener is still to be looked for (once one is seen, it is not read again).
    pub fn wants_listener(&self) -> bool {
        self.listener.is_none()
    }

    /// Takes one sample; `Some` when the wait is over.
    pub fn observe(&mut self, sample: Sample) -> Option<Settled> {
        match self.last {
            Some(last) if last == sample.masks => {}
            Some(_) => {
                self.changes += 1;
                self.since = sample.at;
                self.last = Some(sample.masks);
            }
            None => {
                self.since = sample.at;
                self.last = Some(sample.masks);
            }
        }
        if self.listener.is_none() {
            self.listener = sample.listener;
        }
        let unchanged = sample.at.saturating_sub(self.since);
        let sure = self.listener.is_some() && unchanged >= QUIET;
        (sure || sample.at >= self.timeout).then(|| Settled {
            waited: sample.at,
            unchanged,
            listener: self.listener.clone(),
            changes: self.changes,
            sure,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const START: Masks = Masks {
        ignored: 0,
        caught: 0,
    };
    const HANDLERS: Masks = Masks {
        ignored: 0x1001,
        caught: 0x44ea,
    };
    const PIPE_TOO: Masks = Masks {
        ignored: 0x3001,
        caught: 0x1_0000_44ea,
    };

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn sample(at: u64, masks: Masks, listening: bool) -> Sample {
        Sample {
            at: ms(at),
            masks,
            listener: listening.then(|| Listener::Unix(Some("/tmp/r.sock".into()))),
        }
    }

    /// Feeds samples every 5 ms from `from` to `to` (inclusive) until the wait ends.
    fn feed(
        watch: &mut Watch,
        from: u64,
        to: u64,
        masks: Masks,
        listening: bool,
    ) -> Option<Settled> {
        (from..=to)
            .step_by(5)
            .find_map(|at| watch.observe(sample(at, masks, listening)))
    }

    #[test]
    fn redis_like_start_settles_quiet_after_the_last_step_not_at_the_listener() {
        // Default masks until 35 ms, handlers, a listener at 36 ms, one more step at 40 ms.
        let mut watch = Watch::new(ms(10_000));
        assert_eq!(feed(&mut watch, 0, 30, START, false), None);
        assert_eq!(watch.observe(sample(35, HANDLERS, false)), None);
        assert_eq!(watch.observe(sample(36, HANDLERS, true)), None);
        assert!(!watch.wants_listener());
        // The listener is remembered even when a later reading skips it.
        assert_eq!(feed(&mut watch, 40, 335, PIPE_TOO, false), None);
        let settled = watch.observe(sample(340, PIPE_TOO, false)).unwrap();
        assert_eq!(
            settled,
            Settled {
                waited: ms(340),
                unchanged: ms(300),
                listener: Some(Listener::Unix(Some("/tmp/r.sock".into()))),
                changes: 2,
                sure: true,
            }
        );
        assert_eq!(
            settled.describe("redis-server"),
            "waited 0.34 s for redis-server to settle: listening on a unix socket \
             (/tmp/r.sock), signal dispositions unchanged for 0.30 s"
        );
    }

    #[test]
    fn quiet_masks_without_a_listener_wait_for_the_timeout_and_say_it_is_a_guess() {
        let mut watch = Watch::new(ms(2_000));
        assert_eq!(watch.observe(sample(0, START, false)), None);
        assert_eq!(feed(&mut watch, 5, 1_995, HANDLERS, false), None);
        let settled = watch.observe(sample(2_000, HANDLERS, false)).unwrap();
        assert!(!settled.sure);
        assert_eq!(settled.unchanged, ms(1_995));
        assert_eq!(settled.listener, None);
        assert_eq!(
            settled.describe("srv"),
            "waited 2.00 s (the settle timeout) for srv to settle: signal dispositions \
             unchanged for 2.00 s, no listening socket seen"
        );
    }

    #[test]
    fn masks_still_changing_at_the_timeout_are_a_guess_even_with_a_listener() {
        let mut watch = Watch::new(ms(1_000));
        let mut settled = None;
        for (i, at) in (0..=1_000).step_by(50).enumerate() {
            // A new handler every 50 ms, listening from the start.
            let masks = Masks {
                ignored: 0,
                caught: 1 << i,
            };
            settled = watch.observe(sample(at, masks, true));
            if settled.is_some() {
                assert_eq!(at, 1_000);
            }
        }
        let settled = settled.unwrap();
        assert!(!settled.sure);
        assert_eq!(settled.changes, 20);
        assert_eq!(
            settled.describe("srv"),
            "waited 1.00 s (the settle timeout) for srv to settle: listening on a unix socket \
             (/tmp/r.sock), signal dispositions still changing (last change 0.00 s before)"
        );
    }

    #[test]
    fn a_listener_before_any_handler_still_needs_the_quiet_period() {
        let mut watch = Watch::new(ms(10_000));
        // Listening from the first reading; masks steady for 299 ms is not enough.
        assert_eq!(watch.observe(sample(0, START, true)), None);
        assert_eq!(watch.observe(sample(299, START, false)), None);
        let settled = watch.observe(sample(300, START, false)).unwrap();
        assert!(settled.sure);
        assert_eq!(settled.changes, 0);
        let tcp = Settled {
            listener: Some(Listener::Tcp(6379)),
            ..settled
        };
        assert_eq!(
            tcp.describe("srv"),
            "waited 0.30 s for srv to settle: listening on TCP port 6379, signal dispositions \
             unchanged for 0.30 s"
        );
    }
}
