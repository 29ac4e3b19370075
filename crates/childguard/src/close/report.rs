//! [`CloseReport`]: what the close path did, and when.

use std::process::ExitStatus;
use std::time::{Duration, SystemTime};

use crate::base::signal::Signal;
use crate::process::disposition::Disposition;

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
    /// The child exited after a signal sent before the close: a
    /// [`ChildHandle::kill`](crate::ChildHandle::kill) call, or the climb a watchdog miss
    /// started ([`Builder::watchdog`](crate::Builder::watchdog); the report's
    /// [`NotifyReport::watchdog`] lists its signals), which the close then took over.
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
    /// A helper thread released the child's memory while it died; the call took this long.
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
    /// The call was still running when the close returned (the `SIGKILL` rung's grace ran out
    /// first): its helper thread finishes it alone, then closes its copy of the pidfd.
    Unfinished,
}

/// What a [`Ready::Notify`](crate::Ready::Notify) server said on its `NOTIFY_SOCKET`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct NotifyReport {
    /// The latest `STATUS=` (e.g. redis's "Ready to accept connections").
    pub status: Option<String>,
    /// When `STOPPING=1` came, since the close began (zero if before it).
    #[cfg_attr(feature = "serde", serde(rename = "stopping_ms", with = "opt_millis"))]
    pub stopping: Option<Duration>,
    /// Each `EXTEND_TIMEOUT_USEC=` received during the close.
    pub extensions: Vec<Extension>,
    /// Datagrams ignored, and why (wrong sender, malformed …; at most 8, then a count).
    pub ignored: Vec<String>,
    /// The latest `ERRNO=` (the server reports a failure with this errno).
    pub errno: Option<i32>,
    /// The latest `EXIT_STATUS=` (the exit status the server says it ends with).
    pub exit_status: Option<i32>,
    /// With [`Builder::watchdog`](crate::Builder::watchdog): the miss ("watchdog missed at
    /// +X ms …", since the spawn), then what the watchdog did about it (signals sent).
    pub watchdog: Vec<String>,
    /// The last `MAINPID=` accepted: the process the close's catchable rungs went to.
    pub main_pid: Option<u32>,
    /// What became of each `MAINPID=` (accepted, or refused and why) and the signals sent
    /// to the main process.
    pub main: Vec<String>,
}

/// One `EXTEND_TIMEOUT_USEC=` during the close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Extension {
    /// When it came, since the close began.
    #[cfg_attr(feature = "serde", serde(rename = "at_ms", with = "millis"))]
    pub at: Duration,
    /// How long it asked for, from then (the grace granted is capped by
    /// [`Builder::notify_extend_max`](crate::Builder::notify_extend_max)).
    #[cfg_attr(feature = "serde", serde(rename = "asked_ms", with = "millis"))]
    pub asked: Duration,
}

/// One signal the close path sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
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
    /// Whether it went to every process in the child's cgroup
    /// ([`Containment`](crate::Containment): the `KILL` rung through `cgroup.kill`, or every
    /// rung with [`KillMode::ControlGroup`](crate::KillMode::ControlGroup)).
    pub to_cgroup: bool,
    /// How many processes it reached, when that is known: the members of a contained child's
    /// cgroup (counted just before), 1 or 0 for a child alone. `None` for a process group
    /// (`killpg` does not say).
    pub reached: Option<usize>,
    /// What the child did with this signal, read right before it was sent (Linux; `None`:
    /// not read — an uncatchable signal, a child that had exited, another platform). See
    /// [`Ladder::skip_ignored`](crate::Ladder::skip_ignored).
    pub disposition: Option<Disposition>,
    /// Sent to the processes left after the main process (the child: often a launcher such as
    /// `npx` or `sh -c`) exited on this rung without the signal having reached them: the rung
    /// that ended the main, again, for the rest (its grace counted from here). `Display`:
    /// `TERM (to those left) reached 2 +8.7ms`. See "No grace waited for a launcher gone" in
    /// `docs/design.md`.
    pub to_rest: bool,
}

/// A rung the close did not send because the server ignores its signal (see
/// [`Ladder::skip_ignored`](crate::Ladder::skip_ignored)): its grace was not spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct SkippedRung {
    /// The ladder rung skipped.
    pub rung: usize,
    /// Its signal.
    pub signal: Signal,
    /// When it was due and skipped, since the close began.
    #[cfg_attr(feature = "serde", serde(rename = "at_ms", with = "millis"))]
    pub at: Duration,
}

impl SentSignal {
    /// A signal sent at `at` (since the close began) by ladder rung `rung`, to the whole
    /// process group if `to_group`. For drivers that climb a ladder of their own (the CLI).
    pub fn new(signal: Signal, at: Duration, rung: usize, to_group: bool) -> SentSignal {
        SentSignal {
            signal,
            at,
            rung,
            to_group,
            to_cgroup: false,
            reached: None,
            disposition: None,
            to_rest: false,
        }
    }
}

