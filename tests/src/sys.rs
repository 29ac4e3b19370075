//! Every `unsafe` block of the test helpers and drivers: one thin wrapper per system call,
//! each naming its man page. `cg-signal-driver` does to its own process what no test may do
//! to the shared test process (dispositions, `fork` without exec) through these.

/// An fd number as a `BorrowedFd`, for an `fcntl(F_GETFD)` probe on a number that may or may
/// not be open (EBADF for a closed one, which touches nothing).
pub fn borrow_for_probe(fd: i32) -> std::os::fd::BorrowedFd<'static> {
    // SAFETY: the result is only used for F_GETFD probes, which are harmless on any number;
    // nothing reads or writes through it, and it is never closed.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
}

/// `signal(2)`: `SIGCHLD` to `SIG_IGN` or `SIG_DFL` (the caller is the only thread changing
/// dispositions in its process).
pub fn set_sigchld(disposition: libc::sighandler_t) {
    assert!(
        disposition == libc::SIG_IGN || disposition == libc::SIG_DFL,
        "set_sigchld takes SIG_IGN or SIG_DFL"
    );
    // SAFETY: SIG_IGN or SIG_DFL (checked above) installs no handler code.
    let old = unsafe { libc::signal(libc::SIGCHLD, disposition) };
    assert_ne!(old, libc::SIG_ERR, "signal(SIGCHLD)");
}

/// `sigaction(2)`: `SIGCHLD` with handler `SIG_DFL` and, if `nocldwait`, the `SA_NOCLDWAIT`
/// flag.
pub fn set_sigchld_nocldwait(nocldwait: bool) {
    // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, empty mask, no flags).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = libc::SIG_DFL;
    if nocldwait {
        action.sa_flags = libc::SA_NOCLDWAIT;
    }
    // SAFETY: installs SIG_DFL (no handler code) from a valid struct; the old action is not
    // wanted.
    let rc = unsafe { libc::sigaction(libc::SIGCHLD, &action, std::ptr::null_mut()) };
    assert_eq!(
        rc,
        0,
        "sigaction(SIGCHLD): {}",
        std::io::Error::last_os_error()
    );
}

/// `fork(2)`: 0 in the child, the child's pid in the parent.
pub fn fork() -> std::io::Result<u32> {
    // SAFETY: fork in a multithreaded process: the child has only the calling thread. The
    // driver's child goes on to run Rust code that allocates and starts threads — what a
    // program that forks without exec does, and what the fork test is about; glibc's fork
    // keeps malloc usable in the child.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(pid as u32)
}

/// `_exit(2)`: ends the process at once, without atexit handlers or unwinding into `main`.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions; it does not return.
    unsafe { libc::_exit(code) }
}

/// `exit(2)` — the system call, not `exit_group`: ends only the calling thread. Called on a
/// process's main thread while another runs, it leaves `/proc` showing the process as `Z`
/// while it still runs.
pub fn exit_this_thread() -> ! {
    // SAFETY: SYS_exit ends only the calling thread, without unwinding or running destructors
    // of this thread's stack; whatever another thread uses lives on the heap or in statics,
    // not on this stack.
    unsafe {
        libc::syscall(libc::SYS_exit, 0);
    }
    unreachable!("SYS_exit returned")
}

/// `ptrace(2)` `PTRACE_SEIZE`: attaches to `pid` as its tracer without stopping it.
pub fn ptrace_seize(pid: i32) -> std::io::Result<()> {
    // SAFETY: PTRACE_SEIZE takes a pid and no pointers (addr and data are 0).
    let rc = unsafe { libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// fd 3 as a `UnixListener`: the socket a socket-activated process got (`sd_listen_fds(3)`).
/// For `cg-env-dump`, which calls it once, only after checking `LISTEN_FDS=1` and that
/// `LISTEN_PID` is its own pid (so fd 3 is the listener its parent passed, owned by nobody).
pub fn activation_listener() -> std::os::unix::net::UnixListener {
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: per the contract above fd 3 is open, a listening socket, and owned by nothing
    // else in this process; the OwnedFd takes that ownership once.
    let fd = unsafe { OwnedFd::from_raw_fd(3) };
    std::os::unix::net::UnixListener::from(fd)
}

/// `signal(2)` `SIG_IGN` for `signo` (`cg-sigconf`, before it execs: tini's sigconf-test).
pub fn ignore_signal(signo: i32) -> std::io::Result<()> {
    // SAFETY: SIG_IGN installs no handler code.
    if unsafe { libc::signal(signo, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `signal(2)` `SIG_DFL` for every signal: a clean start, whatever this process was started
/// with (a background job ignores `INT` and `QUIT`, `nohup` `HUP`, the Rust runtime `PIPE`).
/// Failures (`KILL`, `STOP`, glibc's own two real-time signals) are ignored: those keep what
/// they have. Async-signal-safe (only `signal(2)`; no allocation, no lock), so a `pre_exec`
/// hook may call it.
pub fn default_all_signals() {
    for signo in 1..=libc::SIGRTMAX() {
        // SAFETY: SIG_DFL installs no handler code.
        unsafe { libc::signal(signo, libc::SIG_DFL) };
    }
}

/// `sigprocmask(2)` `SIG_BLOCK` with `signals` (`cg-sigconf`, a single-threaded helper).
pub fn block_signals(signals: &[i32]) -> std::io::Result<()> {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set; sigaddset and sigprocmask use it initialised.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        for &signo in signals {
            libc::sigaddset(set.as_mut_ptr(), signo);
        }
        if libc::sigprocmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `execvp(3)` of `argv` as it is — unlike `std::process::Command::exec`, which empties the
/// signal mask and resets `SIGPIPE` first. Returns only on failure.
pub fn execvp_raw(argv: &[std::ffi::OsString]) -> std::io::Error {
    use std::os::unix::ffi::OsStrExt;
    let owned: Vec<std::ffi::CString> = match argv
        .iter()
        .map(|a| std::ffi::CString::new(a.as_bytes()))
        .collect()
    {
        Ok(owned) => owned,
        Err(_) => return std::io::Error::from_raw_os_error(libc::EINVAL),
    };
    if owned.is_empty() {
        return std::io::Error::from_raw_os_error(libc::EINVAL);
    }
    let mut ptrs: Vec<*const libc::c_char> = owned.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: `ptrs` is a null-terminated array of pointers to NUL-terminated strings that
    // `owned` keeps alive across the call.
    unsafe { libc::execvp(ptrs[0], ptrs.as_ptr()) };
    std::io::Error::last_os_error()
}

/// A `pre_exec` hook on `cmd` that gives the program a clean start: every signal at its default
/// (`signal(2)` `SIG_DFL`), whatever the tests were started with (a background job ignores
/// `INT` and `QUIT`, `nohup` `HUP`; std already empties the mask and resets `SIGPIPE`).
pub fn clean_start(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the forked child before exec and calls only
    // `default_all_signals`, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            default_all_signals();
            Ok(())
        });
    }
}
