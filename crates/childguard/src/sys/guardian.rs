//! The unsafe half of the guardian (`containment/guardian`): the double fork that makes it,
//! and the few calls its life needs that rustix has no safe wrapper for here (`sigaction(2)`,
//! slices over `mmap(2)` memory). What it shares with childguard-teardown's helper — signals
//! blocked around the fork, `close_range(2)`, the `__WALL` wait, `_exit(2)`, the anonymous
//! mapping — is in the `childguard-forksafe` crate, which both use (the guardian reaches it
//! through this module only).
//!
//! Everything the forked processes run is async-signal-safe: the guardian is a copy of one
//! thread of a multi-threaded process, so a lock another thread held at the fork stays locked
//! forever in it (`malloc`'s, stdio's, std's), and it never takes one. These wrappers make one
//! system call each (through `libc::syscall` or a libc function POSIX lists as
//! async-signal-safe), allocate nothing and do not panic; errors come back as the `errno`
//! value, read right after the call in the same thread. The guardian's other calls go through
//! rustix, whose Linux backend makes raw system calls itself (no libc, no `errno`, no lock)
//! and allocates nothing when given `&CStr` paths and buffers of ours — except its lazy vDSO
//! and auxiliary-vector lookups (`clock_gettime`, `page_size`), which the guardian never
//! calls ([`monotonic`] instead).

use std::ffi::c_long;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, RawFd};
use std::ptr;

use childguard_forksafe::SignalsBlocked;
pub(crate) use childguard_forksafe::{close_all_except, close_loop_limit, exit_now};

/// The calling thread's `errno` (right after a failed call).
fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `clone(2)` with no flag but the exit signal: `fork(2)` without glibc's wrapper, so no
/// `pthread_atfork` handler of the host (a C library, Python) runs in the copy. Returns 0 in
/// the new process, its pid in the caller.
fn raw_fork(exit_signal: i32) -> Result<i32, i32> {
    raw_clone(exit_signal as c_long, None)
}

/// `clone(2)` without `CLONE_VM`: a fork-like copy of this thread with `flags` (the exit signal,
/// namespaces, `CLONE_PIDFD` — the pidfd then stored in `pidfd`). Returns 0 in the new process,
/// its pid in the caller. The guardian's fork and the tree init's (`sys/tree_init.rs`).
pub(super) fn raw_clone(flags: c_long, pidfd: Option<&mut libc::c_int>) -> Result<i32, i32> {
    let parent_tid = pidfd.map_or(0, |fd| ptr::from_mut(fd) as c_long);
    // SAFETY: without CLONE_VM the new process gets a copy of the address space and runs on
    // its copy of this stack, returning from this same call (as fork does); null stack, child
    // tid and tls pointers are what a fork-like clone passes, and `parent_tid` is null or a
    // valid int of the caller's for CLONE_PIDFD to write. What the copy runs afterwards is
    // argued at the call sites (`fork_guardian`, `tree_init`). s390x takes the stack first.
    #[cfg(not(target_arch = "s390x"))]
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags,
            0 as c_long,
            parent_tid,
            0 as c_long,
            0 as c_long,
        )
    };
    // SAFETY: as above.
    #[cfg(target_arch = "s390x")]
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone,
            0 as c_long,
            flags,
            parent_tid,
            0 as c_long,
            0 as c_long,
        )
    };
    if rc < 0 {
        return Err(errno());
    }
    Ok(rc as i32)
}

