//! What the guardian does to a cgroup once the host is gone: kill every member, then remove
//! the directory with the cgroups the server made inside it. The same steps as
//! [`crate::process::containment::kill`] and [`crate::process::containment::trim`], rewritten for a process that
//! may not allocate: fixed-depth recursion over `getdents(2)` into buffers it was given, one
//! per level; paths built in a buffer of its own; every directory opened relative to its
//! parent with `O_NOFOLLOW | O_DIRECTORY`, nothing on another file system touched, at most
//! [`MAX_DEPTH`] levels and [`MAX_CGROUPS`] directories per pass (as `trim.rs`).
//!
//! The guardian is told paths (it outlives the host, and holding an fd per registered cgroup
//! would cost it up to `table::MAX_ENTRIES` of them): each registered path is opened once per
//! pass, its last component `O_NOFOLLOW` — the cgroup itself to kill, its parent to remove
//! it — and every later step is relative to that fd (`openat`, `unlinkat(AT_REMOVEDIR)`).

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir};
use rustix::io::Errno;

use crate::process::containment::trim::{MAX_CGROUPS, MAX_DEPTH};

/// `getdents(2)` buffer bytes per level of the walk.
pub(crate) const DIRENT_BUF: usize = 2048;
/// Bytes of all the walk's `getdents` buffers.
pub(crate) const DIRENTS: usize = DIRENT_BUF * (MAX_DEPTH + 1);
/// Bytes of the path buffer: a registered path, a `/` and the longest control-file name.
pub(crate) const PATH_BUF: usize = super::table::MAX_PATH + 64;
/// Bytes read from `cgroup.procs` or `cgroup.events` at a time.
pub(crate) const IO_BUF: usize = 4096;
/// How long the freeze fallback waits for `frozen 1` before signalling anyway (as
/// `kill.rs`'s `FREEZE_WAIT`).
const FREEZE_WAIT: Duration = Duration::from_secs(1);

/// The guardian's working memory (mapped before its loop starts).
pub(crate) struct Scratch<'m> {
    pub(crate) dirents: &'m mut [MaybeUninit<u8>],
    pub(crate) path: &'m mut [u8],
    pub(crate) io: &'m mut [u8],
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// `path` with a NUL after it, in `buf`; `None` if it does not fit or holds a NUL.
fn c_path<'b>(buf: &'b mut [u8], path: &[u8]) -> Option<&'b CStr> {
    if path.len() + 1 > buf.len() {
        return None;
    }
    buf[..path.len()].copy_from_slice(path);
    buf[path.len()] = 0;
    CStr::from_bytes_with_nul(&buf[..=path.len()]).ok()
}

/// Opens the cgroup directory at `path`.
fn open_dir(path: &[u8], buf: &mut [u8]) -> Result<OwnedFd, Errno> {
    let path = c_path(buf, path).ok_or(Errno::NAMETOOLONG)?;
    rustix::fs::open(path, DIR_FLAGS, Mode::empty())
}

/// `path` split at its last `/` into its parent directory and its name, each with a NUL after
/// it, in `buf`; `None` if it does not fit, holds a NUL or ends with `/`.
fn split_path<'b>(buf: &'b mut [u8], path: &[u8]) -> Option<(&'b CStr, &'b CStr)> {
    let slash = path.iter().rposition(|&b| b == b'/')?;
    // `/name`: the parent is `/`.
    let (parent, name) = (&path[..slash.max(1)], &path[slash + 1..]);
    if name.is_empty() || parent.len() + 1 > buf.len() {
        return None;
    }
    let (head, tail) = buf.split_at_mut(parent.len() + 1);
    Some((c_path(head, parent)?, c_path(tail, name)?))
}

/// Writes `value` to the control file `name` of the cgroup open as `dir`.
fn write_at(dir: BorrowedFd<'_>, name: &CStr, value: &[u8]) -> Result<(), Errno> {
    let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    rustix::io::retry_on_intr(|| rustix::io::write(&fd, value)).map(|_| ())
}

