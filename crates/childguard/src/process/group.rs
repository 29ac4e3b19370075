//! Process groups: signalling the group a child leads, and finding members that outlive it.
//!
//! Race avoided (killpg on a stale group): a process-group id is the leader's pid. Once the
//! leader is reaped and the last member is gone, the id may be recycled and `killpg` would hit
//! a stranger's group. We therefore keep the leader an unreaped zombie (observed with
//! `WNOWAIT`) for as long as we signal its group: a zombie's pid cannot be reused, so the id
//! stays ours. We also never pass 0 or 1 to `killpg` (0 means *our own* group, and group 1 is
//! init's); a child whose pid is one of those is not a group we created. The leader is released
//! only once no member is known to be alive — so a member we cannot see must not be taken as
//! gone: see [`Survivors`].
//!
//! Survivors (Linux): after the leader exits, the members still in the group are found in
//! `/proc/*/stat`. Each is opened as a pidfd and checked again (a pid recycled between the scan
//! and `pidfd_open` is not in our group), and from then on it is alive until its pidfd turns
//! readable — not until `/proc` shows it as a zombie: a member whose main thread exited while
//! other threads run shows state `Z` but still runs (and holds the socket). Where `pidfd_open`
//! fails (a kernel without it, a seccomp filter, no fd left), a member is tracked by its pid
//! *and its start time* from `/proc/PID/stat` instead: a recycled pid has a later start time,
//! so it is never taken for the member (and never keeps the leader waiting).
//!
//! `/proc` is listed only when the group may have changed in a way no pidfd shows: when the
//! leader's exit is first seen, after each rung is sent to the group (at the rung deadlines),
//! and to confirm that the group is empty once no known member is left. In between, known
//! members are watched through their pidfds (on a host with 30 000 processes a listing costs
//! ~0.3 s). A listing that fails (`/proc` unreadable, `EMFILE`) is not fatal: the members we
//! know are still watched, and for the rest the close says survivors may exist, as it does off
//! Linux.
//!
//! Elsewhere, members that outlive the leader cannot be listed; they get the signals sent while
//! the leader was alive, and the report says the group may survive.

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::{AsFd, OwnedFd};
#[cfg(target_os = "linux")]
use std::time::Duration;
use std::time::Instant;

use rustix::process::kill_process_group;

use crate::base::signal::Signal;
use crate::failpoint::{self, Point};
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
    failpoint::check(Point::KillProcessGroup)?;
    match kill_process_group(pgid, sys::rustix_signal(signal)?) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::SRCH) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// How often members without a pidfd are looked at again in `/proc` (nothing wakes us when
/// they exit). Only on the fallback where `pidfd_open` fails.
#[cfg(target_os = "linux")]
const UNPINNED_RECHECK: Duration = Duration::from_millis(20);

/// One group member other than the leader.
#[cfg(target_os = "linux")]
#[derive(Debug)]
struct Member {
    pid: u32,
    /// Start time from `/proc/PID/stat` (clock ticks after boot): with the pid, it names this
    /// process and no later one.
    start: u64,
    /// Its pidfd, when `pidfd_open` worked: readable once the whole process has exited.
    pidfd: Option<OwnedFd>,
}

#[cfg(target_os = "linux")]
impl Member {
    fn is_alive(&self, pgid: u32) -> bool {
        match &self.pidfd {
            Some(fd) => !is_readable(fd),
            None => stat(self.pid)
                .is_some_and(|s| s.start == self.start && s.group == pgid && s.is_running()),
        }
    }
}

/// Group members other than the leader that were alive at the last look.
#[derive(Debug)]
pub(crate) struct Survivors {
    #[cfg(target_os = "linux")]
    members: Vec<Member>,
    /// `/proc` must be listed again before `members` may be taken as the whole group.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    stale: bool,
    /// Why the last listing failed, if it did: members may exist that we do not know of.
    unlisted: Option<io::Error>,
}

impl Default for Survivors {
    fn default() -> Survivors {
        Survivors {
            #[cfg(target_os = "linux")]
            members: Vec::new(),
            stale: true,
            unlisted: None,
        }
    }
}

impl Survivors {
    pub(crate) fn is_empty(&self) -> bool {
        self.pids().is_empty()
    }

