//! Every `unsafe` block and raw system call of this crate (Linux only): one thin wrapper per
//! call, each naming its man page, each `unsafe` block saying why it holds.
//!
//! [`SignalsBlocked`] and [`close_loop_limit`] run in the host, before the fork. The rest may
//! run in a forked or cloned copy of one thread of a multi-threaded host, where a lock another
//! thread held at the fork stays locked forever (`malloc`'s, stdio's, std's). So they make one
//! system call at a time (through `libc::syscall`, or `_exit`/`waitpid`, which POSIX lists as
//! async-signal-safe), allocate nothing and do not panic; a failure comes back as the `errno`
//! value, read right after the call in the same thread (in childguard-teardown's `CLONE_VM`
//! helper that is the enabling thread's slot, parked during the helper's setup: see that
//! crate's `sys` module).

#![allow(unsafe_code)]

use std::ffi::{c_int, c_long, c_uint};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::ptr::{self, NonNull};

use rustix::process::Resource;

/// The `close(2)` loop bound of [`close_all_except`] where `close_range(2)` is missing
/// (Linux < 5.9): the soft `RLIMIT_NOFILE`, but no more than this many fds (one million system
/// calls, a fraction of a second). An fd above the bound would stay open on such a kernel.
pub(crate) const CLOSE_LOOP_CAP: u32 = 1 << 20;

/// The calling thread's `errno` (right after a failed call). `last_os_error` only reads the
/// slot: no allocation, no lock.
fn errno() -> c_int {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Every signal blocked in the calling thread until dropped, which restores the previous mask:
/// held around a fork or clone, so that no handler of the host runs in the new process before
/// it has blocked or reset its signals itself. glibc quietly keeps its two internal signals
/// unblocked; a process that must not see those either blocks them with the raw
/// `rt_sigprocmask` first thing (childguard-teardown's helper does).
pub struct SignalsBlocked {
    previous: libc::sigset_t,
}

impl SignalsBlocked {
    /// `pthread_sigmask(3)` `SIG_SETMASK` with a full set (`sigfillset(3)`).
    pub fn all() -> io::Result<SignalsBlocked> {
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        let mut previous = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigfillset initialises the set behind the valid pointer it is given; it
        // cannot fail for a valid pointer.
        let all = unsafe {
            libc::sigfillset(all.as_mut_ptr());
            all.assume_init()
        };
        // SAFETY: both pointers are valid sigset_t buffers living across the call; only the
        // calling thread's mask changes.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, previous.as_mut_ptr()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        // SAFETY: pthread_sigmask returned 0, so it filled `previous`.
        let previous = unsafe { previous.assume_init() };
        Ok(SignalsBlocked { previous })
    }
}

impl Drop for SignalsBlocked {
    /// `pthread_sigmask(3)` `SIG_SETMASK` back to the saved mask.
    fn drop(&mut self) {
        // SAFETY: `previous` is the initialised mask saved by `all`; a null old set is allowed.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, ptr::null_mut());
        }
    }
}

impl std::fmt::Debug for SignalsBlocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignalsBlocked")
    }
}

/// The bound of [`close_all_except`]'s `close(2)` loop: `getrlimit(2)` `RLIMIT_NOFILE`'s soft
/// limit (no fd of this process is at or above it), capped at `CLOSE_LOOP_CAP` (2²⁰). Called in
/// the host, before the fork (rustix's safe wrapper).
pub fn close_loop_limit() -> u32 {
    close_loop_limit_for(rustix::process::getrlimit(Resource::Nofile).current)
}

/// [`close_loop_limit`] for a soft limit (`None`: unlimited).
fn close_loop_limit_for(soft: Option<u64>) -> u32 {
    soft.map_or(CLOSE_LOOP_CAP, |n| {
        u32::try_from(n).map_or(CLOSE_LOOP_CAP, |n| n.min(CLOSE_LOOP_CAP))
    })
}

