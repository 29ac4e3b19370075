//! Every `unsafe` block and raw system call of childguard lives here, one thin wrapper per call,
//! each named after its man page. Everything else uses [`rustix`]'s safe wrappers.

use std::ffi::CString;
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::base::signal::Signal;

#[cfg(target_os = "linux")]
pub(crate) mod guardian;
#[cfg(target_os = "linux")]
pub(crate) mod peer;

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

/// A value made once and never freed, published through an atomic pointer: readers get a
/// `&'static T` without taking a lock. The one lock-free building block of
/// [`crate::core::per_process`]: after `fork()` a lock that a thread of the parent held at that
/// moment stays locked forever in the child, so nothing a forked child must use to find out
/// that it is a forked child may be a lock.
pub(crate) struct Published<T: 'static>(std::sync::atomic::AtomicPtr<T>);

impl<T: Send + Sync + 'static> Published<T> {
    pub(crate) const fn new() -> Published<T> {
        Published(std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()))
    }

    /// The value published last, if any.
    pub(crate) fn load(&self) -> Option<&'static T> {
        let raw = self.0.load(std::sync::atomic::Ordering::Acquire);
        // SAFETY: every non-null pointer stored here came from `Box::into_raw` in `replace` and
        // is never freed (a replaced value is leaked, not dropped), so it stays valid for the
        // rest of the process — and in a forked child, which gets a copy of the whole address
        // space. The Acquire load pairs with the Release of the exchange that stored it: the
        // value was fully written before. `T: Sync` makes sharing `&T` between threads sound.
        unsafe { raw.as_ref() }
    }

    /// Publishes `new` in place of `current` (what [`Published::load`] returned), unless the
    /// slot changed meanwhile: then `new` is given back. The replaced value is never freed.
    pub(crate) fn replace(
        &self,
        current: Option<&'static T>,
        new: Box<T>,
    ) -> Result<&'static T, Box<T>> {
        use std::sync::atomic::Ordering;
        let expected = current.map_or(std::ptr::null_mut(), |c| std::ptr::from_ref(c).cast_mut());
        let raw = Box::into_raw(new);
        match self
            .0
            .compare_exchange(expected, raw, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: `raw` came from `Box::into_raw` above and is now published; it is never
            // freed (see `load`), so a `'static` shared borrow of it is valid.
            Ok(_) => Ok(unsafe { &*raw }),
            // SAFETY: the exchange failed, so `raw` was never published: nobody else has seen
            // it, and we take back the sole ownership `Box::into_raw` gave us.
            Err(_) => Err(unsafe { Box::from_raw(raw) }),
        }
    }
}

impl<T> std::fmt::Debug for Published<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Published")
    }
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

/// `signal(2)` `SIGPIPE`, `SIG_IGN`: for the child, between fork and exec (async-signal-safe).
fn ignore_sigpipe() -> io::Result<()> {
    // SAFETY: SIG_IGN installs no handler; the call only changes this process's disposition.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What the child does between `fork` and `exec`. Built before the fork; the closure that
/// applies it only makes async-signal-safe system calls and never allocates.
#[derive(Debug)]
pub(crate) struct ChildSetup {
    /// `PR_SET_PDEATHSIG` signal and the pid the child must still have as parent afterwards.
    pub death_signal: Option<(Signal, u32)>,
    /// Every fd from this one up is marked close-on-exec: 3 normally, 4 with socket activation.
    pub first_private_fd: i32,
    /// Socket activation: the hook places the listener on fd 3 and `execve`s itself.
    pub activation: Option<ActivationExec>,
    /// Containment: the child moves itself into its cgroup first of all.
    pub placement: Option<Placement>,
    /// Start the program with `SIGPIPE` ignored (std has just reset it to the default).
    pub ignore_sigpipe: bool,
}

/// The fds, opened before the fork and close-on-exec, through which the child joins its
/// cgroup (see `containment`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placement {
    /// The new cgroup's `cgroup.procs`, opened write-only by the parent. The kernel checks
    /// a migration against the credentials the file was *opened* with (Linux ≥ 5.16), so the
    /// write works after std applied `CommandExt::uid`/`gid`, which it does before our hook.
    pub procs: i32,
    /// Write end of a pipe: on failure the child writes its errno there, so the parent can
    /// tell a placement error (ErrorKind::Containment) from an exec error.
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
                let _ = write_raw(placement.report, &errno.to_ne_bytes());
                if !placement.fall_back {
                    return Err(e);
                }
                lead_own_process_group()?;
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
        mark_cloexec_from(setup.first_private_fd);
        match setup.activation.as_mut() {
            // Returns only if execve failed; std then reports that error from `spawn()`.
            Some(exec) => Err(exec.exec()),
            None => Ok(()),
        }
    };
    // SAFETY: the hook runs between fork and exec in a possibly multi-threaded parent's child:
    // it only calls write (to fds the parent opened and keeps open until spawn returns), setpgid, prctl,
    // getppid, signal, close_range/fcntl, getrlimit and (activation) getpid, dup2,
    // execve and close, which are async-signal-safe; it takes no lock and does not allocate
    // (io::Error from an OS code is not boxed; ActivationExec writes into buffers it owns).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// `write(2)` of all of `bytes` (at most a few) to the fd number `fd`, without allocating:
