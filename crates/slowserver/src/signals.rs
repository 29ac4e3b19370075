//! Signal names, `--ignore`, and the background thread behind `--log` and
//! `--slow-exit`.

use std::fs::File;
use std::io::{self, Write};
use std::thread;
use std::time::Duration;

use libc::c_int;
use signal_hook::iterator::Signals;

use crate::exit;
use crate::sys::{self, Disposition};

/// The signals `--ignore` accepts, by name without the `SIG` prefix.
///
/// All are catchable and asynchronous; KILL and STOP cannot be ignored, and
/// ignoring faults (SEGV, BUS, ...) would be undefined behaviour.
pub const NAMED: &[(&str, c_int)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("WINCH", libc::SIGWINCH),
    ("URG", libc::SIGURG),
];

/// Signals that end the process when handled (after `--log`/`--slow-exit`).
const TERMINATING: [c_int; 3] = [libc::SIGHUP, libc::SIGTERM, libc::SIGINT];

/// Signals that are only logged.
const LOG_ONLY: [c_int; 2] = [libc::SIGCONT, libc::SIGUSR1];

/// Looks up a signal by name: case-insensitive, with or without `SIG`.
pub fn from_name(name: &str) -> Option<c_int> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    NAMED
        .iter()
        .find(|(n, _)| *n == bare)
        .map(|&(_, signo)| signo)
}

/// The name of `signo` without `SIG`, e.g. `HUP`.
pub fn name(signo: c_int) -> Option<&'static str> {
    NAMED.iter().find(|&&(_, s)| s == signo).map(|&(n, _)| n)
}

/// Sets every signal in `signals` to `SIG_IGN`.
pub fn ignore(signals: &[c_int]) -> io::Result<()> {
    signals
        .iter()
        .try_for_each(|&signo| sys::set_disposition(signo, Disposition::Ignore))
}

/// Puts every signal `--ignore` could have ignored back to `SIG_DFL`
/// (`SIG_IGN` survives exec, so the grandchild worker undoes it).
pub fn reset_all_to_default() {
    for &(_, signo) in NAMED {
        // Best effort: a failure leaves the inherited disposition in place.
        let _ = sys::set_disposition(signo, Disposition::Default);
    }
}

/// What the handler thread does with each signal.
#[derive(Debug)]
pub struct Handling {
    /// Where to append one line per signal, if `--log` was given.
    pub log: Option<File>,
    /// How long to linger before a signal-triggered exit, if `--slow-exit`.
    pub slow_exit: Option<Duration>,
    /// `--notify`: `STOPPING=1` (and `--notify-extend`) before a signal-triggered exit.
    pub notify: Option<crate::ready::Notifier>,
    /// `--reload` (with `--notify`): HUP reloads instead of ending the process.
    pub reload: Option<crate::args::Reload>,
}

/// Installs handlers for HUP, TERM, INT (and CONT, USR1 when logging) that
/// are not in `ignored`, served by a background thread.
///
/// Does nothing without `--log` and `--slow-exit`: then every signal keeps
/// its default disposition.
pub fn install(ignored: &[c_int], handling: Handling) -> io::Result<()> {
    if handling.log.is_none() && handling.slow_exit.is_none() && handling.notify.is_none() {
        return Ok(());
    }
    let logged: &[c_int] = if handling.log.is_some() {
        &LOG_ONLY
    } else {
        &[]
    };
    let wanted: Vec<c_int> = TERMINATING
        .iter()
        .chain(logged)
        .copied()
        .filter(|signo| !ignored.contains(signo))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let mut signals = Signals::new(wanted)?;
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signo in signals.forever() {
                handle(&handling, signo);
            }
        })?;
    Ok(())
}

/// Logs `signo`, then ends the process if it is a terminating signal.
fn handle(handling: &Handling, signo: c_int) {
    if let Some(mut log) = handling.log.as_ref() {
        let line = format!("{}\n", name(signo).unwrap_or("?"));
        // A failed log write must not keep the signal from acting.
        let _ = log.write_all(line.as_bytes()).and_then(|()| log.flush());
    }
    if !TERMINATING.contains(&signo) {
        return;
    }
    if let (libc::SIGHUP, Some(reload), Some(notify)) = (signo, handling.reload, &handling.notify) {
        crate::ready::reload(notify, reload);
        return;
    }
    if let Some(notify) = &handling.notify {
        notify.stopping();
    }
    if let Some(delay) = handling.slow_exit {
        thread::sleep(delay);
        // With --log: that the linger ran to its end (a KILL during it leaves no line).
        if let Some(mut log) = handling.log.as_ref() {
            let _ = writeln!(log, "EXIT {}", 128 + signo).and_then(|()| log.flush());
        }
        exit::after(None, 128 + signo);
    }
    // Dies by the signal itself; the fallback exit only runs if that failed.
    let _ = signal_hook::low_level::emulate_default_handler(signo);
    exit::after(None, 128 + signo);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_case_insensitively_with_or_without_prefix() {
        assert_eq!(from_name("HUP"), Some(libc::SIGHUP));
        assert_eq!(from_name("sigterm"), Some(libc::SIGTERM));
        assert_eq!(from_name("SigUsr1"), Some(libc::SIGUSR1));
        assert_eq!(from_name("KILL"), None);
        assert_eq!(from_name("SIG"), None);
        assert_eq!(from_name(""), None);
    }

    #[test]
    fn names_round_trip() {
        for &(n, signo) in NAMED {
            assert_eq!(name(signo), Some(n));
            assert_eq!(from_name(n), Some(signo));
        }
    }
}
