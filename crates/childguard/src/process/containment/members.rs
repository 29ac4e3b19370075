//! The processes in a cgroup, as pidfds that are known to name members.
//!
//! Race avoided (pid reuse): `cgroup.procs` lists pids, and a pid read there may exit, be
//! reaped and be handed to a stranger before we act on it. Each pid is therefore opened as a
//! pidfd first (which pins that exact process), and only then checked to be in our cgroup
//! (`/proc/PID/cgroup`) and still alive (its pidfd not yet readable): a stranger that got a
//! recycled pid is in another cgroup, and is never signalled.
//!
//! Race left (fork): a member may fork between the listing and the signal; the new process
//! is not signalled by this pass. That is acceptable for the catchable rungs of
//! `KillMode::ControlGroup` (the next rung lists again); the `KILL` rung does not list at all
//! (`cgroup.kill` is atomic against forks, see [`super::kill`]).

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{Dir, FileType};
use rustix::process::{pidfd_open, pidfd_send_signal, PidfdFlags};

use super::create::Cgroup;
use crate::base::signal::Signal;
use crate::sys;

/// The pids `cgroup.procs` lists now (processes, not threads; zombies are not listed), in the
/// cgroup and in the cgroups the server made inside it (at most `trim::MAX_DEPTH` levels and
/// `trim::MAX_CGROUPS` cgroups; each opened relative to its parent's fd, symlinks are not
/// followed): what `cgroup.kill` reaches.
pub(crate) fn pids(cgroup: &Cgroup) -> io::Result<Vec<u32>> {
    let mut pids = Vec::new();
    let mut budget = super::trim::MAX_CGROUPS;
    collect(cgroup.fd(), cgroup.dir(), 0, &mut budget, &mut pids)?;
    Ok(pids)
}

/// The pids of `cgroup.procs` of the cgroup open as `dir` (at `path`, for messages), then of
/// its child cgroups.
fn collect(
    dir: BorrowedFd<'_>,
    path: &Path,
    depth: usize,
    budget: &mut usize,
    pids: &mut Vec<u32>,
) -> io::Result<()> {
    match super::at::read_at(dir, "cgroup.procs") {
        Ok(text) => pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok())),
        // A child cgroup removed while we listed: its members went with it.
        Err(e) if depth > 0 && e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            let procs = path.join("cgroup.procs");
            return Err(super::explain::explain(&procs, "reading", e));
        }
    }
    if depth >= super::trim::MAX_DEPTH {
        return Ok(());
    }
    let Ok(mut entries) = Dir::read_from(dir) else {
        return Ok(());
    };
    while let Some(Ok(entry)) = entries.read() {
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        let is_dir = matches!(entry.file_type(), FileType::Directory | FileType::Unknown);
        if *budget == 0 || !is_dir || name == "." || name == ".." {
            continue;
        }
        *budget -= 1;
        // `O_DIRECTORY | O_NOFOLLOW`: a symlink is never walked into. Gone meanwhile: its
        // members went with it.
        let Ok(child) = super::at::open_dir_at(dir, name) else {
            continue;
        };
        collect(child.as_fd(), &path.join(name), depth + 1, budget, pids)?;
    }
    Ok(())
}

/// Every live member of `cgroup`, opened as a pidfd and verified (see the module docs).
pub(crate) fn open_all(cgroup: &Cgroup) -> io::Result<Vec<(u32, OwnedFd)>> {
    let mut members = Vec::new();
    for pid in pids(cgroup)? {
        let Some(raw) = rustix::process::Pid::from_raw(pid as i32) else {
            continue;
        };
        let Ok(fd) = pidfd_open(raw, PidfdFlags::empty()) else {
            continue; // gone meanwhile
        };
        if is_member(pid, cgroup) && !crate::process::group::is_readable(&fd) {
            members.push((pid, fd));
        }
    }
    Ok(members)
}

/// Sends `signal` to every member (by pidfd). Returns how many it reached.
pub(crate) fn signal_each(cgroup: &Cgroup, signal: Signal) -> io::Result<usize> {
    let signal = sys::rustix_signal(signal)?;
    let mut reached = 0;
    for (_, fd) in open_all(cgroup)? {
        match pidfd_send_signal(&fd, signal) {
            Ok(()) => reached += 1,
            Err(rustix::io::Errno::SRCH) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(reached)
}

/// Whether `/proc/PID/cgroup` puts `pid` in `cgroup` or in a cgroup below it.
fn is_member(pid: u32, cgroup: &Cgroup) -> bool {
    let ours = cgroup.hierarchy_path();
    crate::base::kernel_text::read(format!("/proc/{pid}/cgroup"))
        .ok()
        .is_some_and(|text| {
            super::mount::unified_path(&text)
                .map(str::trim_end)
                .is_some_and(|p| {
                    p.strip_prefix(ours)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
                })
        })
}
