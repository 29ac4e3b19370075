//! What the child does with a signal, read from the kernel right before a rung: ignores it,
//! catches it, or leaves it to the default action (Linux: `SigIgn`/`SigCgt` in
//! `/proc/PID/status`; elsewhere nothing is read and every rung is sent).
//!
//! **Whose disposition counts.** The leader's — the process we spawned — whatever the rung
//! reaches (the leader alone, its process group, or with
//! [`KillMode::ControlGroup`](crate::KillMode::ControlGroup) every member of its cgroup), and
//! only while the leader runs: once it has exited (group members left over) nothing is read and
//! every rung is sent. Why the leader: the climb is paced by the leader's exit (each rung's
//! wait ends when it exits), the leader is the server whose shutdown the ladder asks for (its
//! workers follow it: postgres backends, nginx workers), and reading every member would mean
//! listing `/proc` for the group before each rung (~0.3 s on a host with 30 000 processes), more
//! than a skip saves. The cost of that choice is bounded: a member that would have acted on the
//! skipped signal gets the next rung — sent at once, so sooner than without the skip, never
//! later.
//!
//! **Race named: a disposition that changes while we read.** The read and the signal are two
//! steps; the server may change its disposition between them (or after the signal, before the
//! kernel delivers it). Started ignoring after our read: the rung is sent and ignored, and its
//! grace is spent, as if nothing had been read (the cost before this module existed). Stopped
//! ignoring after our read (installed a handler): a rung it would have honoured is skipped, and
//! the next rung — sent at once — ends it instead: a stronger signal, never a longer close.
//! Installed or removed a handler after our read: only the report's words "default action, no
//! handler ran" can be wrong (and they are claimed only when the child died of that very
//! signal, see `CloseReport::default_action`). A server closed during its start-up, before it
//! set `SIG_IGN`, is the same race (readiness, `Builder::ready`, avoids it).
//!
//! Safe against pid reuse: `/proc/PID` is read by pid only while the child is our unreaped
//! child ([`Process::is_running`]; invariant 1 of `docs/design.md`), so the pid is its own.

use std::fmt;

use crate::base::signal::Signal;

use super::Process;

/// What a process does with a signal when it arrives, as the kernel says (`SigIgn`/`SigCgt`
/// in `/proc/PID/status`), read right before a rung's signal was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum Disposition {
    /// `SIG_IGN`: the kernel discards the signal; the rung only costs its grace.
    Ignored,
    /// A handler is installed: the server decides what the signal means.
    Caught,
    /// `SIG_DFL`: the kernel's default action (for the ladder's usual signals: the process
    /// ends at once, no handler runs, no cleanup is done).
    Default,
}

impl fmt::Display for Disposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Disposition::Ignored => "ignored",
            Disposition::Caught => "caught",
            Disposition::Default => "default action",
        })
    }
}

/// The signal masks of one `/proc/PID/status`, or `None` for a process that has exited (a
/// zombie's dispositions say nothing about what it would do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Masks {
    ignored: u64,
    caught: u64,
}

impl Masks {
    /// Parses the text of `/proc/PID/status`. `None`: a zombie (`State: Z`/`X`), or a text
    /// without both masks.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // off Linux nothing reads /proc
    pub(crate) fn parse(status: &str) -> Option<Masks> {
        let (mut ignored, mut caught, mut alive) = (None, None, true);
        for line in status.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key {
                "State" => alive = !value.starts_with(['Z', 'X']),
                "SigIgn" => ignored = u64::from_str_radix(value, 16).ok(),
                "SigCgt" => caught = u64::from_str_radix(value, 16).ok(),
                _ => {}
            }
        }
        Some(Masks {
            ignored: ignored?,
            caught: caught?,
        })
        .filter(|_| alive)
    }

    /// What these masks say of `signal` (bit `signal - 1`, as the kernel prints them).
    pub(crate) fn of(&self, signal: Signal) -> Option<Disposition> {
        let bit = u32::try_from(signal.as_raw().checked_sub(1)?).ok()?;
        let mask = 1u64.checked_shl(bit)?;
        Some(if self.ignored & mask != 0 {
            Disposition::Ignored
        } else if self.caught & mask != 0 {
            Disposition::Caught
        } else {
            Disposition::Default
        })
    }
}

impl Process {
    /// The leader's disposition of `signal` now, or `None` when it cannot be known: not Linux,
    /// an uncatchable signal (`KILL`, `STOP`: never skipped, never handled), the leader no
    /// longer running (see the module's "whose disposition counts"), or `/proc` unreadable
    /// (`hidepid`, no fd left). `None` means "send the rung as written".
    pub(crate) fn disposition(&self, signal: Signal) -> Option<Disposition> {
        if !self.is_running() {
            return None;
        }
        #[cfg(target_os = "linux")]
        if let Some(container) = self.container() {
            return of_pid(container.main_pid()?, signal);
        }
        of_pid(self.server_pid(), signal)
    }
}

/// The disposition of `signal` in process `pid` as `/proc` shows it now (`None` for an
/// uncatchable signal, or when unreadable). The caller makes sure `pid` names the process it
/// means (a child not yet reaped; a pidfd checked after the read).
pub(crate) fn of_pid(pid: u32, signal: Signal) -> Option<Disposition> {
    if !signal.is_catchable() || signal == Signal::NONE {
        return None;
    }
    read(pid)?.of(signal)
}

#[cfg(target_os = "linux")]
fn read(pid: u32) -> Option<Masks> {
    let text = crate::base::kernel_text::read(format!("/proc/{pid}/status")).ok()?;
    Masks::parse(&text)
}

#[cfg(not(target_os = "linux"))]
fn read(_pid: u32) -> Option<Masks> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HUP, PIPE and ALRM ignored (as redis 7 does), INT and TERM caught.
    const STATUS: &str = "Name:\tserver\nState:\tS (sleeping)\nSigQ:\t0/96363\n\
                          SigPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n\
                          SigIgn:\t0000000000003001\nSigCgt:\t0000000000004002\n";

    #[test]
    fn reads_ignored_caught_and_default_from_the_masks() {
        let masks = Masks::parse(STATUS).unwrap();
        assert_eq!(masks.of(Signal::HUP), Some(Disposition::Ignored));
        assert_eq!(
            masks.of(Signal::from_raw(13).unwrap()),
            Some(Disposition::Ignored)
        ); // PIPE
        assert_eq!(masks.of(Signal::INT), Some(Disposition::Caught));
        assert_eq!(masks.of(Signal::TERM), Some(Disposition::Caught));
        assert_eq!(masks.of(Signal::QUIT), Some(Disposition::Default));
        assert_eq!(masks.of(Signal::USR1), Some(Disposition::Default));
    }

    #[test]
    fn a_zombie_or_a_text_without_masks_says_nothing() {
        let zombie = STATUS.replace("S (sleeping)", "Z (zombie)");
        assert_eq!(Masks::parse(&zombie), None);
        assert_eq!(Masks::parse("Name:\tx\nSigIgn:\t0000000000000001\n"), None);
        assert_eq!(Masks::parse("SigIgn:\tnot hex\nSigCgt:\t0\n"), None);
    }

    #[test]
    fn signal_zero_has_no_bit() {
        let masks = Masks::parse(STATUS).unwrap();
        assert_eq!(masks.of(Signal::NONE), None);
    }
}
