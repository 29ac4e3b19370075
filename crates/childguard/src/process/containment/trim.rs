//! Removing a cgroup and every cgroup a server made inside it, bottom-up.
//!
//! A server may make cgroups of its own in the cgroup we gave it: a nested
//! `childguard run --contain`, a container runtime, a test suite that uses containment. Once
//! the tree is empty (`cgroup.events` says `populated 0`, which counts descendants too), the
//! directories are still there, and `rmdir` of a cgroup that has child cgroups fails with
//! `EBUSY`. So, as systemd's `cg_trim` does, the child cgroups are removed depth-first (each
//! after its own children), then the cgroup itself.
//!
//! Bounded and safe against a hostile tree: at most [`MAX_DEPTH`] levels and [`MAX_CGROUPS`]
//! directories are visited; every directory, the top one included, is opened relative to its
//! parent's fd with `O_NOFOLLOW | O_DIRECTORY` and removed with `unlinkat(parent, name,
//! AT_REMOVEDIR)` (a symlink is never followed, and a rename above us cannot send the walk or
//! a removal elsewhere); a directory on another file system (something mounted inside the
//! tree) is left alone. A directory that stays is named in the error.
//!
//! Race left: a process outside the tree that can write to it may make a new child cgroup
//! after we listed; the final `rmdir` then fails and the error names the cgroup.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode};
use rustix::io::Errno;

use super::at;

/// Levels below the cgroup that are walked (the kernel's own default `cgroup.max.depth` is
/// unlimited; nobody nests 32 deep).
pub(crate) const MAX_DEPTH: usize = 32;
/// Child cgroups visited at most, in all.
pub(crate) const MAX_CGROUPS: usize = 4096;

/// Removes the cgroup `name` of the directory open as `parent` (at `dir`, for messages) and
/// all the (empty) cgroups below it, deepest first. `Ok` also when it is already gone. The
/// error names the first directory that stayed and why.
pub(crate) fn remove_tree(parent: BorrowedFd<'_>, name: &OsStr, dir: &Path) -> io::Result<()> {
    // The common case first: the server made no cgroup inside, and one `rmdir` does it (the
    // walk costs six more system calls per close). `EBUSY` says there are child cgroups; on it,
    // or on any other error, the walk below removes them and names what stayed, and why.
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(_) => {}
    }
    let fd = match at::open_dir_at(parent, name) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(removal_error(dir, "opening it to remove it", e)),
    };
    let dev = rustix::fs::fstat(&fd)
        .map_err(|e| removal_error(dir, "fstat", e))?
        .st_dev;
    let mut walk = Walk {
        dev,
        left: MAX_CGROUPS,
        stayed: None,
    };
    walk.trim_children(&fd, dir, 1);
    drop(fd);
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(match walk.stayed {
            Some(stayed) => io::Error::new(
                stayed.kind(),
                format!("{} not removed: {stayed}", dir.display()),
            ),
            None => removal_error(dir, "removing", e),
        }),
    }
}

struct Walk {
    /// The file system of the top directory: nothing on another one is touched.
    dev: u64,
    /// Directories that may still be visited.
    left: usize,
    /// The first directory that could not be removed (the deepest, as the walk is post-order).
    stayed: Option<io::Error>,
}

impl Walk {
    /// Removes every child cgroup of the directory open as `fd` (at `path`, `depth` levels below
    /// the top), each after its own children. Errors are kept in `stayed`, not returned: the
    /// walk goes on, so that as much as can go goes.
    fn trim_children(&mut self, fd: &OwnedFd, path: &Path, depth: usize) {
        let names = match child_dirs(fd) {
            Ok(names) => names,
            Err(e) => return self.stay(removal_error(path, "listing its child cgroups", e)),
        };
        for name in names {
            let child = path.join(OsStr::from_bytes(&name));
            if depth > MAX_DEPTH || self.left == 0 {
                return self.stay(io::Error::other(format!(
                    "{}: left alone: the walk stops at {MAX_DEPTH} levels and {MAX_CGROUPS} cgroups",
                    child.display()
                )));
            }
            self.left -= 1;
            let child_fd = match rustix::fs::openat(fd, name.as_slice(), at::DIR, Mode::empty()) {
                Ok(child_fd) => child_fd,
                Err(Errno::NOENT) => continue,
                // A symlink (ELOOP / ENOTDIR with O_NOFOLLOW): not a cgroup, not followed.
                Err(e) => {
                    self.stay(removal_error(&child, "opening it to remove it", e));
                    continue;
                }
            };
            match rustix::fs::fstat(&child_fd) {
                Ok(st) if st.st_dev == self.dev => {}
                Ok(_) => {
                    self.stay(io::Error::other(format!(
                        "{}: left alone: another file system is mounted there",
                        child.display()
                    )));
                    continue;
                }
                Err(e) => {
                    self.stay(removal_error(&child, "fstat", e));
                    continue;
                }
            }
            self.trim_children(&child_fd, &child, depth + 1);
            drop(child_fd);
            match rustix::fs::unlinkat(fd, name.as_slice(), AtFlags::REMOVEDIR) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(e) => self.stay(removal_error(&child, "removing", e)),
            }
        }
    }

    fn stay(&mut self, e: io::Error) {
        self.stayed.get_or_insert(e);
    }
}

