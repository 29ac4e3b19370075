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
