//! [`Target`]: what a [`Climb`](super::climb::Climb) signals. The climb is one state machine
//! (which rung is due, what is skipped, what the report says); the target is who receives the
//! rungs:
//! - a [`Process`] we spawned and own (the close, the reaper, the tokio face): its pidfd, its
//!   process group, its cgroup;
//! - a [`Pinned`] process, named by a pidfd we hold but reaped by somebody else — the child of
//!   a handle, signalled from the event loop on a watchdog miss while the handle keeps the
//!   process (`handle/readiness/watchdog.rs`). One climb, two kinds of target: the watchdog
//!   does not climb a ladder of its own — and a process we did not spawn at all, left in a
//!   container at its stop (`sweep.rs`, for `childguard init`).

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::{AsFd, OwnedFd};

use crate::base::signal::Signal;
use crate::process::disposition::Disposition;
use crate::process::Process;

/// Whoever a climb's rungs go to.
pub(crate) trait Target {
    /// The pid, for tracing events.
    fn pid(&self) -> u32;
    /// Sends one rung's signal; whether anything was signalled, and how many processes the
    /// signal reached when known (see [`Process::signal_counting`]).
    fn signal_counting(&mut self, signal: Signal) -> io::Result<(bool, Option<usize>)>;
    /// Whether a signal goes to a process group.
    fn leads_group(&self) -> bool;
    /// Whether `signal` goes to every member of a cgroup.
    fn reaches_cgroup(&self, signal: Signal) -> bool;
    /// What the process does with `signal` now (`None`: unknown, or not catchable).
    fn disposition(&self, signal: Signal) -> Option<Disposition>;
    /// The process, when we own it: only an owned child gets a memory release after its
    /// `SIGKILL` rung (`release.rs` sizes it through what the process knows of itself).
    fn owned(&mut self) -> Option<&mut Process>;
    /// Whether the main process has exited while the climb goes on: others remain (its group,
    /// its cgroup), whom the next signal reaches ([`Climb`](super::climb::Climb) passes them the
    /// rung that ended the main). A pinned process is the whole target: never.
    fn main_exited(&self) -> bool {
        false
    }
}

impl Target for Process {
    fn pid(&self) -> u32 {
        Process::pid(self)
    }
    fn signal_counting(&mut self, signal: Signal) -> io::Result<(bool, Option<usize>)> {
        Process::signal_counting(self, signal)
    }
    fn leads_group(&self) -> bool {
        Process::leads_group(self)
    }
    fn reaches_cgroup(&self, signal: Signal) -> bool {
        Process::reaches_cgroup(self, signal)
    }
    fn disposition(&self, signal: Signal) -> Option<Disposition> {
        Process::disposition(self, signal)
    }
    fn owned(&mut self) -> Option<&mut Process> {
        Some(self)
    }
    fn main_exited(&self) -> bool {
        !self.is_running()
    }
}

/// A process named by a pidfd we hold, which somebody else reaps (the handle that owns the
/// child). Its rungs go to it through the pidfd, or to its process group when it leads one.
///
/// Race avoided (*a group id recycled*): the group is signalled only while the pidfd says the
/// leader has not exited. The leader's owner keeps it an unreaped zombie until its close
/// (`process/group.rs`), and the climb on a pinned target is stopped before that close
/// begins (`watchdog.rs`, `Shared::stop`), so the group id is still the leader's.
#[cfg(target_os = "linux")]
#[derive(Debug)]
pub(crate) struct Pinned {
    pidfd: OwnedFd,
    pid: u32,
    group: bool,
}

#[cfg(target_os = "linux")]
impl Pinned {
    /// `pidfd` names `pid`; `group`: signal its process group (it leads one).
    pub(crate) fn new(pidfd: OwnedFd, pid: u32, group: bool) -> Pinned {
        Pinned { pidfd, pid, group }
    }

    /// The pidfd.
    pub(crate) fn pidfd(&self) -> &OwnedFd {
        &self.pidfd
    }

    /// Whether the process has exited (its pidfd readable; a zombie counts).
    pub(crate) fn exited(&self) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            &self.pidfd,
            rustix::event::PollFlags::IN,
        )];
        let now = rustix::event::Timespec::default();
        matches!(rustix::event::poll(&mut fds, Some(&now)), Ok(n) if n > 0)
    }
}

#[cfg(target_os = "linux")]
impl Target for Pinned {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn signal_counting(&mut self, signal: Signal) -> io::Result<(bool, Option<usize>)> {
        if signal == Signal::NONE || self.exited() {
            return Ok((false, Some(0)));
        }
        let sig = crate::sys::rustix_signal(signal)?;
        let sent = if self.group {
            rustix::process::kill_process_group(crate::process::pid(self.pid)?, sig)
                .map(|()| (true, None))
        } else {
            rustix::process::pidfd_send_signal(self.pidfd.as_fd(), sig).map(|()| (true, Some(1)))
        };
        match sent {
            Ok(sent) => Ok(sent),
            // Exited between the check and the signal: nothing to do.
            Err(rustix::io::Errno::SRCH) => Ok((false, Some(0))),
            Err(e) => Err(e.into()),
        }
    }

    fn leads_group(&self) -> bool {
        self.group
    }

    fn reaches_cgroup(&self, _signal: Signal) -> bool {
        false
    }

    /// Read from `/proc/PID/status`, kept only if the pidfd says the process still runs after
    /// the read: then the pid named it during the whole read (race avoided: *the status of a
    /// pid recycled after the process was reaped*).
    fn disposition(&self, signal: Signal) -> Option<Disposition> {
        if self.exited() {
            return None;
        }
        let read = crate::process::disposition::of_pid(self.pid, signal);
        if self.exited() {
            return None;
        }
        read
    }

    fn owned(&mut self) -> Option<&mut Process> {
        None
    }
}
