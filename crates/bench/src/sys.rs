//! The bench's only `unsafe`: looking at fd flags by number.

use std::os::fd::BorrowedFd;

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
        // SAFETY: the fd number was just listed as open in our own table, and the borrow does
        // not outlive this iteration; an fd closed meanwhile (read_dir's own) makes fcntl fail
        // with EBADF, which we skip.
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        if let Ok(flags) = rustix::io::fcntl_getfd(fd) {
            if !flags.contains(rustix::io::FdFlags::CLOEXEC)
                && rustix::io::fcntl_setfd(fd, flags | rustix::io::FdFlags::CLOEXEC).is_ok()
            {
                changed.push(raw);
            }
        }
    }
    changed
}