/// Starts the guardian: a double fork, so that it is not our child (no zombie of ours, no
/// `SIGCHLD` for the host, reparented to init or the nearest subreaper). The intermediate
/// process is cloned with exit signal 0 — the host gets no `SIGCHLD` for it, and a
/// `waitpid(-1)` of the host's own (without `__WALL`) neither sees nor reaps it — makes the
/// guardian, exits at once, and is reaped here. Every signal is blocked in this thread around
/// the fork, so no handler of the host ever runs in either copy.
///
/// Returns once the intermediate is reaped; the guardian reports on `args.sock` (see
/// `serve::run`, passed in as `body` so that this layer does not import the one above it).
/// Fails if either fork fails.
pub(crate) fn fork_guardian<A>(args: &A, body: fn(&A) -> !) -> io::Result<()> {
    let blocked = SignalsBlocked::all()?;
    let intermediate = raw_fork(0);
    if intermediate == Ok(0) {
        // The intermediate: a copy of this thread only. It forks and exits, nothing else.
        let code = match raw_fork(libc::SIGCHLD) {
            // SAFETY-relevant: `body` (`serve::run`) runs only async-signal-safe code (its
            // module docs and this file's); it never returns.
            Ok(0) => body(args),
            Ok(_) => 0,
            Err(_) => 1,
        };
        exit_now(code);
    }
    drop(blocked);
    let pid = intermediate.map_err(io::Error::from_raw_os_error)?;
    // `pid` is our own unreaped child; only a __WALL or __WCLONE wait sees one whose exit
    // signal is 0.
    let status = match childguard_forksafe::wait_all(pid) {
        Ok(status) => status,
        // Reaped by someone else (a host waiting with __WALL): its status is lost.
        Err(libc::ECHILD) => return Ok(()),
        Err(e) => return Err(io::Error::from_raw_os_error(e)),
    };
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Ok(())
    } else {
        Err(io::Error::other(
            "the guardian could not be forked (the intermediate process failed)",
        ))
    }
}

/// `sigaction(2)` for every signal, then `sigprocmask(2)` with an empty mask: no handler of
/// the host can run in the guardian. `SIGINT`, `SIGTERM`, `SIGHUP`, `SIGPIPE` and every other
/// signal whose default ends or stops a process are ignored (a `killpg`, a Ctrl-C at the
/// host's terminal, a `kill` by name meant for the host do nothing to it); the synchronous
/// fault signals and `SIGCHLD` get their default. Only `SIGKILL` (and `SIGSTOP`) still act.
pub(crate) fn reset_signals() {
    for signo in 1..=64 {
        if signo == libc::SIGKILL || signo == libc::SIGSTOP {
            continue;
        }
        let default = matches!(
            signo,
            libc::SIGSEGV
                | libc::SIGBUS
                | libc::SIGFPE
                | libc::SIGILL
                | libc::SIGTRAP
                | libc::SIGSYS
                | libc::SIGABRT
                | libc::SIGCHLD
        );
        let mut action = MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: a zeroed sigaction is a valid value (empty mask, no flags); we set its
        // handler to SIG_IGN or SIG_DFL, which need no code of ours. sigaction(2) is
        // async-signal-safe; the glibc-reserved signals it refuses (EINVAL) are skipped.
        unsafe {
            let action = action.as_mut_ptr();
            (*action).sa_sigaction = if default {
                libc::SIG_DFL
            } else {
                libc::SIG_IGN
            };
            libc::sigaction(signo, action, ptr::null_mut());
        }
    }
    let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the valid set; sigprocmask reads it (async-signal-safe).
    unsafe {
        libc::sigemptyset(empty.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), ptr::null_mut());
    }
}

/// `mmap(2)`: `len` bytes of fresh private anonymous memory, zero-filled by the kernel and
/// committed only as touched (`MAP_NORESERVE`). Never unmapped: it lives as long as the
/// guardian. This is how the guardian gets memory without allocating.
pub(crate) fn map_zeroed(len: usize) -> Result<&'static mut [u8], i32> {
    let addr = childguard_forksafe::map_anonymous(len, libc::MAP_NORESERVE)?;
    // SAFETY: the mapping is `len` readable, writable, zeroed bytes (zero is a valid u8),
    // aligned to a page, never unmapped, and nothing else refers to it.
    Ok(unsafe { std::slice::from_raw_parts_mut(addr.as_ptr(), len) })
}

/// [`map_zeroed`] seen as bytes not yet written, for the buffers `getdents(2)` fills.
pub(crate) fn map_uninit(len: usize) -> Result<&'static mut [MaybeUninit<u8>], i32> {
    let bytes = map_zeroed(len)?;
    let (ptr, len) = (bytes.as_mut_ptr(), bytes.len());
    // SAFETY: MaybeUninit<u8> has u8's layout; the slice covers the same mapping and the
    // `&mut [u8]` it came from is consumed here, so nothing reads it as initialised bytes.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.cast::<MaybeUninit<u8>>(), len) })
}

