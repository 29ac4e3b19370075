//! Every `unsafe` block and raw system call of childguard lives here, one thin wrapper per call,
//! each named after its man page. Everything else uses [`rustix`]'s safe wrappers.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::signal::Signal;

/// Converts our validated [`Signal`] into rustix's type.
pub(crate) fn rustix_signal(signal: Signal) -> rustix::process::Signal {
    // SAFETY: `Signal` only holds numbers the platform names or real-time signals in
    // SIGRTMIN..=SIGRTMAX (checked in `Signal::from_raw`); rustix asks only that the number is a
    // valid signal, which the kernel also re-checks.
    unsafe { rustix::process::Signal::from_raw_unchecked(signal.as_raw()) }
}

/// `sigaction(2)` with a null new action: is `SIGCHLD`'s disposition `SIG_IGN`?
///
/// With `SIG_IGN` the kernel reaps children itself: their status is lost and their pid may be
/// reused while we still think we own it.
pub(crate) fn sigchld_is_ignored() -> io::Result<bool> {
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null `act` only reads the current disposition into `old`, which is a valid,
    // zeroed `sigaction` buffer that lives across the call.
    let rc = unsafe { libc::sigaction(libc::SIGCHLD, std::ptr::null(), old.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: sigaction returned 0, so it filled `old`.
    let old = unsafe { old.assume_init() };
    Ok(old.sa_sigaction == libc::SIG_IGN)
}

/// What the child does between `fork` and `exec`. Built before the fork; the closure that
/// applies it only makes async-signal-safe system calls and never allocates.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildSetup {
    /// `PR_SET_PDEATHSIG` signal and the pid the child must still have as parent afterwards.
    pub death_signal: Option<(Signal, u32)>,
    /// Every fd from this one up is marked close-on-exec: 3 normally, 4 with socket activation.
    pub first_private_fd: i32,
}

/// Registers [`ChildSetup`] with `Command::pre_exec`.
///
/// std runs it in the child after it has placed our socket on fds 0 and 1, right before
/// `execvp`. Errors returned here make `spawn()` fail with that error, and std reaps the child.
pub(crate) fn install_child_setup(cmd: &mut Command, setup: ChildSetup) {
    let hook = move || -> io::Result<()> {
        if let Some((signal, parent)) = setup.death_signal {
            set_parent_death_signal(signal)?;
            // The parent may have died between fork and prctl; the death signal would then
            // never come. getppid() tells: after the parent's death we were reparented.
            if parent_pid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        mark_cloexec_from(setup.first_private_fd);
        Ok(())
    };
    // SAFETY: the hook runs between fork and exec in a possibly multi-threaded parent's child:
    // it only calls prctl, getppid, close_range/fcntl and getrlimit, which are async-signal-safe,
    // it takes no lock and does not allocate (io::Error from an OS code is not boxed).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// `prctl(2)` `PR_SET_PDEATHSIG`: deliver `signal` to us when the thread that forked us exits.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn set_parent_death_signal(signal: Signal) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; the extra arguments are unused zeros.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            signal.as_raw() as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn set_parent_death_signal(_signal: Signal) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// `getppid(2)`.
fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions and cannot fail.
    unsafe { libc::getppid() as u32 }
}

/// Marks every fd `>= first` close-on-exec, so only 0, 1, 2 (and the activation fd) reach the
/// program. Marking rather than closing keeps std's own exec-error pipe working until `exec`.
fn mark_cloexec_from(first: i32) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // `close_range(2)` with CLOSE_RANGE_CLOEXEC (Linux 5.11): one call for the whole table.
        // SAFETY: the syscall takes two fd numbers and a flag and touches only our fd table.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                first as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        };
        if rc == 0 {
            return;
        }
    }
    // Fallback: `fcntl(2)` F_SETFD over the fd table up to RLIMIT_NOFILE (capped: a table that
    // large would take seconds to walk; fds above the cap are only in use if a program raised
    // its limit and opened that many fds without O_CLOEXEC).
    let limit = open_files_limit().min(1 << 16);
    for fd in first..limit {
        // SAFETY: F_GETFD/F_SETFD on an fd number that may or may not be open: fcntl fails
        // with EBADF for a closed one, which we skip.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// `getrlimit(2)` RLIMIT_NOFILE soft limit, as an fd bound.
fn open_files_limit() -> i32 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit buffer for the duration of the call.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if rc != 0 || lim.rlim_cur == libc::RLIM_INFINITY || lim.rlim_cur > i32::MAX as libc::rlim_t {
        return i32::MAX;
    }
    lim.rlim_cur as i32
}
