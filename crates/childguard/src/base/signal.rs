//! [`Signal`]: a Unix signal by number, with the names people type.

use std::fmt;
use std::str::FromStr;

/// A Unix signal, as sent by a [`Rung`](crate::Rung) or [`ChildHandle::kill`](crate::ChildHandle::kill).
///
/// Parsed from a name with or without the `SIG` prefix, in any case (`HUP`, `sighup`), or from
/// a number (`15`). Numbers must name a signal this platform knows, or a real-time signal on
/// Linux, or be `0` ([`Signal::NONE`]: a rung that sends nothing and only waits, as
/// `timeout -s 0`). [`Display`](fmt::Display) prints the short name (`TERM`), or the number
/// for a real-time signal and for `0`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signal(i32);

/// Names we accept and print, in the order `Display` prefers.
const NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("SYS", libc::SIGSYS),
    ("ABORT", libc::SIGABRT),
    ("ALARM", libc::SIGALRM),
    ("CHILD", libc::SIGCHLD),
];

/// Linux's own signals (no other platform numbers them).
#[cfg(any(target_os = "linux", target_os = "android"))]
const PLATFORM_NAMES: &[(&str, i32)] = &[("STKFLT", libc::SIGSTKFLT), ("PWR", libc::SIGPWR)];
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const PLATFORM_NAMES: &[(&str, i32)] = &[];

/// Every name we know, in the order `Display` prefers.
fn names() -> impl Iterator<Item = &'static (&'static str, i32)> {
    NAMES.iter().chain(PLATFORM_NAMES)
}

impl Signal {
    /// Signal `0`: sends nothing (as `kill -0`). A rung with it only waits out its grace, so
    /// `0:5s,KILL` means "wait 5 s, then `SIGKILL`" (`timeout -s 0 -k 5`). No `SIGCONT`
    /// follows it and no parent-death signal can carry it.
    pub const NONE: Signal = Signal(0);
    /// `SIGHUP`: "your terminal (here: your client) went away".
    pub const HUP: Signal = Signal(libc::SIGHUP);
    /// `SIGINT`.
    pub const INT: Signal = Signal(libc::SIGINT);
    /// `SIGTERM`: the polite request to exit.
    pub const TERM: Signal = Signal(libc::SIGTERM);
    /// `SIGKILL`: cannot be caught, blocked or ignored.
    pub const KILL: Signal = Signal(libc::SIGKILL);
    /// `SIGCONT`: resumes a stopped process; sent after every catchable rung.
    pub const CONT: Signal = Signal(libc::SIGCONT);
    /// `SIGSTOP`: cannot be caught; stops the process.
    pub const STOP: Signal = Signal(libc::SIGSTOP);
    /// `SIGUSR1`.
    pub const USR1: Signal = Signal(libc::SIGUSR1);
    /// `SIGUSR2`.
    pub const USR2: Signal = Signal(libc::SIGUSR2);
    /// `SIGQUIT`.
    pub const QUIT: Signal = Signal(libc::SIGQUIT);

    /// The signal with this number, if the platform has one: a signal with a name here, or on
    /// Linux a real-time signal from libc's `SIGRTMIN()` to `SIGRTMAX()`. The numbers between
    /// the kernel's first real-time signal (32) and libc's `SIGRTMIN()` are libc's own (glibc
    /// uses them for threads and timers) and are refused.
    pub fn from_raw(signo: i32) -> Option<Signal> {
        if signo == 0 || names().any(|&(_, n)| n == signo) || is_realtime(signo) {
            Some(Signal(signo))
        } else {
            None
        }
    }

    /// The signal number.
    pub fn as_raw(self) -> i32 {
        self.0
    }

    /// The short name without `SIG` (`"TERM"`), or `None` for a real-time signal.
    pub fn name(self) -> Option<&'static str> {
        names().find(|&&(_, n)| n == self.0).map(|&(name, _)| name)
    }

    /// Whether a process can catch, block or ignore this signal (everything but `KILL` and
    /// `STOP`, and [`Signal::NONE`], which delivers nothing to catch). A catchable rung is
    /// followed by `SIGCONT` so that a stopped child sees it.
    pub fn is_catchable(self) -> bool {
        self != Signal::KILL && self != Signal::STOP && self != Signal::NONE
    }
}

#[cfg(target_os = "linux")]
fn is_realtime(signo: i32) -> bool {
    (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signo)
}