/// Borrows one of the guardian's own two fds (its socket end, the host's pidfd) for the rest
/// of its life. Only for those: they are kept by [`close_all_except`] and closed by nothing
/// until the guardian exits.
pub(crate) fn borrow_own(fd: RawFd) -> BorrowedFd<'static> {
    // SAFETY: the callers (`serve::run`) pass only the two fd numbers they kept open across
    // `close_all_except`; nothing in the guardian closes them before it exits, so the borrow
    // is valid for its whole life.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// `clock_gettime(2)` `CLOCK_MONOTONIC`, through the C library (async-signal-safe, and its
/// vDSO lookup was done at the host's start). Not rustix's: its first call in a process looks
/// the vDSO up through the auxiliary vector, which may allocate — after a fork of a
/// multi-threaded process, where `malloc`'s lock may be held forever.
pub(crate) fn monotonic() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call; CLOCK_MONOTONIC always exists on Linux,
    // so the call cannot fail (and `t` stays zero if it did).
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t);
    }
    std::time::Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Starts `argv[0]` with `argv` and `envp` (NULL-terminated arrays of NUL-terminated strings
/// the caller built in its own memory) as a child of the guardian: `clone(2)` with `SIGCHLD`,
/// then in the child every signal back to its default and none blocked (`sigaction(2)`,
/// `sigprocmask(2)`: the guardian ignores most, and an ignored disposition would survive the
/// exec), fds 0–2 on `/dev/null`, every other fd closed (the loop bounded by `close_limit` where
/// `close_range(2)` is missing), `execve(2)`; `_exit(127)` if that
/// fails. Returns the child's pid. How the guardian runs a container engine's `kill` once the
/// host is gone (`containment/guardian/commands.rs`).
pub(crate) fn spawn_command(
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    close_limit: u32,
) -> Result<i32, i32> {
    if argv.first().is_none_or(|p| p.is_null()) || argv.last() != Some(&ptr::null()) {
        return Err(libc::EINVAL);
    }
    if envp.last() != Some(&ptr::null()) {
        return Err(libc::EINVAL);
    }
    let pid = raw_fork(libc::SIGCHLD)?;
    if pid != 0 {
        return Ok(pid);
    }
    // The child: a copy of the guardian's one thread; async-signal-safe calls only.
    for signo in 1..=64 {
        if signo == libc::SIGKILL || signo == libc::SIGSTOP {
            continue;
        }
        let mut action = MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: a zeroed sigaction is valid (empty mask, no flags); SIG_DFL needs no code of
        // ours; sigaction(2) is async-signal-safe and refuses reserved signals with EINVAL.
        unsafe {
            let action = action.as_mut_ptr();
            (*action).sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signo, action, ptr::null_mut());
        }
    }
    let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set; sigprocmask reads it (async-signal-safe).
    unsafe {
        libc::sigemptyset(empty.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, empty.as_ptr(), ptr::null_mut());
    }
    // SAFETY: open(2), dup2(2), close(2) and execve(2) are async-signal-safe; the path is a
    // NUL-terminated literal; `argv` and `envp` were checked above to be non-empty and
    // NULL-terminated arrays, and the caller keeps the strings they point to alive (this copy
    // of its memory does not change before the exec).
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            if null > 2 {
                libc::close(null);
            }
        }
    }
    let _ = close_all_except(&[0, 1, 2], close_limit);
    // SAFETY: as above.
    unsafe {
        libc::execve(argv[0], argv.as_ptr(), envp.as_ptr());
    }
    exit_now(127)
}

/// `waitpid(2)` with `WNOHANG` for the guardian's own command `pid`: `true` once it has exited
/// and is reaped (or is no child of ours any more).
pub(crate) fn reaped(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid(2) with a valid int to write the status into; async-signal-safe.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    rc == pid || (rc < 0 && errno() != libc::EINTR)
}

/// `kill(2)` with `SIGKILL` to the guardian's own unreaped command `pid` (its pid cannot have
/// been reused while it is our unreaped child).
pub(crate) fn kill_command(pid: i32) {
    // SAFETY: kill(2) takes plain integers; `pid` is positive (a child we made).
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}