/// Kills every member of the cgroup at `path` and of the cgroups below it: `cgroup.kill`, or,
/// where it is missing (Linux < 5.14; `pretend_no_kill` for the tests), freeze → `SIGKILL`
/// each member → thaw. A directory that is gone is nothing to do.
pub(crate) fn kill(path: &[u8], scratch: &mut Scratch<'_>, pretend_no_kill: bool) {
    let Ok(dir) = open_dir(path, scratch.path) else {
        return;
    };
    if !pretend_no_kill && write_at(dir.as_fd(), c"cgroup.kill", b"1").is_ok() {
        return;
    }
    // Frozen members cannot fork, nor exit by themselves: the pids read below stay theirs
    // until our SIGKILL (the race `members.rs` closes with pidfds does not arise).
    let frozen = write_at(dir.as_fd(), c"cgroup.freeze", b"1").is_ok();
    if frozen {
        wait_frozen(dir.as_fd(), scratch.io);
    }
    let Ok(st) = rustix::fs::fstat(&dir) else {
        return;
    };
    let mut budget = MAX_CGROUPS;
    signal_tree(
        dir.as_fd(),
        st.st_dev,
        scratch.dirents,
        scratch.io,
        0,
        &mut budget,
    );
    if frozen {
        let _ = write_at(dir.as_fd(), c"cgroup.freeze", b"0");
    }
}

/// Polls `cgroup.events` every 10 ms until it says `frozen 1` or `populated 0`, at most
/// [`FREEZE_WAIT`] (a member stuck in the kernel may never report frozen).
fn wait_frozen(dir: BorrowedFd<'_>, io: &mut [u8]) {
    let deadline = now() + FREEZE_WAIT;
    loop {
        let Ok(fd) = rustix::fs::openat(
            dir,
            c"cgroup.events",
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return;
        };
        let n = rustix::io::retry_on_intr(|| rustix::io::read(&fd, &mut *io)).unwrap_or(0);
        let text = &io[..n];
        if contains(text, b"frozen 1") || contains(text, b"populated 0") || now() >= deadline {
            return;
        }
        sleep(Duration::from_millis(10));
    }
}

/// `SIGKILL` to every pid in the `cgroup.procs` of `dir`, then the same below it.
fn signal_tree(
    dir: BorrowedFd<'_>,
    dev: u64,
    bufs: &mut [MaybeUninit<u8>],
    io: &mut [u8],
    depth: usize,
    budget: &mut usize,
) {
    signal_procs(dir, io);
    if depth >= MAX_DEPTH || bufs.len() < 2 * DIRENT_BUF {
        return;
    }
    let (mine, rest) = bufs.split_at_mut(DIRENT_BUF);
    let mut entries = RawDir::new(dir, mine);
    while let Some(Ok(entry)) = entries.next() {
        let Some(child) = open_child(dir, entry.file_name(), entry.file_type(), dev, budget) else {
            continue;
        };
        signal_tree(child.as_fd(), dev, rest, io, depth + 1, budget);
    }
}

