//! Which signals `init` listens for, which of them start the stop, and forwarding the others
//! to CMD (or its process group, with `-g`), as tini does.

use childguard::Signal;

use crate::messages::say;

/// Every signal `init` catches and forwards — tini's set: all but those that cannot be caught
/// (`KILL`, `STOP`), `CHLD` (it means "reap"), the faults (`ILL`, `FPE`, `SEGV`, `BUS`, `TRAP`,
/// `ABRT`, `SYS`: a real fault must end `init`; tini leaves them unblocked too), and `TTIN` /
/// `TTOU`, which `init` ignores (CMD's group owns the terminal; see `Builder::foreground`).
/// Real-time signals are included (glibc's own two below `SIGRTMIN` are not ours to catch).
pub fn listened() -> Vec<i32> {
    use libc::*;
    let skip = [
        SIGKILL, SIGSTOP, SIGCHLD, SIGILL, SIGFPE, SIGSEGV, SIGBUS, SIGTRAP, SIGABRT, SIGSYS,
        SIGTTIN, SIGTTOU,
    ];
    (1..32)
        .chain(SIGRTMIN()..=SIGRTMAX())
        .filter(|s| !skip.contains(s))
        .collect()
}

/// Whether `signal` starts the stop (the ladder) rather than being forwarded: `TERM` (the
/// engine's default `STOPSIGNAL`, and what Kubernetes and Nomad send) and `INT` (`STOPSIGNAL
/// SIGINT`, `docker stop` of an image that asks for it).
pub fn is_stop(signal: Signal) -> bool {
    signal == Signal::TERM || signal == Signal::INT
}

/// Sends `signal` to CMD (`pid`), or to its process group with `group`. A CMD already gone is
/// worth a warning at verbosity 1, as in tini.
pub fn forward(signal: Signal, pid: u32, group: bool, verbosity: u32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    let target = if group { -pid } else { pid };
    if verbosity > 2 {
        say!("passing signal SIG{signal} to {target}");
    }
    if let Err(e) = crate::sys::kill(target, signal.as_raw()) {
        if verbosity > 0 {
            match e.raw_os_error() {
                Some(libc::ESRCH) => say!("child was dead when forwarding signal SIG{signal}"),
                _ => say!("forwarding SIG{signal} to {target} failed: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listens_to_what_tini_forwards() {
        let set = listened();
        for s in [
            libc::SIGTERM,
            libc::SIGUSR1,
            libc::SIGWINCH,
            libc::SIGHUP,
            libc::SIGPIPE,
        ] {
            assert!(set.contains(&s), "{s}");
        }
        for s in [
            libc::SIGKILL,
            libc::SIGCHLD,
            libc::SIGSEGV,
            libc::SIGTTOU,
            32,
            33,
        ] {
            assert!(!set.contains(&s), "{s}");
        }
        assert!(set.contains(&libc::SIGRTMAX()));
    }

    #[test]
    fn stop_signals() {
        assert!(is_stop(Signal::TERM) && is_stop(Signal::INT));
        assert!(!is_stop(Signal::USR1) && !is_stop(Signal::HUP));
    }
}