    #[cfg(target_os = "linux")]
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.pid).collect()
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn pids(&self) -> Vec<u32> {
        Vec::new()
    }

    /// Why the group could not be listed the last time we tried (`None`: it could, or it
    /// never needed to be). Members unknown to us may then be alive.
    pub(crate) fn unlisted(&self) -> Option<&io::Error> {
        self.unlisted.as_ref()
    }

    /// The group may have changed where no pidfd shows it (a rung was sent, which a member may
    /// answer by forking): list it again at the next [`Survivors::refresh`].
    pub(crate) fn mark_stale(&mut self) {
        self.stale = true;
    }

    /// Looks again at who is left in group `pgid` (led by `pgid` itself): drops known members
    /// that exited, and lists `/proc` if the group is stale or no known member is left.
    #[cfg(target_os = "linux")]
    pub(crate) fn refresh(&mut self, pgid: u32) {
        self.members.retain(|m| m.is_alive(pgid));
        if self.members.is_empty() {
            self.stale = true; // confirm that the group is empty before we say so
        }
        if !self.stale {
            return;
        }
        match self.list(pgid) {
            Ok(()) => {
                self.stale = false;
                self.unlisted = None;
            }
            // Stays stale: the next refresh tries again.
            Err(e) => self.unlisted = Some(e),
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn refresh(&mut self, _pgid: u32) {}

    /// Adds every member of `pgid` in `/proc` that we do not know yet.
    #[cfg(target_os = "linux")]
    fn list(&mut self, pgid: u32) -> io::Result<()> {
        for (pid, start) in members_in_proc(pgid)? {
            if self
                .members
                .iter()
                .any(|m| m.pid == pid && m.start == start)
            {
                continue;
            }
            let Some(raw) = rustix::process::Pid::from_raw(pid as i32) else {
                continue;
            };
            let opened = failpoint::check(Point::MemberPidfdOpen).and_then(|()| {
                Ok(rustix::process::pidfd_open(
                    raw,
                    rustix::process::PidfdFlags::empty(),
                )?)
            });
            let member = match opened {
                // Re-check after opening: the pidfd now pins this exact process, and the same
                // start time proves it is the one we listed, still in our group.
                Ok(fd) => {
                    let same = stat(pid).is_some_and(|s| s.start == start && s.group == pgid);
                    (same && !is_readable(&fd)).then_some(Member {
                        pid,
                        start,
                        pidfd: Some(fd),
                    })
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => None, // exited meanwhile
                // No pidfd for it (ENOSYS, EPERM from a filter, EMFILE): track it by pid and
                // start time, checked in `/proc` every UNPINNED_RECHECK.
                Err(_) => {
                    let member = Member {
                        pid,
                        start,
                        pidfd: None,
                    };
                    member.is_alive(pgid).then_some(member)
                }
            };
            self.members.extend(member);
        }
        Ok(())
    }

    /// The survivors' pidfds (readable once each exits).
    #[cfg(target_os = "linux")]
    pub(crate) fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        self.members
            .iter()
            .filter_map(|m| m.pidfd.as_ref().map(|fd| fd.as_fd()))
            .collect()
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        Vec::new()
    }

    /// `deadline`, or sooner if a member has no pidfd and must be looked at in `/proc`.
    #[cfg(target_os = "linux")]
    pub(crate) fn wake_by(&self, deadline: Instant) -> Instant {
        if self.members.iter().any(|m| m.pidfd.is_none()) {
            deadline.min(Instant::now() + UNPINNED_RECHECK)
        } else {
            deadline
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn wake_by(&self, deadline: Instant) -> Instant {
        deadline
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

/// Pids in `/proc` whose process group is `pgid`, other than `pgid` itself, with their start
/// times. Zombies included: whether a member still runs is for its pidfd to say.
#[cfg(target_os = "linux")]
fn members_in_proc(pgid: u32) -> io::Result<Vec<(u32, u64)>> {
    failpoint::check(Point::ProcList)?;
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
        if pid == pgid {
            continue;
        }
        if let Some(s) = stat(pid).filter(|s| s.group == pgid) {
            found.push((pid, s.start));
        }
    }
    Ok(found)
}

/// What `/proc/PID/stat` says about a process.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stat {
    /// The state letter (`Z` for a zombie — or a process whose main thread exited while
    /// others run).
    pub(crate) state: char,
    /// The parent.
    pub(crate) parent: u32,
    /// The process group.
    pub(crate) group: u32,
    /// Threads, counting an exited main thread that still holds the process id.
    pub(crate) threads: u64,
    /// Start time after boot, in clock ticks.
    pub(crate) start: u64,
}

#[cfg(target_os = "linux")]
impl Stat {
    /// Whether any thread of it still runs: not dead, and not a zombie — unless a zombie main
    /// thread is all that exited (a whole-process zombie counts one thread, itself).
    pub(crate) fn is_running(&self) -> bool {
        match self.state {
            'X' | 'x' => false,
            'Z' => self.threads > 1,
            _ => true,
        }
    }
}

/// `/proc/PID/stat` of `pid`, parsed; `None` once the pid is free.
#[cfg(target_os = "linux")]
pub(crate) fn stat(pid: u32) -> Option<Stat> {
    let text = crate::base::kernel_text::read(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The process group of `pid` while any thread of it runs (`None` once it is a whole-process
/// zombie or gone; a zombie main thread with live threads still runs: see [`Stat::is_running`]).
#[cfg(target_os = "linux")]
pub(crate) fn process_group_of(pid: u32) -> Option<u32> {
    stat(pid).filter(Stat::is_running).map(|s| s.group)
}

/// The parent of `pid` (`/proc/PID/stat` field 4), if it exists.
#[cfg(target_os = "linux")]
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    stat(pid).map(|s| s.parent)
}

/// Parses the text of a `/proc/PID/stat` (see proc_pid_stat(5)).
#[cfg(target_os = "linux")]
fn parse_stat(text: &str) -> Option<Stat> {
    // Fields after the command name, which is in parentheses and may contain anything: field 3
    // (state) is the first of them.
    let rest = text.get(text.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split(' ').collect();
    let field = |n: usize| fields.get(n - 3).copied();
    Some(Stat {
        state: field(3)?.chars().next()?,
        parent: field(4)?.parse().ok()?,
        group: field(5)?.parse().ok()?,
        threads: field(20)?.parse().ok()?,
        start: field(22)?.parse().ok()?,
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_past_a_command_name_with_parentheses_and_spaces() {
        let text = "4242 (a) b (c) Z 1 4240 4240 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 987654 0 0";
        let s = parse_stat(text).expect("parses");
        assert_eq!(
            (s.state, s.parent, s.group, s.threads, s.start),
            ('Z', 1, 4240, 3, 987654)
        );
        assert!(
            s.is_running(),
            "a zombie main thread with live threads runs"
        );
        let whole_zombie = text.replace(" 20 0 3 0 ", " 20 0 1 0 ");
        assert!(!parse_stat(&whole_zombie).unwrap().is_running());
        assert!(parse_stat("4242 (x) R").is_none());
    }
}