/// Reads `cgroup.procs` of `dir` in `io`-sized pieces and `SIGKILL`s each pid in it.
fn signal_procs(dir: BorrowedFd<'_>, io: &mut [u8]) {
    let Ok(fd) = rustix::fs::openat(
        dir,
        c"cgroup.procs",
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let me = rustix::process::getpid();
    let mut pid: u32 = 0;
    loop {
        let n = match rustix::io::retry_on_intr(|| rustix::io::read(&fd, &mut *io)) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &io[..n] {
            if b.is_ascii_digit() {
                pid = pid.saturating_mul(10).saturating_add(u32::from(b - b'0'));
            } else {
                kill_pid(pid, me);
                pid = 0;
            }
        }
    }
    kill_pid(pid, me);
}

fn kill_pid(pid: u32, me: rustix::process::Pid) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        if pid != me {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// Opens the child cgroup `name` of `dir` if it is one (a directory, not a symlink, on the
/// same file system, within the budget).
fn open_child(
    dir: BorrowedFd<'_>,
    name: &CStr,
    kind: FileType,
    dev: u64,
    budget: &mut usize,
) -> Option<OwnedFd> {
    let bytes = name.to_bytes();
    if bytes == b"." || bytes == b".." || !matches!(kind, FileType::Directory | FileType::Unknown) {
        return None;
    }
    if *budget == 0 {
        return None;
    }
    *budget -= 1;
    let child = rustix::fs::openat(dir, name, DIR_FLAGS, Mode::empty()).ok()?;
    let same_fs = rustix::fs::fstat(&child).is_ok_and(|st| st.st_dev == dev);
    same_fs.then_some(child)
}

/// Removes the cgroup at `path` and every (empty) cgroup below it, deepest first: its parent
/// opened, the cgroup opened and removed relative to it. `true` once it is gone (or was
/// already).
pub(crate) fn remove(path: &[u8], scratch: &mut Scratch<'_>) -> bool {
    let Some((parent, name)) = split_path(scratch.path, path) else {
        return false;
    };
    let gone = |e| matches!(e, Errno::NOENT);
    let parent = match rustix::fs::open(parent, DIR_FLAGS, Mode::empty()) {
        Ok(parent) => parent,
        Err(e) => return gone(e),
    };
    let dir = match rustix::fs::openat(&parent, name, DIR_FLAGS, Mode::empty()) {
        Ok(dir) => dir,
        Err(e) => return gone(e),
    };
    if let Ok(st) = rustix::fs::fstat(&dir) {
        let mut budget = MAX_CGROUPS;
        trim_children(dir.as_fd(), st.st_dev, scratch.dirents, 0, &mut budget);
    }
    drop(dir);
    matches!(
        rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR),
        Ok(()) | Err(Errno::NOENT)
    )
}

/// Removes every child cgroup of `dir`, each after its own children.
fn trim_children(
    dir: BorrowedFd<'_>,
    dev: u64,
    bufs: &mut [MaybeUninit<u8>],
    depth: usize,
    budget: &mut usize,
) {
    if depth >= MAX_DEPTH || bufs.len() < DIRENT_BUF {
        return;
    }
    let (mine, rest) = bufs.split_at_mut(DIRENT_BUF);
    let mut entries = RawDir::new(dir, mine);
    while let Some(Ok(entry)) = entries.next() {
        let name = entry.file_name();
        let Some(child) = open_child(dir, name, entry.file_type(), dev, budget) else {
            continue;
        };
        trim_children(child.as_fd(), dev, rest, depth + 1, budget);
        drop(child);
        let _ = rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR);
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The monotonic clock (see [`crate::sys::guardian::monotonic`] for why not rustix's).
pub(crate) fn now() -> Duration {
    crate::sys::guardian::monotonic()
}

/// `nanosleep(2)` for `d` (an interrupted sleep is just shorter).
pub(crate) fn sleep(d: Duration) {
    let t = rustix::time::Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    };
    let _ = rustix::thread::nanosleep(&t);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_splits_into_its_parent_and_its_name() {
        let mut buf = [0u8; 32];
        let (parent, name) = split_path(&mut buf, b"/sys/fs/cgroup/a").unwrap();
        assert_eq!(
            (parent.to_bytes(), name.to_bytes()),
            (&b"/sys/fs/cgroup"[..], &b"a"[..])
        );
        let (parent, name) = split_path(&mut buf, b"/a").unwrap();
        assert_eq!((parent.to_bytes(), name.to_bytes()), (&b"/"[..], &b"a"[..]));
        assert!(split_path(&mut buf, b"/a/").is_none());
        assert!(split_path(&mut buf, b"relative").is_none());
        assert!(split_path(&mut [0u8; 4], b"/long/a").is_none());
        // Exactly fits: the parent, its NUL, the name, its NUL.
        assert!(split_path(&mut [0u8; 8], b"/abc/de").is_some());
        assert!(split_path(&mut [0u8; 7], b"/abc/de").is_none());
    }
}
