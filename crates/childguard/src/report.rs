//! [`CloseReport`]: what the close path did, and when.

use std::fmt;
use std::process::ExitStatus;
use std::time::{Duration, SystemTime};

use crate::signal::Signal;

/// How the child came to an end, as far as the close path saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "kind", rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Ending {
    /// The handle had no child ([`ChildHandle::from_socket`](crate::ChildHandle::from_socket)).
    NoChild,
    /// The child had already exited when the close began.
    BeforeClose,
    /// The child exited after a [`ChildHandle::kill`](crate::ChildHandle::kill) call.
    Kill {
        /// The signal that call sent.
        signal: Signal,
    },
    /// The child exited on its own after the socket was shut down, before any signal.
    Eof,
    /// The child exited after the signal of this rung (0-based index into the ladder).
    Rung {
        /// Index into [`Ladder::rungs`](crate::Ladder::rungs).
        index: usize,
        /// That rung's signal.
        signal: Signal,
    },
    /// The child was still alive after the last rung; the background reaper owns it now.
    Outlived,
    /// The close returned early ([`Reap::Background`](crate::Reap::Background), or an error
    /// mid-ladder): the background reaper climbs the rest of the ladder and reaps.
    InBackground,
}

/// What became of the `process_mrelease(2)` asked for after a `SIGKILL` rung.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(tag = "kind", rename_all = "snake_case"))]
#[non_exhaustive]
pub enum MemoryRelease {
    /// The reaper thread released the child's memory; the call took this long.
    Released {
        /// Duration of the `process_mrelease` call.
        #[cfg_attr(feature = "serde", serde(rename = "took_ms", with = "millis"))]
        took: Duration,
    },
    /// The call did not run or failed harmlessly: `ENOSYS` (kernel < 5.15), `EINVAL` (the
    /// child was not dying yet, or had no memory left), `ESRCH` (already gone).
    Skipped {
        /// Why, e.g. "ENOSYS: kernel without process_mrelease".
        reason: String,
    },
}

/// One signal the close path sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct SentSignal {
    /// The signal.
    pub signal: Signal,
    /// When, since the close began.
    #[cfg_attr(feature = "serde", serde(rename = "at_ms", with = "millis"))]
    pub at: Duration,
    /// The ladder rung it belongs to.
    pub rung: usize,
    /// Whether it went to the whole process group.
    pub to_group: bool,
}

/// The timeline of one close. Offsets are measured from the moment the close began.
///
/// `Display` prints one line, e.g.
/// `slowserver[4242]: shutdown +0.0ms, HUP +0.1ms, exited +0.4ms (signal 1, rung 0 HUP), reaped +0.4ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CloseReport {
    /// The program spawned (`None` for a socket-only handle).
    pub program: Option<String>,
    /// The child's pid.
    pub pid: Option<u32>,
    /// Wall-clock time at which the close began.
    #[cfg_attr(feature = "serde", serde(with = "unix_millis"))]
    pub started_at: SystemTime,
    /// When `shutdown(SHUT_RDWR)` was done on the socket (`None`: there was no socket).
    #[cfg_attr(feature = "serde", serde(rename = "shutdown_ms", with = "opt_millis"))]
    pub shutdown: Option<Duration>,
    /// Signals sent by the ladder, in order.
    pub signals: Vec<SentSignal>,
    /// When the child's exit was observed.
    #[cfg_attr(feature = "serde", serde(rename = "exited_ms", with = "opt_millis"))]
    pub exited: Option<Duration>,
    /// When the child was reaped (its pid released).
    #[cfg_attr(feature = "serde", serde(rename = "reaped_ms", with = "opt_millis"))]
    pub reaped: Option<Duration>,
    /// What ended it.
    pub ended_by: Ending,
    /// The exit status (`None` if still running, or reaped by someone else).
    #[cfg_attr(feature = "serde", serde(with = "status"))]
    pub status: Option<ExitStatus>,
    /// The child outlived the last rung (e.g. stuck in uninterruptible sleep).
    pub outlived_ladder: bool,
    /// The child (or its group) was handed to the background reaper.
    pub handed_to_reaper: bool,
    /// Members of the child's process group still alive when the close returned.
    pub group_survivors: Vec<u32>,
    /// Something else may still hold the socket or outlive the child: set when the child
    /// exited while not leading its own process group and a descendant may have inherited the
    /// socket, or when group members cannot be listed on this platform.
    pub socket_may_be_held: bool,
    /// How long the close took.
    #[cfg_attr(feature = "serde", serde(rename = "total_ms", with = "millis"))]
    pub total: Duration,
    /// The memory release asked for after a `SIGKILL` rung, if any (see
    /// [`Builder::release_memory_on_kill`](crate::Builder::release_memory_on_kill)).
    pub memory_release: Option<MemoryRelease>,
    /// Things worth knowing that are not errors (status lost, `ESRCH` on a signal …).
    pub notes: Vec<String>,
}