/// The timeline of one close. Offsets are measured from the moment the close began.
///
/// `Display` prints one line: `program[pid]:`, then the shutdown, each signal, the exit and
/// the reap in the order they happened (an exit seen before a signal to surviving group
/// members comes first), then what has no time (memory release, hand-off, survivors), and the
/// total. For a child that exits on the first rung:
///
/// ```
/// use std::process::Command;
/// use childguard::{ChildHandle, SocketMode};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut cmd = Command::new("sleep");
/// cmd.arg("60");
/// let handle = ChildHandle::builder(cmd)
///     .socket(SocketMode::Stdio)
///     .process_group(true)
///     .ladder("TERM:5s,KILL:1s".parse()?)
///     .spawn()?;
/// let pid = handle.id().unwrap();
/// let line = handle.close()?.to_string();
/// // e.g. "sleep[4242]: shutdown +0.0ms, TERM (group) +0.1ms, exited +0.4ms (signal TERM,
/// // ended by rung 0 TERM: default action, no handler ran), reaped +0.4ms; total 0.4ms"
/// // (`sleep` has no TERM handler: the kernel's default action ended it.)
/// // Each time (`+0.4ms`, and the total's `0.4ms`) as `T`, keeping what follows it.
/// let masked: Vec<String> = line
///     .split(' ')
///     .map(|word| {
///         let time = word.trim_end_matches([',', ';']);
///         let number = time.trim_start_matches('+').trim_end_matches("ms");
///         match time.ends_with("ms") && number.parse::<f64>().is_ok() {
///             true => format!("T{}", &word[time.len()..]),
///             false => word.to_string(),
///         }
///     })
///     .collect();
/// assert_eq!(
///     masked.join(" "),
///     format!(
///         "sleep[{pid}]: shutdown T, TERM (group) T, exited T (signal TERM, ended by rung 0 TERM: \
///          default action, no handler ran), reaped T; total T"
///     )
/// );
/// # Ok(()) }
/// ```
///
/// The struct is `#[non_exhaustive]`: new fields may be added; read them by name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
#[must_use = "a close report says whether the child was reaped or handed to the background reaper"]
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
    /// Rungs skipped because the server ignores their signal, in order (`Display`: `HUP
    /// +0.0ms skipped: ignored by the server`).
    pub skipped: Vec<SkippedRung>,
    /// When the child's exit was observed.
    #[cfg_attr(feature = "serde", serde(rename = "exited_ms", with = "opt_millis"))]
    pub exited: Option<Duration>,
    /// When the child was reaped (its pid released).
    #[cfg_attr(feature = "serde", serde(rename = "reaped_ms", with = "opt_millis"))]
    pub reaped: Option<Duration>,
    /// What ended it.
    pub ended_by: Ending,
    /// The child died of the signal of the rung that ended it ([`Ending::Rung`]) and had no
    /// handler for it when it was sent ([`Disposition::Default`]): the kernel's default action
    /// ended it, no handler ran, no cleanup was done. `Display` adds "default action, no
    /// handler ran".
    pub default_action: bool,
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
    /// With [`Ready::Notify`](crate::Ready::Notify): what the server said on its
    /// `NOTIFY_SOCKET` (`STOPPING=1`, `EXTEND_TIMEOUT_USEC=` during the close, the last
    /// `STATUS=`, datagrams ignored).
    pub notify: Option<NotifyReport>,
    /// With [`Builder::capture`](crate::Builder::capture): the tail of the child's output,
    /// read up to its exit (`None` without capture).
    pub output_tail: Option<String>,
    /// Descendants of a process-group leader that had left its group (`setsid`) and were
    /// still alive when the close returned: `killpg` cannot reach them. Found from the
    /// child's descendants listed when the close began (Linux, `process_group(true)` without
    /// containment). A daemon re-parented to init before the close is not found; use
    /// [`Containment`](crate::Containment) for those.
    pub escaped: Vec<u32>,
    /// Containment: the child's cgroup, whether the close removed it, and how many processes
    /// were still in it when the close returned (`None`: not contained).
    pub cgroup: Option<crate::process::containment::CgroupReport>,
    /// Which backend held the child's tree, and why better ones were passed over (`None`:
    /// uncontained, or a process group only: see `containment_fallback`).
    pub containment: Option<crate::process::containment::ContainmentReport>,
    /// With [`Containment::BestEffort`](crate::Containment::BestEffort): why no cgroup could
    /// be made, or why the child could not join it (the path and the errno), so the child was
    /// contained by its process group only.
    pub containment_fallback: Option<String>,
    /// Things worth knowing that are not errors (status lost, `ESRCH` on a signal, stale
    /// cgroups of dead supervisors removed before this child's was made, a cgroup directory
    /// that could not be removed …).
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
            skipped: Vec::new(),
            exited: None,
            reaped: None,
            ended_by: Ending::NoChild,
            default_action: false,
            status: None,
            outlived_ladder: false,
            handed_to_reaper: false,
            group_survivors: Vec::new(),
            socket_may_be_held: false,
            total: Duration::ZERO,
            memory_release: None,
            output_tail: None,
            escaped: Vec::new(),
            cgroup: None,
            containment: None,
            containment_fallback: None,
            notify: None,
            notes: Vec::new(),
        }
    }
}

/// An exit status in the report's words: `exit 3`, `signal KILL`.
pub(crate) fn describe_status(status: &ExitStatus) -> String {
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

/// The one-line text form.
mod text;

/// Serde helpers: durations as fractional milliseconds, times, statuses.
#[cfg(feature = "serde")]
mod serde_helpers;
#[cfg(feature = "serde")]
pub(crate) use serde_helpers::millis;
#[cfg(feature = "serde")]
use serde_helpers::{opt_millis, status, unix_millis};

#[cfg(test)]
mod tests;
