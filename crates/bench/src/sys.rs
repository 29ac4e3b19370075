//! The bench's only `unsafe`: looking at fd flags by number, at `SIGCHLD`'s disposition, and
//! the no-op `pre_exec` hook of the hooked spawn baseline.

/// Marks every fd `>= 3` that lacks close-on-exec (inherited from whatever started the
/// bench, e.g. a shell or CI harness) close-on-exec, via `fcntl(2)` `F_GETFD`/`F_SETFD`.
/// Returns the fds it changed. The bench relies on no inherited fd.
pub fn close_on_exec_inherited_fds() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd >= 3)
        .collect();
    let mut changed = Vec::new();
    for raw in fds {
        // An fd closed since the listing (read_dir's own) has no flags: skipped.
        let Some(flags) = fd_flags(raw).filter(|f| f & libc::FD_CLOEXEC == 0) else {
            continue;
        };
        // SAFETY: F_SETFD only sets the flags of fd number `raw`, ours; a number closed
        // meanwhile fails with EBADF.
        if unsafe { libc::fcntl(raw, libc::F_SETFD, flags | libc::FD_CLOEXEC) } == 0 {
            changed.push(raw);
        }
    }
    changed
}

/// Whether fd number `fd` is open without close-on-exec: `fcntl(2)` `F_GETFD` on a raw number,
/// which may not be open (`EBADF` then: not inheritable).
pub fn is_inheritable(fd: i32) -> bool {
    fd_flags(fd).is_some_and(|flags| flags & libc::FD_CLOEXEC == 0)
}

/// `fcntl(2)` `F_GETFD` on fd number `fd`; `None` if it is not open.
fn fd_flags(fd: i32) -> Option<i32> {
    // SAFETY: F_GETFD only reads the fd's flags; a number that is not open fails with EBADF.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    (flags >= 0).then_some(flags)
}

/// `sigaction(2)` with a null new action: is `SIGCHLD` ignored (children reaped by the kernel)?
pub fn sigchld_ignored() -> std::io::Result<bool> {
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null new action only reads the disposition, into a zeroed buffer that lives
    // across the call.
    if unsafe { libc::sigaction(libc::SIGCHLD, std::ptr::null(), old.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: sigaction returned 0, so it filled `old`.
    Ok(unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN)
}

/// `Command::pre_exec` with a hook that does nothing: forces std onto its `fork` path (the
/// hooked spawn baseline) without changing what the child does.
pub fn install_noop_pre_exec(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook does nothing, so it is trivially async-signal-safe.
    unsafe {
        cmd.pre_exec(|| Ok(()));
    }
}

/// A program to `execve(2)`, with its argv and envp as the NUL-terminated pointer arrays the
/// call takes, built before any spawn (a forked child must not allocate).
pub struct Exec {
    program: std::ffi::CString,
    _strings: Vec<std::ffi::CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl Exec {
    pub fn new(
        program: std::ffi::CString,
        argv: Vec<std::ffi::CString>,
        envp: Vec<std::ffi::CString>,
    ) -> Exec {
        let pointers = |v: &[std::ffi::CString]| {
            let mut p: Vec<*const libc::c_char> = v.iter().map(|s| s.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        let (argv_p, envp_p) = (pointers(&argv), pointers(&envp));
        // The pointers point into the CStrings' heap buffers, which do not move when the
        // CStrings are moved into `_strings`.
        let mut strings = argv;
        strings.extend(envp);
        Exec {
            program,
            _strings: strings,
            argv: argv_p,
            envp: envp_p,
        }
    }
}

/// `struct clone_args` of `clone3(2)` (`linux/sched.h`, size 88: `CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_PIDFD: u64 = 0x1000;
const CLONE_VFORK: u64 = 0x4000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `clone3(2)` with `CLONE_PIDFD | CLONE_VFORK` (and `CLONE_INTO_CGROUP` into `cgroup`), no
/// `CLONE_VM`: the child is a copy of this process, which `dup2`s `stdio` onto fds 0 and 1 and
/// `execve`s `exec` (`_exit(127)` if that fails); this thread resumes once it has. Returns the
/// child's pidfd. The bench's contained-spawn floor: no childguard code on the way.
pub fn clone3_exec(
    exec: &Exec,
    stdio: std::os::fd::RawFd,
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: CLONE_PIDFD | CLONE_VFORK,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(dir) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = dir.as_raw_fd() as u64;
    }
    // SAFETY: `args` is a valid clone_args of the size passed, whose `pidfd` points at a live
    // int. Without CLONE_VM the child runs in a copy of this address space (as after fork):
    // it only makes the async-signal-safe calls dup2, execve and _exit, on pointers prepared
    // before the call (`exec`'s arrays are NUL-terminated and point into live CStrings), and
    // never returns into Rust code.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::addr_of_mut!(args),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if ret == 0 {
        // SAFETY: see above: the child of the clone, in its own copy of memory.
        unsafe {
            libc::dup2(stdio, 0);
            libc::dup2(stdio, 1);
            libc::execve(
                exec.program.as_ptr(),
                exec.argv.as_ptr(),
                exec.envp.as_ptr(),
            );
            libc::_exit(127);
        }
    }
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: clone3 returned a pid, so it wrote a new pidfd, ours alone, into `pidfd`.
    Ok(unsafe { OwnedFd::from_raw_fd(pidfd) })
}

#[cfg(test)]
mod tests {
    #[test]
    fn clone_args_is_the_kernels_version_2_size() {
        assert_eq!(std::mem::size_of::<super::CloneArgs>(), 88);
        assert_eq!(super::CLONE_INTO_CGROUP, 1 << 33);
    }
}
