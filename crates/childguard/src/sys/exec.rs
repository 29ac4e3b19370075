//! The child's side of a spawn between `fork` and `exec`: the `Command::pre_exec` hook and
//! every async-signal-safe call it makes (cgroup placement, parent-death signal, fd marking,
//! our own `execve` for a child whose environment names its pid: socket activation, the
//! watchdog).

use std::ffi::CString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::signal::ignore_sigpipe;
use crate::base::signal::Signal;

/// What the child does between `fork` and `exec`. Built before the fork; the closure that
/// applies it only makes async-signal-safe system calls and never allocates.
#[derive(Debug)]
pub(crate) struct ChildSetup {
    /// `PR_SET_PDEATHSIG` signal and the pid the child must still have as parent afterwards.
    pub death_signal: Option<(Signal, u32)>,
    /// Every fd from this one up is marked close-on-exec: 3 normally, 4 with socket activation.
    pub first_private_fd: i32,
    /// The child's environment names its own pid (`LISTEN_PID`, `WATCHDOG_PID`): the hook
    /// writes it, places an activation listener on fd 3, and `execve`s itself.
    pub own_exec: Option<PidExec>,
    /// Containment: the child moves itself into its cgroup first of all.
    pub placement: Option<Placement>,
    /// Start the program with `SIGPIPE` ignored (std has just reset it to the default).
    pub ignore_sigpipe: bool,
    /// The signal state and foreground group the program starts with, if set.
    pub start_signals: super::StartSignals,
}

/// The fds, opened before the fork and close-on-exec, through which the child joins its
/// cgroup (see `containment`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement {
    /// The new cgroup's `cgroup.procs`, opened write-only by the parent. The kernel checks
    /// a migration against the credentials the file was *opened* with (Linux ≥ 5.16), so the
    /// write works after std applied `CommandExt::uid`/`gid`, which it does before our hook.
    pub procs: i32,
    /// With resource limits on a hybrid host: the `cgroup.procs` of the child's cgroups in the
    /// v1 hierarchies (`-1`: none), joined right after the v2 one, opened alike.
    pub v1_procs: [i32; 3],
    /// Write end of a pipe: on failure the child writes its errno there, and which write
    /// failed (0: v2, 1 + i: `v1_procs[i]`), so the parent can tell a placement error
    /// (ErrorKind::Containment) from an exec error, and name the cgroup.
    pub report: i32,
    /// `Containment::BestEffort`: after a failed write, the child does not fail: it makes a
    /// process group of its own (what an uncontained best-effort child gets) and goes on to
    /// exec; the parent finds the errno in `report` once `spawn` returned (std returns only
    /// after the exec, so the errno, written before it, is there to read: no race).
    pub fall_back: bool,
}

/// Registers [`ChildSetup`] with `Command::pre_exec`.
///
/// std runs it in the child after it has placed our socket on fds 0 and 1, right before
/// `execvp`. Errors returned here make `spawn()` fail with that error, and std reaps the child.
pub(crate) fn install_child_setup(cmd: &mut Command, mut setup: ChildSetup) {
    let hook = move || -> io::Result<()> {
        if let Some(placement) = setup.placement {
            // First, so that nothing this child does (or starts) happens outside its cgroup.
            if let Err(e) = write_raw(placement.procs, b"0") {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                let _ = write_raw(placement.report, &placement_report(errno, 0));
                if !placement.fall_back {
                    return Err(e);
                }
                lead_own_process_group()?;
            }
            // The v1 twins (never with a fall-back: limits are applied or the spawn fails).
            for (i, &fd) in placement.v1_procs.iter().enumerate() {
                if fd < 0 {
                    continue;
                }
                if let Err(e) = write_raw(fd, b"0") {
                    let errno = e.raw_os_error().unwrap_or(libc::EIO);
                    let _ = write_raw(placement.report, &placement_report(errno, 1 + i as i32));
                    return Err(e);
                }
            }
        }
        if let Some((signal, parent)) = setup.death_signal {
            set_parent_death_signal(signal)?;
            // The parent may have died between fork and prctl; the death signal would then
            // never come. getppid() tells: after the parent's death we were reparented.
            if parent_pid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        if setup.ignore_sigpipe {
            // After std's reset to SIG_DFL, which runs before this hook.
            ignore_sigpipe()?;
        }
        if setup.start_signals.is_set() {
            super::start_signals::apply(&setup.start_signals, setup.ignore_sigpipe)
                .map_err(io::Error::from_raw_os_error)?;
        } else {
            // Nothing blocked, as our own spawn starts a program (std leaves the forking
            // thread's mask: a caller that reads its signals from a signalfd blocks them).
            super::start_signals::unblock_all().map_err(io::Error::from_raw_os_error)?;
        }
        mark_cloexec_from(setup.first_private_fd);
        match setup.own_exec.as_mut() {
            // Returns only if execve failed; std then reports that error from `spawn()`.
            Some(exec) => Err(exec.exec()),
            None => Ok(()),
        }
    };
    // SAFETY: the hook runs between fork and exec in a possibly multi-threaded parent's child:
    // it only calls write (to fds the parent opened and keeps open until spawn returns), setpgid, prctl,
    // getppid, signal, sigprocmask, close_range/fcntl, getrlimit and (own exec) getpid, dup2,
    // execve and close, which are async-signal-safe; it takes no lock and does not allocate
    // (io::Error from an OS code is not boxed; PidExec writes into buffers it owns).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// The 8 bytes a failed placement reports: the errno, then which write failed (no allocation).
fn placement_report(errno: i32, which: i32) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&errno.to_ne_bytes());
    out[4..].copy_from_slice(&which.to_ne_bytes());
    out
}