#[cfg(not(target_os = "linux"))]
fn is_realtime(_signo: i32) -> bool {
    false
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.0),
        }
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "SIG{name}"),
            None => write!(f, "Signal({})", self.0),
        }
    }
}

/// Why a string is not a [`Signal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalParseError {
    input: String,
}

impl fmt::Display for SignalParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.input.is_empty() {
            return f.write_str("empty signal name (expected e.g. HUP, SIGTERM or 15)");
        }
        write!(
            f,
            "unknown signal {:?} (expected a name such as HUP, SIGTERM, KILL, or a signal number)",
            self.input
        )
    }
}

impl std::error::Error for SignalParseError {}

impl FromStr for Signal {
    type Err = SignalParseError;

    fn from_str(s: &str) -> Result<Signal, SignalParseError> {
        let err = || SignalParseError {
            input: s.to_string(),
        };
        let trimmed = s.trim();
        if trimmed.is_empty() {
            return Err(err());
        }
        if trimmed.bytes().all(|b| b.is_ascii_digit()) {
            return trimmed
                .parse::<i32>()
                .ok()
                .and_then(Signal::from_raw)
                .ok_or_else(err);
        }
        let upper = trimmed.to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        names()
            .find(|&&(name, _)| name == bare)
            .map(|&(_, n)| Signal(n))
            .ok_or_else(err)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Signal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_prefixes_and_numbers() {
        assert_eq!("HUP".parse(), Ok(Signal::HUP));
        assert_eq!("sigterm".parse(), Ok(Signal::TERM));
        assert_eq!("SIGKILL".parse(), Ok(Signal::KILL));
        assert_eq!("9".parse(), Ok(Signal::KILL));
        assert_eq!(" 15 ".parse(), Ok(Signal::TERM));
    }

    #[test]
    fn rejects_unknown_and_out_of_range() {
        for bad in ["", "SIG", "HUPP", "00x", "999", "-1", "9x", "SIGSIGHUP"] {
            let err = bad.parse::<Signal>().unwrap_err();
            assert!(err.to_string().contains("signal"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in [Signal::HUP, Signal::TERM, Signal::KILL, Signal::USR2] {
            assert_eq!(s.to_string().parse(), Ok(s));
        }
        #[cfg(target_os = "linux")]
        {
            let rt = Signal::from_raw(libc::SIGRTMIN()).unwrap();
            assert_eq!(rt.to_string().parse(), Ok(rt));
        }
    }

    #[test]
    fn every_named_signal_converts_through_rustix_safe_constructor() {
        // `sys::rustix_signal` builds only real-time signals unchecked; every name we accept
        // must be one rustix names itself.
        for &(name, n) in NAMES {
            let rustix = rustix::process::Signal::from_named_raw(n);
            assert_eq!(rustix.map(|s| s.as_raw()), Some(n), "{name}");
            assert_eq!(crate::sys::rustix_signal(Signal(n)).unwrap().as_raw(), n);
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn real_time_signals_convert_and_libc_reserved_ones_are_refused() {
        for n in [libc::SIGRTMIN(), libc::SIGRTMIN() + 1, libc::SIGRTMAX()] {
            let signal = Signal::from_raw(n).unwrap();
            assert_eq!(signal.name(), None);
            assert_eq!(crate::sys::rustix_signal(signal).unwrap().as_raw(), n);
        }
        // The kernel's real-time numbers below libc's SIGRTMIN() belong to libc.
        for n in 32..libc::SIGRTMIN() {
            assert_eq!(Signal::from_raw(n), None, "{n}");
            let err = crate::sys::rustix_signal(Signal(n)).unwrap_err();
            assert!(err.to_string().contains("real-time"), "{n}: {err}");
        }
        assert_eq!(Signal::from_raw(libc::SIGRTMAX() + 1), None);
    }

    #[test]
    fn only_kill_and_stop_are_uncatchable() {
        assert!(!Signal::KILL.is_catchable());
        assert!(!Signal::STOP.is_catchable());
        assert!(Signal::HUP.is_catchable());
        assert!(
            !Signal::NONE.is_catchable(),
            "nothing to catch, so no CONT after it"
        );
    }

    #[test]
    fn zero_is_the_signal_that_sends_nothing() {
        assert_eq!("0".parse(), Ok(Signal::NONE));
        assert_eq!(Signal::from_raw(0), Some(Signal::NONE));
        assert_eq!(Signal::NONE.to_string(), "0");
        assert_eq!(Signal::NONE.name(), None);
    }
}
