//! Linux: the child's descendants at the start of a close, for an honest report without
//! containment (`CloseReport::escaped`).
//!
//! A process group does not hold a tree whose members call `setsid()` (postgres backends,
//! per-connection workers): `killpg` never reaches them, and the group looks empty while they
//! run on. So when a close begins, the children of the child are listed — recursively, from
//! `/proc/PID/task/TID/children` (no walk over all of `/proc`) — and each is opened as a pidfd.
//! After the ladder, every one still alive and no longer in the child's process group is
//! reported as escaped.
//!
//! Race avoided (pid reuse): a pid read from a `children` file may exit and be recycled before
//! `pidfd_open`; after opening, the process's parent is checked to still be the one it was
//! listed under, so a stranger with a recycled pid is dropped (a listed process whose parent
//! died meanwhile is dropped too: the snapshot errs toward naming fewer, never a stranger).
//!
//! Limit: only descendants still attached by parentage are found. A daemon's double fork
//! leaves its grandchild re-parented to init (or a subreaper) before we look, and no ppid walk
//! finds it; containment ([`crate::Containment`]) is the answer for those.

use std::io;
use std::os::fd::OwnedFd;

use rustix::process::{pidfd_open, PidfdFlags};

/// Descendants of a child seen when its close began, pinned by pidfds.
#[derive(Debug, Default)]
pub(crate) struct Descendants {
    members: Vec<(u32, OwnedFd)>,
}

/// The most descendants listed (a fork bomb must not make a close unbounded).
const MAX: usize = 4096;

impl Descendants {
    /// Lists the descendants of `root` now.
    pub(crate) fn snapshot(root: u32) -> Descendants {
        let mut members = Vec::new();
        let mut frontier = vec![root];
        while let Some(parent) = frontier.pop() {
            for pid in children_of(parent).unwrap_or_default() {
                if members.len() >= MAX {
                    return Descendants { members };
                }
                let Some(raw) = rustix::process::Pid::from_raw(pid as i32) else {
                    continue;
                };
                let Ok(fd) = pidfd_open(raw, PidfdFlags::empty()) else {
                    continue; // exited meanwhile
                };
                // The pidfd pins the process: is it still the child of `parent`?
                if super::group::parent_of(pid) == Some(parent) {
                    members.push((pid, fd));
                    frontier.push(pid);
                }
            }
        }
        Descendants { members }
    }

    /// Those still alive and outside process group `pgid`.
    pub(crate) fn escaped_from(&self, pgid: u32) -> Vec<u32> {
        self.members
            .iter()
            .filter(|(_, fd)| !super::group::is_readable(fd))
            .filter(|(pid, _)| super::group::process_group_of(*pid).is_some_and(|g| g != pgid))
            .map(|(pid, _)| *pid)
            .collect()
    }
}

/// The pids in `/proc/PID/task/*/children` (children of each of `pid`'s threads).
fn children_of(pid: u32) -> io::Result<Vec<u32>> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Ok(task) = task else { continue };
        let Ok(text) = crate::base::kernel_text::read(task.path().join("children")) else {
            continue;
        };
        found.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    Ok(found)
}