impl CloseReport {
    pub(crate) fn new(program: Option<String>, pid: Option<u32>) -> CloseReport {
        CloseReport {
            program,
            pid,
            started_at: SystemTime::now(),
            shutdown: None,
            signals: Vec::new(),
            exited: None,
            reaped: None,
            ended_by: Ending::NoChild,
            status: None,
            outlived_ladder: false,
            handed_to_reaper: false,
            group_survivors: Vec::new(),
            socket_may_be_held: false,
            total: Duration::ZERO,
            memory_release: None,
            notes: Vec::new(),
        }
    }
}

struct Ms(Duration);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "+{:.1}ms", self.0.as_secs_f64() * 1000.0)
    }
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ending::NoChild => f.write_str("no child"),
            Ending::BeforeClose => f.write_str("before close"),
            Ending::Kill { signal } => write!(f, "kill({signal})"),
            Ending::Eof => f.write_str("EOF"),
            Ending::Rung { index, signal } => write!(f, "rung {index} {signal}"),
            Ending::Outlived => f.write_str("outlived the ladder"),
            Ending::InBackground => f.write_str("left to the background reaper"),
        }
    }
}

fn describe_status(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => match Signal::from_raw(sig) {
            Some(s) => format!("signal {s}"),
            None => format!("signal {sig}"),
        },
        (None, None) => format!("{status}"),
    }
}

impl fmt::Display for CloseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.program, self.pid) {
            (Some(p), Some(pid)) => write!(f, "{p}[{pid}]:")?,
            (Some(p), None) => write!(f, "{p}:")?,
            (None, _) => f.write_str("socket:")?,
        }
        let mut parts: Vec<String> = Vec::new();
        if let Some(at) = self.shutdown {
            parts.push(format!("shutdown {}", Ms(at)));
        }
        for s in &self.signals {
            let group = if s.to_group { " (group)" } else { "" };
            parts.push(format!("{}{group} {}", s.signal, Ms(s.at)));
        }
        if let Some(at) = self.exited {
            let status = self
                .status
                .as_ref()
                .map(describe_status)
                .unwrap_or_else(|| "status lost".into());
            parts.push(format!(
                "exited {} ({status}, ended by {})",
                Ms(at),
                self.ended_by
            ));
        } else if self.pid.is_some() {
            parts.push(format!("not exited ({})", self.ended_by));
        }
        if let Some(at) = self.reaped {
            parts.push(format!("reaped {}", Ms(at)));
        }
        match &self.memory_release {
            Some(MemoryRelease::Released { took }) => parts.push(format!(
                "memory released in {:.1}ms",
                took.as_secs_f64() * 1000.0
            )),
            Some(MemoryRelease::Skipped { reason }) => {
                parts.push(format!("no memory release ({reason})"))
            }
            None => {}
        }
        if self.handed_to_reaper {
            parts.push("handed to background reaper".into());
        }
        if !self.group_survivors.is_empty() {
            parts.push(format!("group survivors {:?}", self.group_survivors));
        }
        if self.socket_may_be_held {
            parts.push("socket may still be held by a descendant".into());
        }
        write!(
            f,
            " {}; total {:.1}ms",
            parts.join(", "),
            self.total.as_secs_f64() * 1000.0
        )
    }
}

/// Serde helpers: durations as fractional milliseconds.
#[cfg(feature = "serde")]
pub(crate) mod millis {
    use std::time::Duration;

    pub(crate) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1000.0)
    }
}

#[cfg(feature = "serde")]
mod opt_millis {
    use std::time::Duration;

    pub(crate) fn serialize<S: serde::Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_secs_f64() * 1000.0)),
            None => s.serialize_none(),
        }
    }
}

#[cfg(feature = "serde")]
mod unix_millis {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub(crate) fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let ms = t
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        s.serialize_u128(ms)
    }
}

#[cfg(feature = "serde")]
mod status {
    use serde::ser::SerializeStruct;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    pub(crate) fn serialize<S: serde::Serializer>(
        st: &Option<ExitStatus>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match st {
            None => s.serialize_none(),
            Some(st) => {
                let mut out = s.serialize_struct("ExitStatus", 2)?;
                out.serialize_field("code", &st.code())?;
                out.serialize_field("signal", &st.signal())?;
                out.end()
            }
        }
    }
}
