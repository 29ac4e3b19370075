//! Every `unsafe` block of the CLI, one thin wrapper per system call (as the library's `sys`),
//! each named with its man page. `childguard init` must read and restore the signal mask and
//! the ignored signals it was started with, and every command receives its signals through a
//! `signalfd` ([`crate::signal_source`]): neither std nor rustix exposes those (rustix has no
//! `sigaction` nor `signalfd`, and its `sigprocmask` is in the runtime feature).
//!
//! Linux only: `init` is.

use std::io;
use std::mem::MaybeUninit;
use std::ptr;

/// The highest signal number (`SIGRTMAX`).
pub fn max_signal() -> i32 {
    libc::SIGRTMAX()
}

/// The signal configuration a process was started with, as the engine (or a shell) left it:
/// its blocked mask and which signals were ignored. [`SignalState::capture`] reads it before
/// `init` changes anything; [`SignalState::for_cmd`] gives it to CMD's builder, which puts it back in CMD before it execs, as tini
/// does (its `restore_signals`).
#[derive(Clone, Copy)]
pub struct SignalState {
    mask: libc::sigset_t,
    /// `ignored[n]`: signal `n` was `SIG_IGN` (index 0 unused).
    ignored: [bool; 65],
}

impl std::fmt::Debug for SignalState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ignored: Vec<i32> = (1..=64).filter(|&n| self.ignored[n as usize]).collect();
        let blocked: Vec<i32> = (1..=64).filter(|&n| self.is_blocked(n)).collect();
        f.debug_struct("SignalState")
            .field("blocked", &blocked)
            .field("ignored", &ignored)
            .finish()
    }
}

impl SignalState {
    /// Reads this thread's mask (`pthread_sigmask(3)` with a null set) and each signal's
    /// disposition (`sigaction(2)` with a null new action). Call it on the main thread before
    /// any other thread starts: threads inherit the mask of the thread that made them, so the
    /// main thread's mask then is the one the process was started with.
    pub fn capture() -> io::Result<SignalState> {
        let mut mask = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: a null `set` only reads the mask into `mask`, a valid out-pointer.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, ptr::null(), mask.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: pthread_sigmask returned 0, so it filled `mask`.
        let mask = unsafe { mask.assume_init() };
        let mut ignored = [false; 65];
        for signo in 1..=max_signal().min(64) {
            ignored[signo as usize] = disposition_is_ignore(signo);
        }
        // Rust's runtime set SIGPIPE to SIG_IGN before main: what it was is what the
        // library's ELF constructor recorded (`None`: unknown, take the default).
        ignored[libc::SIGPIPE as usize] = childguard::sigpipe_ignored_at_start().unwrap_or(false);
        Ok(SignalState { mask, ignored })
    }

    /// The signals that were ignored and those that were blocked, for CMD's
    /// [`Builder::start_signals`](childguard::Builder::start_signals): CMD starts with them
    /// (tini's `restore_signals`), every other signal at its default — which also undoes
    /// `init`'s own ignoring of `SIGTTIN` and `SIGTTOU` and its handlers.
    pub fn for_cmd(&self) -> (Vec<childguard::Signal>, Vec<childguard::Signal>) {
        let set = |pick: &dyn Fn(i32) -> bool| -> Vec<childguard::Signal> {
            (1..=64)
                .filter(|&n| pick(n))
                .filter_map(childguard::Signal::from_raw)
                .collect()
        };
        (set(&|n| self.is_ignored(n)), set(&|n| self.is_blocked(n)))
    }

    /// Whether `signo` was blocked.
    pub fn is_blocked(&self, signo: i32) -> bool {
        // SAFETY: `self.mask` is an initialised set; sigismember only reads it.
        unsafe { libc::sigismember(&self.mask, signo) == 1 }
    }

    /// Whether `signo` was ignored.
    pub fn is_ignored(&self, signo: i32) -> bool {
        usize::try_from(signo)
            .ok()
            .and_then(|n| self.ignored.get(n))
            .copied()
            .unwrap_or(false)
    }
}

/// `sigaction(2)` with a null new action: whether `signo`'s disposition is `SIG_IGN`. `false`
/// for a number the C library refuses (glibc keeps 32 and 33 for itself).
fn disposition_is_ignore(signo: i32) -> bool {
    let mut old = MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null `act` only reads the disposition into `old`, a valid out-pointer.
    let rc = unsafe { libc::sigaction(signo, ptr::null(), old.as_mut_ptr()) };
    // SAFETY: zeroed is a valid `sigaction`, and sigaction filled it when it returned 0.
    rc == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN
}

