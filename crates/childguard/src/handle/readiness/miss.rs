//! [`WatchdogMiss`]: what a missed watchdog deadline was (`watchdog.rs`, Linux), what the
//! handle asked to happen then ([`OnMiss`]: its ladder climbed, or the user's callback,
//! [`Builder::on_watchdog`](crate::Builder::on_watchdog)), and the watchdog's messages
//! (`WATCHDOG=`, `WATCHDOG_USEC=`).

// Off Linux the watchdog is refused before the fork (it needs `Ready::Notify`): the message
// parsing and the callback are only kept for the builder's API.
#![cfg_attr(not(target_os = "linux"), allow(dead_code))]

use std::sync::Arc;
#[cfg(target_os = "linux")]
use std::sync::Mutex;
use std::time::Duration;
#[cfg(target_os = "linux")]
use std::{io, time::Instant};

#[cfg(target_os = "linux")]
use crate::close::{ladder::Ladder, target::Pinned};

/// What happened at a missed watchdog deadline, for [`Builder::on_watchdog`](crate::Builder::on_watchdog)
/// and [`ChildHandle::watchdog_missed`](crate::ChildHandle::watchdog_missed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchdogMiss {
    /// The child's pid.
    pub pid: u32,
    /// When, since the spawn.
    pub at: Duration,
    /// `true`: the child sent `WATCHDOG=trigger`; `false`: the interval passed without a
    /// `WATCHDOG=1`.
    pub triggered: bool,
    /// The interval in force then (the builder's, or the child's last `WATCHDOG_USEC=`).
    pub interval: Duration,
}

impl std::fmt::Display for WatchdogMiss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = self.at.as_secs_f64() * 1000.0;
        if self.triggered {
            write!(f, "watchdog missed at +{ms:.1}ms (WATCHDOG=trigger)")
        } else {
            write!(
                f,
                "watchdog missed at +{ms:.1}ms (no WATCHDOG=1 within {:?})",
                self.interval
            )
        }
    }
}

/// The user's callback.
pub(crate) type MissFn = Arc<dyn Fn(WatchdogMiss) + Send + Sync>;

/// [`MissFn`] in the builder (which is `Debug`).
#[derive(Clone)]
pub(crate) struct OnWatchdog(pub(crate) MissFn);

impl std::fmt::Debug for OnWatchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnWatchdog(..)")
    }
}

#[cfg(target_os = "linux")]
/// What a miss does.
pub(crate) enum OnMiss {
    /// Climb `ladder` towards the child (its process group when it leads one). The target is
    /// touched by the loop thread only; the lock is for the type system (`Dog` is shared).
    Close {
        target: Mutex<Pinned>,
        ladder: Ladder,
        skip_ignored: bool,
    },
    Call(MissFn),
    /// Record the miss only: no pidfd (the portable mechanism, e.g. under valgrind), and a pid
    /// number signalled from the loop could name a stranger once the handle reaped the child.
    Record,
}

#[cfg(target_os = "linux")]
impl crate::ChildHandle {
    /// After readiness: the watchdog starts ([`Builder::watchdog`](crate::Builder::watchdog)).
    pub(crate) fn arm_watchdog(
        &mut self,
        interval: Duration,
        spawned: Instant,
        on_watchdog: Option<OnWatchdog>,
    ) -> io::Result<()> {
        let no_socket = || io::Error::other("watchdog: no notify socket");
        let on_miss = match on_watchdog {
            Some(f) => OnMiss::Call(f.0),
            None => {
                let process = self.process().ok_or_else(no_socket)?;
                match process.pidfd() {
                    None => OnMiss::Record,
                    Some(pidfd) => OnMiss::Close {
                        target: Mutex::new(Pinned::new(
                            pidfd.try_clone_to_owned()?,
                            process.pid(),
                            process.leads_group(),
                        )),
                        ladder: self.ladder().clone(),
                        skip_ignored: self.skip_ignored,
                    },
                }
            }
        };
        let notify = self.notify_mut().ok_or_else(no_socket)?;
        notify.arm_watchdog(interval, spawned, on_miss)
    }
}

/// One watchdog message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Message {
    /// `WATCHDOG=1`.
    Ping,
    /// `WATCHDOG=trigger`.
    Trigger,
    /// `WATCHDOG_USEC=`: the new interval (`None`: 0, the watchdog off).
    Interval(Option<Duration>),
}

/// Reads one `KEY=VALUE` line: `None` if it is not a watchdog key, `Some(Err)` if it is one
/// with a value we do not understand.
pub(crate) fn parse(key: &str, value: &str) -> Option<Result<Message, String>> {
    match key {
        "WATCHDOG" => Some(match value {
            "1" => Ok(Message::Ping),
            "trigger" => Ok(Message::Trigger),
            _ => Err(format!("WATCHDOG={value:?}")),
        }),
        "WATCHDOG_USEC" => Some(match value.parse::<u64>() {
            Ok(0) => Ok(Message::Interval(None)),
            Ok(usec) => Ok(Message::Interval(Some(Duration::from_micros(usec)))),
            Err(_) => Err(format!("WATCHDOG_USEC={value:?}")),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_parse_and_bad_values_say_so() {
        assert_eq!(parse("WATCHDOG", "1"), Some(Ok(Message::Ping)));
        assert_eq!(parse("WATCHDOG", "trigger"), Some(Ok(Message::Trigger)));
        assert_eq!(
            parse("WATCHDOG_USEC", "0"),
            Some(Ok(Message::Interval(None)))
        );
        assert_eq!(
            parse("WATCHDOG_USEC", "250000"),
            Some(Ok(Message::Interval(Some(Duration::from_millis(250)))))
        );
        // Huge but well-formed: a deadline far away, saturated by `later` when armed.
        assert_eq!(
            parse("WATCHDOG_USEC", &u64::MAX.to_string()),
            Some(Ok(Message::Interval(Some(Duration::from_micros(u64::MAX)))))
        );
        assert!(parse("WATCHDOG", "2").unwrap().is_err());
        assert!(parse("WATCHDOG_USEC", "-1").unwrap().is_err());
        assert!(parse("WATCHDOG_USEC", "99999999999999999999")
            .unwrap()
            .is_err());
        assert_eq!(parse("READY", "1"), None);
    }
}
