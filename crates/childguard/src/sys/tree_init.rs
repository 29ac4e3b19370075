//! The unsafe half of the tree init (`process/containment/tree_init`): the `clone(2)` that
//! makes it (in a new PID namespace, or plain for a subreaper), the fork of its server, and
//! the few calls its life needs that rustix has no safe wrapper for here: `signalfd(2)`,
//! `pidfd_send_signal(2)` with a `siginfo`, `sigprocmask(2)`.
//!
//! The tree init is a copy of one thread of a multi-threaded process, as the guardian is
//! (`sys/guardian.rs`): everything it runs is async-signal-safe, allocates nothing and takes
//! no lock. These wrappers make one system call each and report errors as the `errno` value.

use std::ffi::c_long;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd};

use childguard_forksafe::SignalsBlocked;
pub(crate) use childguard_forksafe::{close_all_except, close_loop_limit, exit_now};

/// The calling thread's `errno` (right after a failed call).
fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Which copy of a [`clone_init`] or [`fork_server`] this is.
pub(crate) enum Forked {
    /// The caller, with the new process's pid (and pidfd, for [`clone_init`]).
    Parent(i32, Option<OwnedFd>),
    /// The new process.
    Child,
}

/// `clone(2)` with `namespaces` (`CLONE_NEWPID`, `CLONE_NEWUSER` or none), `CLONE_PIDFD` and
/// `SIGCHLD` as exit signal: a fork-like copy of this thread (no `CLONE_VM`), without glibc's
/// wrapper so no `pthread_atfork` handler of the host runs in it. The legacy call, not
/// `clone3`: a seccomp profile such as Docker's answers `clone3` with `ENOSYS` but judges
/// `clone` by its flags. Every signal is blocked in this thread around the call, so no handler
/// of the host runs in the copy, which starts with them all blocked.
pub(crate) fn clone_init(namespaces: c_long) -> Result<Forked, i32> {
    let blocked = SignalsBlocked::all().map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let mut pidfd: libc::c_int = -1;
    let flags = namespaces | libc::CLONE_PIDFD as c_long | libc::SIGCHLD as c_long;
    let rc = super::guardian::raw_clone(flags, Some(&mut pidfd))?;
    if rc == 0 {
        // The copy keeps every signal blocked (not restored: a handler of the host must never
        // run in it), resets the host's handlers (`clear_handlers`) and reads its signals
        // from a signalfd.
        std::mem::forget(blocked);
        return Ok(Forked::Child);
    }
    drop(blocked);
    // SAFETY: the kernel stored a new pidfd, ours alone, in `pidfd`.
    Ok(Forked::Parent(
        rc,
        Some(unsafe { OwnedFd::from_raw_fd(pidfd) }),
    ))
}

/// A plain fork-like `clone(2)` (exit signal `SIGCHLD`) of the tree init, for its server.
pub(crate) fn fork_server() -> Result<Forked, i32> {
    match super::guardian::raw_clone(libc::SIGCHLD as c_long, None)? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid, None)),
    }
}