/// async-signal-safe, for the child between fork and exec.
fn write_raw(fd: i32, bytes: &[u8]) -> io::Result<()> {
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

/// `fcntl(2)` `F_GETFD` on an fd number read from the fd table: its flags, or `None` if the
/// number is not open.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn fd_flags(fd: i32) -> Option<libc::c_int> {
    // SAFETY: F_GETFD only reads the flags of whatever the number holds; a number that is not
    // open (or was closed meanwhile by another thread) fails with EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    (flags >= 0).then_some(flags)
}

/// Whether fd `fd` is open and without close-on-exec, i.e. a spawned program would inherit
/// it. Used by [`crate::spawn::inheritable`].
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn is_inheritable(fd: i32) -> bool {
    fd_flags(fd).is_some_and(|flags| flags & libc::FD_CLOEXEC == 0)
}

/// Tests only: takes ownership of an open fd number nobody owns (one a test saw forgotten).
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
pub(crate) fn own_raw_fd_for_test(fd: i32) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    assert!(fd_flags(fd).is_some(), "fd {fd} is not open");
    // SAFETY: test code passes a number it knows is open and that no owner will close.
    unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
}

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

/// `setpgid(2)` `(0, 0)`: the calling process leads a new process group of its own
/// (async-signal-safe, for the child between fork and exec).
fn lead_own_process_group() -> io::Result<()> {
    // SAFETY: setpgid(0, 0) only changes the calling process's group; it has no memory
    // arguments.
    if unsafe { libc::setpgid(0, 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
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

/// The fd a socket-activated program finds its listening socket on (`SD_LISTEN_FDS_START`).
const LISTEN_FD: i32 = 3;

/// `LISTEN_PID=` followed by room for any pid (`u32::MAX` has 10 digits) and the NUL.
const LISTEN_PID_PREFIX: &[u8] = b"LISTEN_PID=";
const LISTEN_PID_LEN: usize = LISTEN_PID_PREFIX.len() + 10 + 1;

/// A complete `execve(2)` for a socket-activated child, built before the fork.
///
/// Why not let std exec: `LISTEN_PID` must be the child's own pid, known only after the fork,
/// and std builds the environment before it. So every C string and pointer array is allocated
/// here, in the parent; the child only writes its pid's digits into a buffer reserved for them,
/// moves the listener to fd 3, and calls `execve` on these arrays.
#[derive(Debug)]
pub(crate) struct ActivationExec {
    program: CString,
    /// Owns the strings `argv_ptrs` points into.
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    /// Owns the strings `env_ptrs` points into (all but the `LISTEN_PID` slot).
    _env: Vec<CString>,
    env_ptrs: Vec<*const libc::c_char>,
    /// `LISTEN_PID=` + digits + NUL, filled in by the child.
    listen_pid: Box<[u8; LISTEN_PID_LEN]>,
    /// Index of the `LISTEN_PID` entry in `env_ptrs`.
    pid_slot: usize,
    /// Our listening socket's fd number (close-on-exec; the child moves it to fd 3).
    listener: i32,
}

// SAFETY: the raw pointers point only into heap buffers owned by this same struct (the CStrings
// and the boxed LISTEN_PID buffer), which do not move when the struct moves. They are never
// dereferenced in the parent; the forked child (one thread) passes them to execve.
unsafe impl Send for ActivationExec {}
// SAFETY: as above; `&ActivationExec` gives no access to the pointers at all.
unsafe impl Sync for ActivationExec {}

impl ActivationExec {
    /// `program` is the resolved path to exec, `argv` starts with argv\[0\], `env` holds every
    /// `KEY=VALUE` except `LISTEN_PID` (added here), `listener` is our listening socket.
    pub(crate) fn new(
        program: CString,
        argv: Vec<CString>,
        env: Vec<CString>,
        listener: i32,
    ) -> ActivationExec {
        let mut listen_pid = Box::new([0u8; LISTEN_PID_LEN]);
        listen_pid[..LISTEN_PID_PREFIX.len()].copy_from_slice(LISTEN_PID_PREFIX);
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut env_ptrs: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
        let pid_slot = env_ptrs.len();
        env_ptrs.push(listen_pid.as_ptr().cast());
        env_ptrs.push(std::ptr::null());
        ActivationExec {
            program,
            _argv: argv,
            argv_ptrs,
            _env: env,
            env_ptrs,
            listen_pid,
            pid_slot,
            listener,
        }
    }

    /// In the child: writes `LISTEN_PID`, puts the listener on fd 3 (inheritable) and execs.
    /// Returns only on failure, with fd 3 restored to what it was (it may be std's own
    /// exec-error pipe, through which this error is then reported).
    fn exec(&mut self) -> io::Error {
        write_pid_digits(&mut self.listen_pid[LISTEN_PID_PREFIX.len()..], own_pid());
        // Re-derive the pointer after writing through `&mut`.
        self.env_ptrs[self.pid_slot] = self.listen_pid.as_ptr().cast();
        let saved = match place_on_listen_fd(self.listener) {
            Ok(saved) => saved,
            Err(e) => return e,
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

/// Registers `fd` for readability with the current tokio runtime's IO driver (the tokio face
/// waits on pidfds this way). Fails outside a runtime or when its IO driver is disabled.
#[cfg(feature = "tokio")]
pub(crate) fn async_readable(
    fd: std::os::fd::OwnedFd,
) -> io::Result<::tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use ::tokio::io::unix::AsyncFd;
    if ::tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other("not inside a tokio runtime"));
    }
    // SAFETY: the AsyncFd owns `fd` for its whole life and we never reach it mutably, so the
    // raw fd stays open and names the same file description until the AsyncFd deregisters it
    // on drop, which is all `register_with_interest` asks.
    let registered =
        unsafe { AsyncFd::register_with_interest(fd, ::tokio::io::Interest::READABLE) };
    registered.map_err(io::Error::from)
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

#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn cpu_time_of_a_process_grows_while_it_computes() {
        let me = std::process::id();
        let before = process_cpu_time(me).unwrap();
        let give_up = Instant::now() + Duration::from_secs(10);
        let mut x = 0u64;
        let mut now = before;
        while now < before + Duration::from_millis(10) && Instant::now() < give_up {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            now = process_cpu_time(me).unwrap();
        }
        assert!(
            now >= before + Duration::from_millis(10),
            "10 s of spinning did not show on our CPU clock: {before:?} -> {now:?}"
        );
    }

    #[test]
    fn cpu_time_of_a_busy_child_is_readable_and_grows() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let first = process_cpu_time(child.id());
        let give_up = Instant::now() + Duration::from_secs(10);
        let mut last = first.as_ref().ok().copied();
        while last.is_some_and(|t| t < Duration::from_millis(20)) && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(5));
            last = process_cpu_time(child.id()).ok();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let first = first.unwrap();
        let last = last.expect("reading the child's CPU clock failed");
        assert!(last >= Duration::from_millis(20), "{first:?} -> {last:?}");
    }

    #[test]
    fn cpu_time_of_no_process_is_an_error() {
        assert_eq!(
            process_cpu_time(0).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        // Pid numbers above pid_max (at most 2^22) never name a process.
        let err = process_cpu_time((1 << 22) + 1).unwrap_err();
        assert!(
            matches!(err.raw_os_error(), Some(libc::ESRCH) | Some(libc::EINVAL)),
            "{err}"
        );
    }
}