/// `write(2)` of all of `bytes` (at most a few) to the fd number `fd`, without allocating:
/// async-signal-safe, for the child between fork and exec.
pub(super) fn write_raw(fd: i32, bytes: &[u8]) -> io::Result<()> {
    loop {
        // SAFETY: `bytes` is a valid buffer for its length; `fd` is an fd number the parent
        // opened and holds across the fork, so the child's copy is open (a closed one would
        // only fail with EBADF).
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n == bytes.len() as isize {
            return Ok(());
        }
        if n >= 0 {
            // A cgroup file takes the whole (tiny) write or fails; a pipe of ≤ PIPE_BUF too.
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// `prctl(2)` `PR_SET_PDEATHSIG`: deliver `signal` to us when the thread that forked us exits.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn set_parent_death_signal(signal: Signal) -> io::Result<()> {
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
pub(super) fn set_parent_death_signal(_signal: Signal) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// `setpgid(2)` `(0, 0)`: the calling process leads a new process group of its own
/// (async-signal-safe, for the child between fork and exec).
pub(super) fn lead_own_process_group() -> io::Result<()> {
    // SAFETY: setpgid(0, 0) only changes the calling process's group; it has no memory
    // arguments.
    if unsafe { libc::setpgid(0, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `getppid(2)`.
pub(super) fn parent_pid() -> u32 {
    // SAFETY: getppid has no preconditions and cannot fail.
    unsafe { libc::getppid() as u32 }
}

/// Marks every fd `>= first` close-on-exec, so only 0, 1, 2 (and the activation fd) reach the
/// program. Marking rather than closing keeps std's own exec-error pipe working until `exec`.
pub(super) fn mark_cloexec_from(first: i32) {
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

/// The fd a socket-activated program finds its listening socket on (`SD_LISTEN_FDS_START`).
const LISTEN_FD: i32 = 3;

/// Room for `KEY=` (the longest key used: `WATCHDOG_PID`), any pid's digits (`u32::MAX` has
/// 10) and the NUL.
const PID_ENTRY_LEN: usize = 32;

/// One `KEY=PID` entry of the child's environment, whose digits the child writes.
#[derive(Debug)]
struct PidEntry {
    /// `KEY=` + digits + NUL.
    buf: Box<[u8; PID_ENTRY_LEN]>,
    /// Length of `KEY=`.
    prefix: usize,
    /// Index of the entry in `env_ptrs`.
    slot: usize,
}

/// A complete `execve(2)` for a child whose environment names its own pid — `LISTEN_PID` for
/// socket activation, `WATCHDOG_PID` for the watchdog — built before the fork.
///
/// Why not let std exec: the pid is the child's own, known only after the fork, and std
/// builds the environment before it. So every C string and pointer array is allocated here,
/// in the parent; the child only writes its pid's digits into buffers reserved for them,
/// moves the activation listener (if any) to fd 3, and calls `execve` on these arrays.
#[derive(Debug)]
pub(crate) struct PidExec {
    program: CString,
    /// Owns the strings `argv_ptrs` points into.
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    /// Owns the strings `env_ptrs` points into (all but the pid entries).
    _env: Vec<CString>,
    env_ptrs: Vec<*const libc::c_char>,
    /// The `KEY=PID` entries, filled in by the child.
    pids: Vec<PidEntry>,
    /// Socket activation: our listening socket's fd number (close-on-exec; the child moves it
    /// to fd 3).
    listener: Option<i32>,
}

// SAFETY: the raw pointers point only into heap buffers owned by this same struct (the CStrings
// and the boxed pid entries), which do not move when the struct moves. They are never
// dereferenced in the parent; the forked child (one thread) passes them to execve.
unsafe impl Send for PidExec {}
// SAFETY: as above; `&PidExec` gives no access to the pointers at all.
unsafe impl Sync for PidExec {}

impl PidExec {
    /// `program` is the resolved path to exec, `argv` starts with argv\[0\], `env` holds every
    /// `KEY=VALUE` except the `pid_keys` (added here, each set to the child's pid; a key longer
    /// than 20 bytes is refused), `listener` the activation socket, if any.
    pub(crate) fn new(
        program: CString,
        argv: Vec<CString>,
        env: Vec<CString>,
        pid_keys: &[&str],
        listener: Option<i32>,
    ) -> io::Result<PidExec> {
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut env_ptrs: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
        let mut pids = Vec::with_capacity(pid_keys.len());
        for key in pid_keys {
            let prefix = key.len() + 1;
            if prefix + 11 > PID_ENTRY_LEN {
                return Err(io::Error::other(format!("{key}: too long a key for a pid")));
            }
            let mut buf = Box::new([0u8; PID_ENTRY_LEN]);
            buf[..key.len()].copy_from_slice(key.as_bytes());
            buf[key.len()] = b'=';
            pids.push(PidEntry {
                buf,
                prefix,
                slot: env_ptrs.len(),
            });
            env_ptrs.push(std::ptr::null());
        }
        for entry in &pids {
            env_ptrs[entry.slot] = entry.buf.as_ptr().cast();
        }
        env_ptrs.push(std::ptr::null());
        Ok(PidExec {
            program,
            _argv: argv,
            argv_ptrs,
            _env: env,
            env_ptrs,
            pids,
            listener,
        })
    }

    /// The activation listener's fd number, if any.
    #[cfg(target_os = "linux")]
    pub(crate) fn listener(&self) -> Option<i32> {
        self.listener
    }

    /// Renumbers the activation listener (the small-table spawner received a copy of it).
    #[cfg(target_os = "linux")]
    pub(crate) fn set_listener(&mut self, fd: i32) {
        self.listener = Some(fd);
    }

    /// Whether fd 3 is taken by the activation listener.
    pub(crate) fn has_listener(&self) -> bool {
        self.listener.is_some()
    }

    /// In the child: writes the pid entries, puts the listener (if any) on fd 3 (inheritable)
    /// and execs. Returns only on failure, with fd 3 restored to what it was (it may be std's
    /// own exec-error pipe, through which this error is then reported).
    pub(super) fn exec(&mut self) -> io::Error {
        let pid = own_pid();
        for entry in &mut self.pids {
            write_pid_digits(&mut entry.buf[entry.prefix..], pid);
            // Re-derive the pointer after writing through `&mut`.
            self.env_ptrs[entry.slot] = entry.buf.as_ptr().cast();
        }
        let saved = match self.listener {
            Some(listener) => match place_on_listen_fd(listener) {
                Ok(saved) => saved,
                Err(e) => return e,
            },
            None => None,
        };
        // SAFETY: `program` is a NUL-terminated path; `argv_ptrs` and `env_ptrs` are
        // null-terminated arrays of pointers to NUL-terminated strings owned by `self`, alive
        // for the call. execve replaces the process image or returns -1.
        unsafe {
            libc::execve(
                self.program.as_ptr(),
                self.argv_ptrs.as_ptr(),
                self.env_ptrs.as_ptr(),
            )
        };
        let err = io::Error::last_os_error();
        if let Some(saved) = saved {
            // SAFETY: dup2/close on fd numbers we own in this (single-threaded) child.
            unsafe {
                libc::dup2(saved, LISTEN_FD);
                libc::close(saved);
            }
        }
        err
    }
}

/// `getpid(2)`.
fn own_pid() -> u32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() as u32 }
}

/// Writes `pid` in decimal followed by a NUL into `out` (at least 11 bytes), without allocating.
fn write_pid_digits(out: &mut [u8], pid: u32) {
    let mut digits = [0u8; 10];
    let mut n = pid;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for (i, d) in digits[..len].iter().rev().enumerate() {
        out[i] = *d;
    }
    out[len] = 0;
}

/// Makes `listener` available as fd 3 without close-on-exec. If fd 3 held something else, a
/// close-on-exec copy of it is kept (returned) so it can be put back if `execve` fails.
fn place_on_listen_fd(listener: i32) -> io::Result<Option<i32>> {
    if listener == LISTEN_FD {
        // SAFETY: F_SETFD on an fd we own; clears FD_CLOEXEC so the program inherits it.
        let rc = unsafe { libc::fcntl(LISTEN_FD, libc::F_SETFD, 0) };
        return if rc == 0 {
            Ok(None)
        } else {
            Err(io::Error::last_os_error())
        };
    }
    // SAFETY: F_DUPFD_CLOEXEC on fd 3, which may be closed (EBADF: nothing to keep).
    let saved = unsafe { libc::fcntl(LISTEN_FD, libc::F_DUPFD_CLOEXEC, LISTEN_FD + 1) };
    // SAFETY: dup2 onto fd 3 of the listener we own; dup2 leaves the new fd inheritable.
    let rc = unsafe { libc::dup2(listener, LISTEN_FD) };
    if rc == LISTEN_FD {
        return Ok((saved >= 0).then_some(saved));
    }
    let err = io::Error::last_os_error();
    if saved >= 0 {
        // SAFETY: closing the copy made above, which nothing else refers to.
        unsafe { libc::close(saved) };
    }
    Err(err)
}
