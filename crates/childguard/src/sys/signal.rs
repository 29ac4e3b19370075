//! Signals: our [`Signal`] as rustix's type, and `sigaction(2)`/`signal(2)` for the
//! dispositions childguard must know (`SIGCHLD` auto-reaping, `SIGPIPE` at process start).

use std::io;

use crate::base::signal::Signal;

/// Converts our validated [`Signal`] into rustix's type.
///
/// A named signal (`HUP`, `TERM` …) goes through rustix's safe `Signal::from_named_raw`. A
/// real-time signal is the one case rustix cannot name, and is built explicitly here: see
/// [`realtime_signal`].
pub(crate) fn rustix_signal(signal: Signal) -> io::Result<rustix::process::Signal> {
    match rustix::process::Signal::from_named_raw(signal.as_raw()) {
        Some(named) => Ok(named),
        None => realtime_signal(signal.as_raw()),
    }
}

/// A real-time signal (`SIGRTMIN()..=SIGRTMAX()` as libc reports them) as rustix's type.
///
/// rustix's `Signal::from_raw_unchecked` forbids sending a signal the C library reserves for
/// itself: glibc keeps the kernel's first real-time numbers (32 and 33) for its threads and
/// timers and reports `SIGRTMIN()` above them, so the numbers from `SIGRTMIN()` to
/// `SIGRTMAX()` are exactly those libc leaves to programs (rustix-libc-wrappers' `Signal::rt`
/// builds them the same way). The range is checked here, at the call, not only when the
/// [`Signal`] was made.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn realtime_signal(signo: i32) -> io::Result<rustix::process::Signal> {
    if !(libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signo) {
        return Err(unknown_signal(signo));
    }
    // SAFETY: `signo` is in libc's SIGRTMIN()..=SIGRTMAX() (checked just above): a valid,
    // non-zero signal number that libc does not reserve, which is what `from_raw_unchecked`
    // asks of a signal that is then sent.
    Ok(unsafe { rustix::process::Signal::from_raw_unchecked(signo) })
}

/// Elsewhere [`Signal`] holds named signals only.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn realtime_signal(signo: i32) -> io::Result<rustix::process::Signal> {
    Err(unknown_signal(signo))
}

fn unknown_signal(signo: i32) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("signal {signo} is neither a named signal nor a real-time one"),
    )
}

/// Whether the host's `SIGCHLD` disposition makes the kernel reap children by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SigchldReaping {
    /// Children become zombies until waited for, as we need.
    Ours,
    /// The handler is `SIG_IGN`.
    Ignored,
    /// The `SA_NOCLDWAIT` flag is set (whatever the handler).
    NoChildWait,
}

/// `sigaction(2)` with a null new action: does `SIGCHLD`'s disposition (`SIG_IGN`, or the
/// `SA_NOCLDWAIT` flag) make the kernel reap children itself?
///
/// Either way an exited child never becomes a zombie: its status is lost and its pid may be
/// reused while we still think we own it.
pub(crate) fn sigchld_reaping() -> io::Result<SigchldReaping> {
    let old = disposition(libc::SIGCHLD)?;
    Ok(if old.sa_sigaction == libc::SIG_IGN {
        SigchldReaping::Ignored
    } else if old.sa_flags & libc::SA_NOCLDWAIT != 0 {
        SigchldReaping::NoChildWait
    } else {
        SigchldReaping::Ours
    })
}

/// `sigaction(2)` with a null new action: `signo`'s current disposition.
fn disposition(signo: libc::c_int) -> io::Result<libc::sigaction> {
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null `act` only reads the current disposition into `old`, which is a valid,
    // zeroed `sigaction` buffer that lives across the call.
    let rc = unsafe { libc::sigaction(signo, std::ptr::null(), old.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sigaction returned 0, so it filled `old`.
    Ok(unsafe { old.assume_init() })
}

/// Whether `signo`'s disposition is `SIG_IGN`.
fn is_ignored(signo: libc::c_int) -> io::Result<bool> {
    Ok(disposition(signo)?.sa_sigaction == libc::SIG_IGN)
}

/// `SIGPIPE`'s disposition when this process was loaded: 0 unknown, 1 default or caught,
/// 2 ignored. Written once, by [`record_sigpipe_at_load`], before `main`.
static SIGPIPE_AT_LOAD: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Race avoided (std's SIGPIPE reset): Rust's runtime sets `SIGPIPE` to `SIG_IGN` before
/// `main`, so by then the disposition the process was started with is gone. ELF constructors
/// (`.init_array`) run before the runtime's setup: this one reads it first. One `sigaction`
/// per process start, in every program that links childguard.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
#[used]
#[link_section = ".init_array"]
static RECORD_SIGPIPE_AT_LOAD: extern "C" fn() = record_sigpipe_at_load;

#[cfg_attr(
    not(any(target_os = "linux", target_os = "android", target_os = "freebsd")),
    allow(dead_code)
)]
extern "C" fn record_sigpipe_at_load() {
    let state = match is_ignored(libc::SIGPIPE) {
        Ok(true) => 2,
        Ok(false) => 1,
        Err(_) => 0,
    };
    SIGPIPE_AT_LOAD.store(state, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `SIGPIPE` was ignored when this process started (before Rust's runtime changed
/// it); `None` where that could not be recorded (no ELF constructors on this platform).
#[inline(never)]
pub(crate) fn sigpipe_ignored_at_start() -> Option<bool> {
    match SIGPIPE_AT_LOAD.load(std::sync::atomic::Ordering::Relaxed) {
        2 => Some(true),
        1 => Some(false),
        _ => None,
    }
}

/// `pthread_sigmask(3)` with a null set: whether this thread blocks any signal. A child made
/// by std's `posix_spawn` or `fork` inherits that mask (std leaves it alone); ours starts with
/// nothing blocked, so std's path then needs the hook that clears it.
pub(crate) fn thread_blocks_signals() -> bool {
    let mut mask = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: a null `set` only reads the mask into `mask`, a valid out-pointer.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), mask.as_mut_ptr()) };
    if rc != 0 {
        return false;
    }
    // SAFETY: pthread_sigmask returned 0, so it filled `mask`; sigismember only reads it.
    (1..=64).any(|signo| unsafe { libc::sigismember(mask.as_ptr(), signo) } == 1)
}

/// `signal(2)` `SIGPIPE`, `SIG_IGN`: for the child, between fork and exec (async-signal-safe).
pub(super) fn ignore_sigpipe() -> io::Result<()> {
    // SAFETY: SIG_IGN installs no handler; the call only changes this process's disposition.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
