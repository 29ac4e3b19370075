//! A thread's own fd table: `unshare(2)` `CLONE_FILES`, for the small-table spawner
//! (`spawn/small_table.rs`).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The lowest number the kept fd is moved to: above the placeholders on 0–3 and the fds a
/// spawn brings (they are received at the lowest free numbers, from 4 up).
const KEEP_FROM: RawFd = 64;

/// Gives the calling thread a table of its own (`unshare(2)` `CLONE_FILES`) holding only
/// `keep` (moved to a number from 64 up and returned, close-on-exec) and `/dev/null`
/// placeholders, close-on-exec, on 0–3. Everything else the copy held is closed — in the copy
/// only: the process's table is untouched.
///
/// For the caller's thread, from then on, every fd number means an entry of its own table; it
/// must hold no fd of another thread's and hand none out except by `SCM_RIGHTS`. The fds
/// received from then on land from 4 up, so a child's fds 0–3 (stdio and the activation fd)
/// are never where an fd it still has to move sits.
#[cfg(target_os = "linux")]
pub(crate) fn unshare_keeping(keep: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: the caller's contract (above): this thread has no fd of another thread's in use,
    // and takes none but through its socket; no other thread can see this thread's table.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FILES) }?;
    // SAFETY: F_DUPFD_CLOEXEC of `keep`, open in the copy (it was in the table copied).
    let kept = unsafe { libc::fcntl(keep, libc::F_DUPFD_CLOEXEC, KEEP_FROM) };
    if kept < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: close_range(2) on our own copy of the table, around the one fd kept; the
    // numbers closed belong to no one in it (the copy was just made, nothing here owns them).
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0u32, (kept - 1) as u32, 0u32) != 0
            || libc::syscall(libc::SYS_close_range, (kept + 1) as u32, u32::MAX, 0u32) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    for expected in 0..4 {
        let null = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        // The table holds only `kept` (≥ 64): each open takes the lowest number, 0 to 3.
        debug_assert_eq!(std::os::fd::AsRawFd::as_raw_fd(&null), expected);
        // Kept open for the life of the thread: placeholders, never closed.
        std::mem::forget(null);
    }
    // SAFETY: `kept` was just made by F_DUPFD_CLOEXEC in this thread's own table and is
    // owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(kept) })
}
