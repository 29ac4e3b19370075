//! The signal state a program starts with, when the builder sets it
//! ([`Builder::start_signals`](crate::Builder::start_signals),
//! [`Builder::foreground`](crate::Builder::foreground)): applied in the child between fork
//! (or clone3) and exec, on both spawn paths (`exec.rs`'s hook, `own_child.rs`), with
//! async-signal-safe calls only.

/// What the child sets up, as bitmasks of signal numbers 1–64 (bit `n - 1`: signal `n`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StartSignals {
    /// `Some((ignored, blocked))`: every signal in `ignored` starts `SIG_IGN`, every other
    /// at `SIG_DFL`; the mask is `blocked`. `None`: as std leaves them.
    pub(crate) dispositions: Option<(u64, u64)>,
    /// The child leads a process group of its own and makes it the foreground group of the
    /// terminal on its stdin (none there is fine).
    pub(crate) foreground: bool,
}

impl StartSignals {
    pub(crate) fn is_set(&self) -> bool {
        self.dispositions.is_some() || self.foreground
    }
}

/// Applies `state` in the child: every signal blocked first (so that `tcsetpgrp` from a
/// background group is not stopped by `SIGTTOU`, and no default action strikes half-way),
/// then the foreground group, the dispositions, and last the mask (`blocked`, or empty).
/// `ignore_sigpipe` keeps `SIGPIPE` ignored whatever `ignored` says. Returns the errno of the
/// call that failed.
pub(super) fn apply(state: &StartSignals, ignore_sigpipe: bool) -> Result<(), i32> {
    // SAFETY: sigfillset/sigemptyset/sigaddset fill sets we own; sigprocmask(2) changes this
    // (one-thread) child's mask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        check(libc::sigprocmask(
            libc::SIG_SETMASK,
            &all,
            std::ptr::null_mut(),
        ))?;
    }
    if state.foreground {
        // SAFETY: setpgid(2), getpgrp(2) and tcsetpgrp(3) take no memory arguments.
        unsafe {
            check(libc::setpgid(0, 0))?;
            if libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpgrp()) != 0 {
                let errno = last_errno();
                // No terminal on stdin (or none behind it): nothing to take.
                if errno != libc::ENOTTY && errno != libc::ENXIO {
                    return Err(errno);
                }
            }
        }
    }
    let blocked = match state.dispositions {
        Some((ignored, blocked)) => {
            for signo in 1..=64 {
                if signo == libc::SIGKILL || signo == libc::SIGSTOP {
                    continue;
                }
                let ignore = ignored & (1u64 << (signo - 1)) != 0
                    || (signo == libc::SIGPIPE && ignore_sigpipe);
                let disposition = if ignore { libc::SIG_IGN } else { libc::SIG_DFL };
                // SAFETY: signal(2) with SIG_IGN or SIG_DFL installs no handler; a number the
                // C library keeps for itself fails with EINVAL, which is fine to drop.
                unsafe { libc::signal(signo, disposition) };
            }
            blocked
        }
        None => 0,
    };
    set_mask(blocked)
}

/// Unblocks every signal in the child: the mask a program starts with when the builder sets
/// none. Returns the errno if it failed.
pub(super) fn unblock_all() -> Result<(), i32> {
    set_mask(0)
}

/// `sigprocmask(2)` `SIG_SETMASK` to the signals of `blocked` (bit `n - 1`: signal `n`), in
/// the (one-thread) child. Returns the errno if it failed.
fn set_mask(blocked: u64) -> Result<(), i32> {
    // SAFETY: sigemptyset/sigaddset fill a set we own, then sigprocmask(2) changes this
    // (one-thread) child's mask.
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut mask);
        for signo in 1..=64 {
            if blocked & (1u64 << (signo - 1)) != 0 {
                libc::sigaddset(&mut mask, signo);
            }
        }
        check(libc::sigprocmask(
            libc::SIG_SETMASK,
            &mask,
            std::ptr::null_mut(),
        ))
    }
}

/// `Err(errno)` for a call that returned -1 (the child's steps report errnos, never boxed).
pub(super) fn check(rc: libc::c_int) -> Result<(), i32> {
    if rc == -1 {
        Err(last_errno())
    } else {
        Ok(())
    }
}

/// This thread's errno (in a child of our spawn: its own, in the parent thread's TLS).
pub(super) fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