/// Closes every fd of this process but those in `keep` (ascending; negative numbers are
/// ignored): one `close_range(2)` for each gap around them. Where a call fails — `ENOSYS` on
/// Linux < 5.9 — a `close(2)` of each number below `limit` ([`close_loop_limit`]) not kept, so
/// the fds end up closed either way. Returns the first failure's `errno` unless it was
/// `ENOSYS` (the loop then did the whole job): `close_range` with no flags fails otherwise only
/// for arguments it should never get here.
///
/// Meant for the copy of the fd table a fork or `clone` without `CLONE_FILES` made: the host's
/// own fds stay open.
pub fn close_all_except(keep: &[RawFd], limit: u32) -> Result<(), c_int> {
    let mut first: c_uint = 0;
    let mut failed: Option<c_int> = None;
    let mut close_range = |from: c_uint, to: c_uint| {
        if !raw_close_range(from, to) && failed.is_none() {
            failed = Some(errno());
        }
    };
    for &fd in keep.iter().filter(|&&fd| fd >= 0) {
        let fd = fd as c_uint;
        if fd > first {
            close_range(first, fd - 1);
        }
        first = fd.saturating_add(1);
    }
    close_range(first, c_uint::MAX);
    let Some(errno) = failed else {
        return Ok(());
    };
    for fd in (0..limit).filter(|&fd| !keep.contains(&(fd as RawFd))) {
        raw_close(fd);
    }
    if errno == libc::ENOSYS {
        Ok(())
    } else {
        Err(errno)
    }
}

/// `close_range(2)` on `first..=last` with no flags (Linux 5.9): whether it succeeded (if not,
/// `errno` says why).
fn raw_close_range(first: c_uint, last: c_uint) -> bool {
    // SAFETY: integer arguments; closes entries of this process's own fd table (a copy of the
    // host's when called where this crate is meant to be: after a fork or a clone without
    // CLONE_FILES), so the host's fds stay open and no Rust owner of ours is left dangling.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as c_long,
            last as c_long,
            0 as c_long,
        )
    };
    rc == 0
}

/// `close(2)` of one fd number of our own table; `EBADF` for a free slot is expected and
/// ignored. The raw call, not glibc's `close` (a cancellation point, which reads the thread's
/// cancellation state: in a `CLONE_VM` helper that is another thread's).
fn raw_close(fd: c_uint) {
    // SAFETY: as in `raw_close_range`, for one fd.
    unsafe {
        libc::syscall(libc::SYS_close, fd as c_long);
    }
}

/// `waitpid(2)` with `__WALL` (a child whose exit signal is 0 is seen only so), again after
/// `EINTR`: blocks until `pid`, our child, has ended, reaps it and returns its wait status.
/// `Err(ECHILD)` if someone else (a host waiting with `__WALL`) reaped it first.
pub fn wait_all(pid: i32) -> Result<c_int, c_int> {
    let mut status: c_int = 0;
    loop {
        // SAFETY: `status` is a valid int for the call to write; no other memory is passed.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if rc == pid {
            return Ok(status);
        }
        match errno() {
            libc::EINTR => continue,
            e => return Err(e),
        }
    }
}

/// `mmap(2)`: `len` bytes of fresh private anonymous read-write memory, zero-filled by the
/// kernel, with `extra_flags` (`MAP_STACK`, `MAP_NORESERVE`) added to `MAP_PRIVATE |
/// MAP_ANONYMOUS`. Nothing refers to the mapping yet; the caller owns it (and unmaps it, or
/// not). `Err` is the `errno` value.
pub fn map_anonymous(len: usize, extra_flags: c_int) -> Result<NonNull<u8>, c_int> {
    // SAFETY: a null hint without MAP_FIXED, fd -1, offset 0: the kernel picks a fresh range
    // that overlaps nothing we use; no memory of ours is passed.
    let addr = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(errno());
    }
    NonNull::new(addr.cast()).ok_or(libc::ENOMEM)
}

/// `_exit(2)`: ends this process at once, with no atexit handler and no stdio flush, so
/// nothing of the host's state is touched.
pub fn exit_now(code: c_int) -> ! {
    // SAFETY: _exit makes the exit_group system call and never returns.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_loop_is_bounded() {
        assert_eq!(close_loop_limit_for(None), CLOSE_LOOP_CAP);
        assert_eq!(close_loop_limit_for(Some(1024)), 1024);
        assert_eq!(close_loop_limit_for(Some(u64::MAX)), CLOSE_LOOP_CAP);
        assert_eq!(close_loop_limit_for(Some(1 << 30)), CLOSE_LOOP_CAP);
        let here = close_loop_limit();
        assert!((1..=CLOSE_LOOP_CAP).contains(&here), "{here}");
    }
}
