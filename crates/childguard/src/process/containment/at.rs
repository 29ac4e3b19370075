//! Cgroup directories and their files by file descriptor (issue 49): a directory is opened
//! once, `O_DIRECTORY | O_NOFOLLOW` (a symlink as the last component is refused), and every
//! later step — `mkdirat`, `openat` of a child cgroup or a control file, `unlinkat` — is
//! relative to that fd, never a path again. A rename on the way after that open (a delegated
//! parent's owner may rename cgroups in it), or a symlink planted there, cannot send a write,
//! a placement or a removal anywhere else. Paths are kept beside the fds for messages and the
//! close report only.
//!
//! cgroupfs itself has no symlinks (`kernfs` offers no `symlink` to cgroup's users), so
//! `O_NOFOLLOW` matters for a parent given as a path elsewhere (`cgroup_parent`) and is the
//! same discipline as everywhere else: what root works in is named once.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// How every cgroup directory is opened: read-only (an fd `CLONE_INTO_CGROUP` takes: not
/// `O_PATH`), a directory, never through a symlink, not inherited.
pub(crate) const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Opens the directory at `path` (the one step by path: a cgroup parent, from mountinfo and
/// `/proc/self/cgroup` or given by the caller).
pub(crate) fn open_dir(path: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(path, DIR, Mode::empty())
}

/// Opens the child cgroup `name` of the directory open as `parent`.
pub(crate) fn open_dir_at(parent: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(parent, name, DIR, Mode::empty())
}

/// Opens the control file `name` of the cgroup open as `dir`, with `flags` (`O_RDONLY` or
/// `O_WRONLY`) plus `O_NOFOLLOW | O_CLOEXEC`.
pub(crate) fn open_file_at(
    dir: BorrowedFd<'_>,
    name: &str,
    flags: OFlags,
) -> rustix::io::Result<OwnedFd> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(dir, name, flags, Mode::empty())
}

/// Writes `value` to the control file `name` of the cgroup open as `dir`, in one `write` (a
/// cgroup file takes a value per write; a short one is `EIO`).
pub(crate) fn write_at(dir: BorrowedFd<'_>, name: &str, value: &[u8]) -> rustix::io::Result<()> {
    let fd = open_file_at(dir, name, OFlags::WRONLY)?;
    match rustix::io::retry_on_intr(|| rustix::io::write(&fd, value))? {
        n if n == value.len() => Ok(()),
        _ => Err(Errno::IO),
    }
}

/// The whole text of the control file `name` of the cgroup open as `dir`.
pub(crate) fn read_at(dir: BorrowedFd<'_>, name: &str) -> io::Result<String> {
    let fd = open_file_at(dir, name, OFlags::RDONLY)?;
    crate::base::kernel_text::read_file(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_symlink_is_never_followed_to_a_directory_or_a_file() {
        let top = std::env::temp_dir().join(format!("cg-at-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&top);
        std::fs::create_dir_all(top.join("real")).unwrap();
        std::fs::write(top.join("real/file"), "text").unwrap();
        std::os::unix::fs::symlink(top.join("real"), top.join("dir-link")).unwrap();
        std::os::unix::fs::symlink(top.join("real/file"), top.join("real/file-link")).unwrap();
        assert!(open_dir(&top.join("dir-link")).is_err());
        let fd = open_dir(&top).unwrap();
        assert!(open_dir_at(fd.as_fd(), OsStr::new("dir-link")).is_err());
        let real = open_dir_at(fd.as_fd(), OsStr::new("real")).unwrap();
        assert_eq!(read_at(real.as_fd(), "file").unwrap(), "text");
        assert!(read_at(real.as_fd(), "file-link").is_err());
        assert!(write_at(real.as_fd(), "file-link", b"x").is_err());
        assert_eq!(
            std::fs::read_to_string(top.join("real/file")).unwrap(),
            "text"
        );
        std::fs::remove_dir_all(&top).unwrap();
    }
}
