//! Other processes: their CPU clock and `process_mrelease(2)`.

use std::io;

/// CPU time the process `pid` has used so far, all threads: `clock_gettime(2)` on its process
/// CPU clock. Any process may read another's; the pid must not be recycled meanwhile, which
/// holds for an unreaped child of ours.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn process_cpu_time(pid: u32) -> io::Result<std::time::Duration> {
    // The clock id as glibc's `clock_getcpuclockid(3)` builds it — the kernel's
    // MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) (include/linux/posix-timers_types.h) — minus
    // the `clock_getres` glibc adds to check that the pid exists: `clock_gettime` fails alike.
    if pid == 0 || pid > i32::MAX as u32 {
        // Pid 0 would name the calling process.
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let clock: libc::clockid_t = (!(pid as libc::clockid_t) << 3) | 2;
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid out-pointer for the call's duration.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(std::time::Duration::new(
        now.tv_sec as u64,
        now.tv_nsec as u32,
    ))
}

/// Elsewhere only asked on the way to `process_mrelease`, which is Linux's (macOS has no
/// `clock_getcpuclockid`).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn process_cpu_time(_pid: u32) -> io::Result<std::time::Duration> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// `process_mrelease(2)` (Linux 5.15): reap the memory of a process that was sent `SIGKILL`,
/// in the caller's context, instead of waiting for the dying process to do it. Run next to
/// the victim's own exit, it splits the teardown of a big address space between two CPUs.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn process_mrelease(pidfd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: the syscall takes a pidfd we borrow for the call's duration and a flags word
    // that must be 0; it touches no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_process_mrelease,
            pidfd.as_raw_fd(),
            0 as libc::c_uint,
        )
    };
    let outcome = if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    crate::failpoint::after_mrelease();
    outcome
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn process_mrelease(_pidfd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}
