//! Process groups: signalling the group a child leads, and finding members that outlive it.
//!
//! Race avoided (killpg on a stale group): a process-group id is the leader's pid. Once the
//! leader is reaped and the last member is gone, the id may be recycled and `killpg` would hit
//! a stranger's group. We therefore keep the leader an unreaped zombie (observed with
//! `WNOWAIT`) for as long as we signal its group: a zombie's pid cannot be reused, so the id
//! stays ours. We also never pass 0 or 1 to `killpg` (0 means *our own* group, and group 1 is
//! init's); a child whose pid is one of those is not a group we created.
//!
//! Survivors (Linux): after the leader exits, the members still in the group are found in
//! `/proc/*/stat`, each opened as a pidfd and checked again (a pid recycled between the scan
//! and `pidfd_open` is not in our group), and their pidfds are polled until the rung's deadline.
//! Elsewhere, members that outlive the leader cannot be listed; they get the signals sent while
//! the leader was alive, and the report says the group may survive.

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use rustix::process::kill_process_group;
#[cfg(target_os = "linux")]
use rustix::process::Pid;

use crate::signal::Signal;
use crate::sys;

/// `killpg(2)` on the group `pgid` that our child leads. Returns whether anyone was signalled.
pub(crate) fn signal(pgid: u32, signal: Signal) -> io::Result<bool> {
    if pgid <= 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}: not a group we created"),
        ));
    }
    let pgid = super::pid(pgid)?;
    match kill_process_group(pgid, sys::rustix_signal(signal)?) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::SRCH) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Group members other than the leader that were alive at the last look.
#[derive(Debug, Default)]
pub(crate) struct Survivors {
    #[cfg(target_os = "linux")]
    members: Vec<(u32, OwnedFd)>,
}

impl Survivors {
    pub(crate) fn is_empty(&self) -> bool {
        self.pids().is_empty()
    }

    #[cfg(target_os = "linux")]
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.members.iter().map(|(pid, _)| *pid).collect()
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn pids(&self) -> Vec<u32> {
        Vec::new()
    }

    /// Looks again at who is left in group `pgid` (led by `pgid` itself).
    #[cfg(target_os = "linux")]
    pub(crate) fn refresh(&mut self, pgid: u32) -> io::Result<()> {
        // Members already known and still running keep their pidfd; a readable pidfd has exited.
        self.members.retain(|(_, fd)| !is_readable(fd));
        for pid in members_in_proc(pgid)? {
            if self.members.iter().any(|(p, _)| *p == pid) {
                continue;
            }
            let Some(raw) = Pid::from_raw(pid as i32) else {
                continue;
            };
            let Ok(fd) = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty())
            else {
                continue; // exited meanwhile
            };
            // Re-check after opening: the pidfd now pins this exact process.
            if process_group_of(pid) == Some(pgid) && !is_readable(&fd) {
                self.members.push((pid, fd));
            }
        }
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn refresh(&mut self, _pgid: u32) -> io::Result<()> {
        Ok(())
    }

    /// The survivors' pidfds (readable once each exits).
    #[cfg(target_os = "linux")]
    pub(crate) fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        self.members.iter().map(|(_, fd)| fd.as_fd()).collect()
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        Vec::new()
    }

    /// Waits until a known survivor exits or `deadline` passes.
    #[cfg(target_os = "linux")]
    pub(crate) fn wait_until(&self, deadline: Instant) -> io::Result<()> {
        let fds: Vec<_> = self.members.iter().map(|(_, fd)| fd.as_fd()).collect();
        super::pidfd::poll_until(&fds, deadline)
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn wait_until(&self, deadline: Instant) -> io::Result<()> {
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        Ok(())
    }
}

/// A pidfd is readable once its process has exited.
#[cfg(target_os = "linux")]
pub(crate) fn is_readable(fd: &OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut pfd = [PollFd::new(fd, PollFlags::IN)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut pfd, Some(&zero)), Ok(n) if n > 0)
}

/// Pids in `/proc` whose process group is `pgid`, other than `pgid` itself, not zombies.
#[cfg(target_os = "linux")]
fn members_in_proc(pgid: u32) -> io::Result<Vec<u32>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != pgid && process_group_of(pid) == Some(pgid) {
            found.push(pid);
        }
    }
    Ok(found)
}

/// The process group of a live (non-zombie) process, from `/proc/PID/stat`.
#[cfg(target_os = "linux")]
pub(crate) fn process_group_of(pid: u32) -> Option<u32> {
    let (state, pgrp) = state_and_group(pid)?;
    (state != 'Z' && state != 'X').then_some(pgrp)
}

/// The state letter (`Z` for a zombie) and process group of `pid`, from `/proc/PID/stat`;
/// `None` once the pid is free.
#[cfg(target_os = "linux")]
pub(crate) fn state_and_group(pid: u32) -> Option<(char, u32)> {
    stat_fields(pid).map(|(state, _, group)| (state, group))
}

/// The parent of `pid` (`/proc/PID/stat` field 4), if it exists.
#[cfg(target_os = "linux")]
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid).map(|(_, parent, _)| parent)
}

/// State, parent and process group of `pid`, from `/proc/PID/stat`.
#[cfg(target_os = "linux")]
fn stat_fields(pid: u32) -> Option<(char, u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain anything.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent, fields.next()?.parse().ok()?))
}