/// Blocks every signal in this (single-threaded) process and returns a `signalfd(2)` that
/// reads them all (but `SIGKILL` and `SIGSTOP`, which cannot be). A PID namespace's init
/// drops a signal it has no handler for unless it is blocked: blocked, every signal sent to
/// it is queued, and the tree init reads it here.
pub(crate) fn signalfd_all() -> Result<OwnedFd, i32> {
    let mut all = MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initialises the set; sigprocmask and signalfd read it. signalfd
    // with fd -1 makes a new fd, returned to us alone.
    unsafe {
        libc::sigfillset(all.as_mut_ptr());
        if libc::sigprocmask(libc::SIG_SETMASK, all.as_ptr(), std::ptr::null_mut()) != 0 {
            return Err(errno());
        }
        let fd = libc::signalfd(-1, all.as_ptr(), libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Every caught signal back to its default, as `CLONE_CLEAR_SIGHAND` does (which the legacy
/// `clone` cannot ask for): the host's handlers never run in the tree init, nor in its server
/// between its fork and its `execve`. Ignored signals stay ignored, as across `execve`.
pub(crate) fn clear_handlers() {
    for signo in 1..=64 {
        if signo == libc::SIGKILL || signo == libc::SIGSTOP {
            continue;
        }
        let mut old = MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: sigaction(2) reads the disposition into `old`, a zeroed (valid) sigaction;
        // the glibc-reserved signals it refuses (EINVAL) are skipped.
        let caught = unsafe {
            libc::sigaction(signo, std::ptr::null(), old.as_mut_ptr()) == 0
                && !matches!(
                    old.assume_init_ref().sa_sigaction,
                    libc::SIG_DFL | libc::SIG_IGN
                )
        };
        if caught {
            let mut default = MaybeUninit::<libc::sigaction>::zeroed();
            // SAFETY: a zeroed sigaction with SIG_DFL installs no code of ours.
            unsafe {
                (*default.as_mut_ptr()).sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signo, default.as_ptr(), std::ptr::null_mut());
            }
        }
    }
}

/// One signal read from a [`signalfd_all`] fd.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    pub(crate) signo: i32,
    /// `si_code`: `SI_QUEUE` for a [`queue_signal`].
    pub(crate) code: i32,
    /// `si_int` of a queued signal.
    pub(crate) value: i32,
}

/// `read(2)` of one `signalfd_siginfo`; `Err(EAGAIN)`-like errnos as they come.
pub(crate) fn read_signal(fd: BorrowedFd<'_>) -> Result<Received, i32> {
    let mut info = MaybeUninit::<libc::signalfd_siginfo>::zeroed();
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: read(2) into `info`, a buffer of exactly one signalfd_siginfo; the kernel
    // writes whole records only, and zeroed is a valid value of the plain struct.
    let n = unsafe {
        libc::read(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            info.as_mut_ptr().cast(),
            size,
        )
    };
    if n < 0 {
        return Err(errno());
    }
    if n as usize != size {
        return Err(libc::EIO);
    }
    // SAFETY: fully written by the kernel (checked above), and zero-initialised before.
    let info = unsafe { info.assume_init() };
    Ok(Received {
        signo: info.ssi_signo as i32,
        code: info.ssi_code,
        value: info.ssi_int,
    })
}

/// `pidfd_send_signal(2)` of `signo` with `si_code = SI_QUEUE` and `value` in `si_int`, as
/// `sigqueue(3)` sends: how the host asks a tree init for something a plain signal cannot say.
pub(crate) fn queue_signal(pidfd: BorrowedFd<'_>, signo: i32, value: i32) -> std::io::Result<()> {
    // SAFETY: a zeroed siginfo_t is a valid value; we fill the fields sigqueue fills
    // (si_signo, si_code, si_pid, si_uid, si_value) through libc's accessors layout: the
    // kernel reads the struct and checks si_code is negative (a user-sent queue signal).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    info.si_signo = signo;
    info.si_code = libc::SI_QUEUE;
    let fields = SigqueueFields {
        pid: std::process::id() as i32,
        // SAFETY: getuid(2) cannot fail.
        uid: unsafe { libc::getuid() },
        value: value as usize,
    };
    // SAFETY: in the kernel's siginfo layout the sigqueue fields (pid, uid, value) follow
    // the three leading ints (signo, errno, code) at offset 16 on 64-bit targets, which is
    // where libc's `_pad` area begins; `SigqueueFields` is that layout, and it fits in it.
    unsafe {
        let base = std::ptr::addr_of_mut!(info).cast::<u8>();
        let at = base.add(std::mem::size_of::<libc::c_int>() * 4);
        std::ptr::write_unaligned(at.cast::<SigqueueFields>(), fields);
    }
    // SAFETY: pidfd_send_signal(2) with a borrowed pidfd and a valid siginfo_t we own.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            std::os::fd::AsRawFd::as_raw_fd(&pidfd),
            signo,
            std::ptr::addr_of!(info),
            0,
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The `_sigqueue` member of the kernel's `siginfo_t` union: sender pid, uid, `sigval`.
#[repr(C)]
#[derive(Clone, Copy)]
struct SigqueueFields {
    pid: i32,
    uid: u32,
    value: usize,
}

/// `kill(2)` with pid `-1`: from a PID namespace's init, every process in the namespace but
/// the caller (the only caller: the tree init of a PID namespace).
pub(crate) fn kill_all_but_self(signo: i32) -> Result<(), i32> {
    // SAFETY: kill(2) has no memory arguments.
    if unsafe { libc::kill(-1, signo) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// `kill(2)` of one pid by number, for a child of the caller it has not reaped (so the pid
/// cannot have been recycled): the subreaper's kill of its children.
pub(crate) fn kill_child(pid: i32, signo: i32) {
    // SAFETY: kill(2) has no memory arguments.
    unsafe { libc::kill(pid, signo) };
}

/// `waitpid(2)` of any child with `__WALL` (a child whose exit signal is not `SIGCHLD` too),
/// blocking unless `nohang`: `Ok(Some((pid, wait status)))`, `Ok(None)` (`WNOHANG`, none
/// exited), or the errno (`ECHILD`: no child left).
pub(crate) fn wait_any(nohang: bool) -> Result<Option<(i32, i32)>, i32> {
    let mut status: libc::c_int = 0;
    let flags = libc::__WALL | if nohang { libc::WNOHANG } else { 0 };
    // SAFETY: `status` is a valid int for the call to write; no other memory is passed.
    let rc = unsafe { libc::waitpid(-1, &mut status, flags) };
    match rc {
        rc if rc < 0 => Err(errno()),
        0 => Ok(None),
        pid => Ok(Some((pid, status))),
    }
}