/// The names of the subdirectories of the directory open as `fd` (in cgroupfs: the child
/// cgroups; every control file is a regular file), without `.` and `..`.
fn child_dirs(fd: &OwnedFd) -> rustix::io::Result<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    let mut dir = Dir::read_from(fd)?;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        // Directories, and entries whose type the file system does not say (cgroupfs does;
        // openat with O_DIRECTORY then sorts them out).
        if matches!(entry.file_type(), FileType::Directory | FileType::Unknown) {
            names.push(name.to_vec());
        }
    }
    Ok(names)
}

/// An error naming `path`, what we were doing, and what the errno means for a removal.
fn removal_error(path: &Path, doing: &str, e: Errno) -> io::Error {
    let why = match e {
        Errno::BUSY | Errno::NOTEMPTY => {
            "busy: processes are still in it (or it has child cgroups)"
        }
        Errno::ACCESS | Errno::PERM => "permission denied: not writable by this user",
        Errno::LOOP | Errno::NOTDIR => "not a directory (a symlink is never followed)",
        Errno::ROFS => "the cgroup file system is mounted read-only",
        _ => "",
    };
    let e = io::Error::from(e);
    let message = match why {
        "" => format!("{} ({doing}): {e}", path.display()),
        why => format!("{} ({doing}): {why} ({e})", path.display()),
    };
    io::Error::new(e.kind(), message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::containment::mount;
    use std::os::fd::AsFd;
    use std::path::PathBuf;

    /// The cgroups below `dir`, deepest first.
    fn descendants(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    out.extend(descendants(&entry.path()));
                    out.push(entry.path());
                }
            }
        }
        out
    }

    /// `remove_tree` of `dir` through its parent's fd, as its callers do.
    fn remove(dir: &Path) -> io::Result<()> {
        let parent = at::open_dir(dir.parent().unwrap()).unwrap();
        remove_tree(parent.as_fd(), dir.file_name().unwrap(), dir)
    }

    fn scratch(name: &str) -> PathBuf {
        let _planting = mount::TEST_LOCK.read();
        let dir = mount::own_cgroup_dir()
            .expect("cgroup2 with a writable cgroup of ours (CI: root)")
            .join(format!("cg-trim-{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn a_tree_of_empty_cgroups_is_removed_deepest_first() {
        let top = scratch("tree");
        for sub in ["a/b/c", "a/d", "e"] {
            std::fs::create_dir_all(top.join(sub)).unwrap();
        }
        assert_eq!(descendants(&top).len(), 5);
        remove(&top).unwrap();
        assert!(!top.exists());
        // Gone already: fine.
        remove(&top).unwrap();
    }

    #[test]
    fn a_member_in_a_child_cgroup_is_named_and_the_rest_removed() {
        let top = scratch("busy");
        let busy = top.join("x/busy");
        std::fs::create_dir_all(&busy).unwrap();
        std::fs::create_dir_all(top.join("y/z")).unwrap();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && echo in && exec sleep 1000",
                busy.display()
            ))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "in");
        let e = remove(&top).unwrap_err().to_string();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            e.contains(&busy.display().to_string()) && e.contains("busy"),
            "{e}"
        );
        assert!(!top.join("y").exists(), "the empty part stayed: {e}");
        // The kernel drops an exited (reaped) task from its cgroup before wait returns.
        remove(&top).unwrap();
        assert!(!top.exists());
    }
}