/// `pthread_sigmask(3)` `SIG_SETMASK` with an empty set: this thread (and the threads it starts
/// later) blocks nothing, so every signal sent to `init` reaches its handlers — a `TERM` the
/// engine left blocked included, as tini's `sigtimedwait` on a full set receives it.
pub fn unblock_all() -> io::Result<()> {
    let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set it is given.
    unsafe { libc::sigemptyset(empty.as_mut_ptr()) };
    // SAFETY: `empty` was initialised above; the old mask is not asked for.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, empty.as_ptr(), ptr::null_mut()) };
    match rc {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// `signal(2)` `SIG_IGN` for `signo` in this process.
pub fn ignore(signo: i32) -> io::Result<()> {
    // SAFETY: SIG_IGN is a valid disposition; no handler code is involved.
    if unsafe { libc::signal(signo, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `kill(2)`: sends `signo` (any number, real-time ones included, which rustix's `Signal`
/// does not name) to `pid`, or to process group `-pid` when `pid` is negative.
pub fn kill(pid: i32, signo: i32) -> io::Result<()> {
    // SAFETY: kill has no memory arguments.
    if unsafe { libc::kill(pid, signo) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `/proc/self/status`-style check for the tests of this module: whether `signo` is ignored
/// in this process now.
#[cfg(test)]
pub fn is_ignored_now(signo: i32) -> bool {
    disposition_is_ignore(signo)
}

/// `sigaction(2)` `SIG_DFL` for each of `signals` that is `SIG_IGN` now (the others keep what
/// they have). For signals about to be blocked and read from a `signalfd`: a program we spawn
/// then starts with them at their default, as it did when a handler of ours replaced the
/// inherited `SIG_IGN` (exec resets handled signals, not ignored ones).
pub fn default_if_ignored(signals: &[i32]) {
    for &signo in signals {
        if disposition_is_ignore(signo) {
            // SAFETY: SIG_DFL is a valid disposition; no handler code is involved.
            unsafe { libc::signal(signo, libc::SIG_DFL) };
        }
    }
}

/// `pthread_sigmask(3)` `SIG_BLOCK` of `signals` in this thread (and the threads it starts
/// later), then `signalfd(2)` for them (close-on-exec, non-blocking reads).
pub fn block_into_signalfd(signals: &[i32]) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let mut set = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set; sigaddset adds to the initialised set (a number
    // it refuses, EINVAL, is left out: the caller lists only valid ones).
    let set = unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for &signo in signals {
            libc::sigaddset(set.as_mut_ptr(), signo);
        }
        set.assume_init()
    };
    // SAFETY: `set` is initialised; the old mask is not asked for.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    // SAFETY: -1 asks for a new fd; `set` is a valid sigset_t for the call's duration.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: signalfd returned a new fd that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// `read(2)` of a `signalfd`: the signals dequeued, each as (number, `si_code`), at most 16
/// per call; none when none is pending (the fd does not block).
pub fn read_signalfd(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<Vec<(i32, i32)>> {
    use std::os::fd::AsRawFd;
    const N: usize = 16;
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    let mut buf = [MaybeUninit::<libc::signalfd_siginfo>::uninit(); N];
    // SAFETY: the buffer holds N records of the struct the kernel writes, and is that long.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), N * size) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(Vec::new()),
            _ => Err(e),
        };
    }
    let records = n as usize / size;
    Ok(buf[..records]
        .iter()
        .map(|record| {
            // SAFETY: the kernel wrote whole records into the first `records` entries.
            let info = unsafe { record.assume_init_ref() };
            (info.ssi_signo as i32, info.ssi_code)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_reads_ignored_signals() {
        // The test harness ignores nothing of these by default; ignore one and read it back.
        ignore(libc::SIGURG).unwrap();
        let state = SignalState::capture().unwrap();
        assert!(state.is_ignored(libc::SIGURG));
        assert!(is_ignored_now(libc::SIGURG));
        assert!(!state.is_ignored(libc::SIGKILL));
        assert!(!state.is_ignored(1000));
    }
}
