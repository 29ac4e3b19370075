//! The errors of cgroup file operations: the path, what we were doing, and what the errno
//! means for cgroups. Moved out of `create.rs` by the layering (issue 21 item 5): `events`,
//! `kill` and `members` use it without importing `create`.

use std::io;
use std::path::Path;

/// An error naming `path`, what we were doing, and what the errno means for cgroups.
pub(crate) fn explain(path: &Path, doing: &str, e: io::Error) -> io::Error {
    let name = match e.raw_os_error() {
        Some(libc::ENOENT) => "ENOENT: ",
        Some(libc::EACCES) => "EACCES: ",
        Some(libc::EPERM) => "EPERM: ",
        Some(libc::EROFS) => "EROFS: ",
        Some(libc::EBUSY) => "EBUSY: ",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP: ",
        Some(libc::EAGAIN) => "EAGAIN: ",
        Some(libc::ENOTDIR) => "ENOTDIR: ",
        Some(libc::ELOOP) => "ELOOP: ",
        _ => "",
    };
    let why = match e.raw_os_error() {
        Some(libc::ENOENT) => "does not exist",
        Some(libc::EACCES) | Some(libc::EPERM) => {
            "permission denied: not writable by this user (is the subtree delegated to it?)"
        }
        Some(libc::EROFS) => "the cgroup file system is mounted read-only",
        Some(libc::EBUSY) => {
            "busy: cgroup v2's no-internal-processes rule (a cgroup that distributes \
             controllers to its children cannot take processes)"
        }
        Some(libc::EOPNOTSUPP) => "not supported here (a threaded cgroup subtree?)",
        Some(libc::EAGAIN) => "cgroup.max.descendants or cgroup.max.depth reached",
        Some(libc::ENOTDIR) => "not a directory",
        Some(libc::ELOOP) => "a symlink (never followed)",
        _ => "",
    };
    let message = if why.is_empty() {
        format!("{} ({doing}): {e}", path.display())
    } else {
        format!("{} ({doing}): {why} ({name}{e})", path.display())
    };
    io::Error::new(e.kind(), message)
}
