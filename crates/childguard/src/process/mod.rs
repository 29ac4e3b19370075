//! [`Process`]: one child we spawned, observed and signalled without ever touching a stranger.
//!
//! Two mechanisms, one file each:
//! - [`pidfd`] (Linux ≥ 5.4): signal through `pidfd_send_signal`, wait by polling the pidfd,
//!   reap through `waitid(P_PIDFD)`.
//! - [`sigchld`] (other Unix, or wherever `pidfd_open` or `waitid(P_PIDFD)` fails: an old
//!   kernel, a seccomp profile): `kill` + `waitid(P_PID)` woken by a process-wide `SIGCHLD`
//!   notifier built on signal-hook.
//!
//! In both, a group leader is first observed with `WNOWAIT`, so it stays a zombie (and its pid
//! and process-group id stay ours) until [`Process::reap`]. That is what makes signalling the
//! group after the leader exited safe; see [`group`]. A child that leads no group is reaped by
//! the `waitid` that first sees it exited: after that we never use its pid again.

#[cfg(target_os = "linux")]
pub(crate) mod descendants;
pub(crate) mod disposition;
pub(crate) mod group;
#[cfg(target_os = "linux")]
pub(crate) mod pidfd;
pub(crate) mod sigchld;
// Moved here by the layering (issue 21 item 5): below everything that observes a child.
mod cgroup;
#[cfg(target_os = "linux")]
mod container;
pub(crate) mod containment;
mod exit;
mod orphan;
#[cfg(all(test, target_os = "linux"))]
mod tests;
mod tree;
mod waits;

pub(crate) use waits::WaitOn;

use std::io;
use std::process::ExitStatus;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use crate::base::signal::Signal;
#[cfg(target_os = "linux")]
use crate::process::containment::create::Cgroup;
#[cfg(target_os = "linux")]
use crate::process::containment::KillMode;

/// Where the child is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Life {
    Running,
    /// Exited (a group leader we keep a zombie until [`Process::reap`]), with its status.
    Exited(ExitStatus),
    /// Reaped by us: the pid is free again and must never be signalled.
    Reaped(ExitStatus),
    /// Reaped by somebody else (`waitpid(-1)` elsewhere in the program): status lost.
    Lost,
}

#[derive(Debug)]
enum Mechanism {
    #[cfg(target_os = "linux")]
    Pidfd(pidfd::PidFd),
    /// The portable mechanism; on Linux, with the pidfd failure that sent us here (`None`:
    /// asked for with `force_portable`).
    Sigchld(Option<Fallback>),
}

/// Why a child on Linux is supervised without a pidfd.
#[cfg(target_os = "linux")]
type Fallback = pidfd::Unusable;
#[cfg(not(target_os = "linux"))]
type Fallback = std::convert::Infallible;

/// A spawned child and, with `process_group`, the group it leads.
#[derive(Debug)]
pub(crate) struct Process {
    pid: u32,
    /// The process that spawned the child: its parent, the only one that may signal, wait for
    /// or tear down anything of it (see [`Process::is_inherited`]).
    owner: u32,
    /// Taken before the fork: the child is no older than this.
    spawn_began: Instant,
    leads_group: bool,
    mechanism: Mechanism,
    life: Life,
    exited_at: Option<Instant>,
    survivors: group::Survivors,
    /// `SIGCHLD` generation read before the last [`Process::check_exit`] (portable mechanism,
    /// or a pidfd child whose exit a tracer holds).
    sigchld_seen: u64,
    /// Containment: the child's own cgroup, and who gets the catchable rungs.
    #[cfg(target_os = "linux")]
    cgroup: Option<(Cgroup, KillMode)>,
    /// Containment by a tree init (`containment/tree_init`): the process is the tree init,
    /// the tree its server's.
    #[cfg(target_os = "linux")]
    tree: Option<(containment::tree_init::Tree, KillMode)>,
    /// Containment by a container engine (`containment/container`): the process is the
    /// engine's client, the tree its container.
    #[cfg(target_os = "linux")]
    container: Option<containment::container::Container>,
    /// A group leader's descendants when its close began (uncontained; for `escaped`).
    #[cfg(target_os = "linux")]
    descendants: Option<descendants::Descendants>,
    /// The leader's pidfd was seen readable since the last `waitid` (set by whoever waited
    /// on it: [`Process::wait_until`], the reaper's epoll, the tokio face).
    readable_seen: AtomicBool,
    /// The pidfd said "exited" but `waitid` found nothing: a tracer holds the zombie. Waits go
    /// to the `SIGCHLD` notifier instead of the (always readable) pidfd.
    held_by_tracer: bool,
}

impl Process {
    /// Takes over the unreaped child `pid`.
    ///
    /// Invariant relied on: between `fork` and this call nobody reaps the child (we hold its
    /// `std::process::Child`, and `SIGCHLD` is neither `SIG_IGN` nor `SA_NOCLDWAIT` — checked
    /// before spawning), so `pid` still names our child and `pidfd_open` cannot hit a recycled
    /// pid. The pidfd is then verified with `waitid(WNOWAIT)`, which fails with `ECHILD` for
    /// anything that is not our child.
    ///
    /// `spawn_began`: an instant before the fork that made the child; `pidfd`: the one `clone3`
    /// gave at its birth (our own spawn), if any.
    pub(crate) fn adopt(
        pid: u32,
        pidfd: Option<std::os::fd::OwnedFd>,
        spawn_began: Instant,
        leads_group: bool,
        portable: bool,
    ) -> io::Result<Process> {
        let mechanism = Self::mechanism_for(pid, pidfd, portable)?;
        crate::base::trace::spawned(pid);
        Ok(Process {
            pid,
            owner: std::process::id(),
            spawn_began,
            leads_group,
            mechanism,
            life: Life::Running,
            exited_at: None,
            survivors: group::Survivors::default(),
            sigchld_seen: 0,
            #[cfg(target_os = "linux")]
            cgroup: None,
            #[cfg(target_os = "linux")]
            tree: None,
            #[cfg(target_os = "linux")]
            container: None,
            #[cfg(target_os = "linux")]
            descendants: None,
            readable_seen: AtomicBool::new(false),
            held_by_tracer: false,
        })
    }

    /// Race avoided (no pidfd after all): `pidfd_open` can work while `waitid(P_PIDFD)` does
    /// not (Linux 5.3: `EINVAL`), and a seccomp profile may answer `EPERM` to either. Any
    /// failure of the two sends this child to the portable mechanism rather than failing the
    /// spawn; a failure that holds for the whole process is remembered, so later spawns go
    /// there at once (see [`pidfd::PidFd::open_child`]).
    #[cfg(target_os = "linux")]
    fn mechanism_for(
        pid: u32,
        born: Option<std::os::fd::OwnedFd>,
        portable: bool,
    ) -> io::Result<Mechanism> {
        let fallback = if portable {
            None
        } else {
            match pidfd::PidFd::open_child(pid, born) {
                Ok(fd) => return Ok(Mechanism::Pidfd(fd)),
                Err(unusable) => Some(unusable),
            }
        };
        crate::core::sigchld::notifier()?;
        Ok(Mechanism::Sigchld(fallback))
    }

    #[cfg(not(target_os = "linux"))]
    fn mechanism_for(
        _pid: u32,
        _born: Option<std::os::fd::OwnedFd>,
        _portable: bool,
    ) -> io::Result<Mechanism> {
        crate::core::sigchld::notifier()?;
        Ok(Mechanism::Sigchld(None))
    }

    /// Says which mechanism supervises the child, when it is not the one asked for: a child
    /// on Linux that fell back to `kill` + `SIGCHLD` because pidfds failed. `None` otherwise.
    pub(crate) fn fallback_note(&self) -> Option<String> {
        match &self.mechanism {
            #[cfg(target_os = "linux")]
            Mechanism::Sigchld(Some(f)) => Some(format!(
                "supervised without a pidfd (kill + waitid(P_PID), woken by SIGCHLD): {} failed \
                 with {}{}",
                f.step,
                io::Error::from_raw_os_error(f.errno),
                if f.cached {
                    ", taken as holding for this whole process"
                } else {
                    ""
                }
            )),
            _ => None,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether this is a copy made by `fork()` without `exec` in a process that did not spawn
    /// the child: a copy of the parent's handle, naming the parent's child, socket, cgroup and
    /// guardian. Nothing may be done through it — not even a "harmless" signal: a pidfd (or
    /// `cgroup.kill`) reaches the parent's child from anywhere — only its fd copies let go.
    pub(crate) fn is_inherited(&self) -> bool {
        self.owner != std::process::id()
    }

    /// The process that spawned the child.
    pub(crate) fn owner(&self) -> u32 {
        self.owner
    }

    /// An upper bound on how long the child has existed.
    pub(crate) fn max_age(&self) -> Duration {
        self.spawn_began.elapsed()
    }

    pub(crate) fn exited_at(&self) -> Option<Instant> {
        self.exited_at
    }

    pub(crate) fn leads_group(&self) -> bool {
        self.leads_group
    }

    pub(crate) fn uses_pidfd(&self) -> bool {
        !matches!(self.mechanism, Mechanism::Sigchld(_))
    }

    /// The leader's status once it has exited (reaped or not).
    pub(crate) fn status(&self) -> Option<ExitStatus> {
        match self.life {
            Life::Exited(s) | Life::Reaped(s) => Some(s),
            Life::Running | Life::Lost => None,
        }
    }

    /// Whether the leader is still running (not exited, not reaped).
    pub(crate) fn is_running(&self) -> bool {
        self.life == Life::Running
    }

    /// Sends `signal` to the child, or to its whole group while we still hold the group id.
    /// Returns whether anything was signalled. Never signals after the leader was reaped.
    pub(crate) fn signal(&mut self, signal: Signal) -> io::Result<bool> {
        self.signal_counting(signal).map(|(sent, _)| sent)
    }

    /// [`Process::signal`], also saying how many processes the signal reached when that is
    /// known (a contained child's cgroup, or a child that leads no group).
    ///
    /// Contained ([`KillMode`]): `SIGKILL` goes to the whole cgroup through `cgroup.kill`,
    /// whether or not the leader is still alive; a catchable signal goes to every member with
    /// `ControlGroup`, and with `Mixed` as without containment (the leader, or its group)
    /// while the leader runs, to every member left once it has exited.
    pub(crate) fn signal_counting(&mut self, signal: Signal) -> io::Result<(bool, Option<usize>)> {
        if signal == Signal::NONE {
            // Signal 0 sends nothing (a waiting rung): no process is signalled, and the raw
            // calls below never see it.
            return Ok((false, Some(0)));
        }
        #[cfg(target_os = "linux")]
        if let Some(sent) = self.signal_container(signal) {
            return sent;
        }
        if let Some(killed) = self.kill_tree(signal) {
            return killed;
        }
        #[cfg(target_os = "linux")]
        if let Some((cgroup, mode)) = &self.cgroup {
            if signal == Signal::KILL {
                let n = containment::kill::kill_all(cgroup)?;
                return Ok((n > 0, Some(n)));
            }
            // The main process gone (a launcher that exited, or died of this ladder), no
            // process is left to pass a catchable rung on: with `Mixed` too it goes to every
            // member left ("No grace waited for a launcher gone", docs/design.md).
            if *mode == KillMode::ControlGroup || !self.is_running() {
                let n = containment::members::signal_each(cgroup, signal)?;
                return Ok((n > 0, Some(n)));
            }
        }
        match self.life {
            Life::Reaped(_) | Life::Lost => return Ok((false, Some(0))),
            Life::Running | Life::Exited(_) => {}
        }
        if self.leads_group {
            // The leader is alive or an unreaped zombie, so its pid — our group id — cannot
            // have been recycled: killpg reaches only our group (never 0 or 1: see `group`).
            let sent = group::signal(self.pid, signal).map(|sent| (sent, None));
            // A rung deadline: members may answer by forking; list the group again.
            self.survivors.mark_stale();
            return sent;
        }
        if !self.is_running() {
            return Ok((false, Some(0)));
        }
        let sent = match &self.mechanism {
            #[cfg(target_os = "linux")]
            Mechanism::Pidfd(fd) => fd.send(signal),
            Mechanism::Sigchld(_) => sigchld::send(self.pid, signal),
        };
        match sent {
            Ok(()) => Ok((true, Some(1))),
            // Exited between our check and the signal: nothing to do.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok((false, Some(0))),
            Err(e) => Err(e),
        }
    }

    /// Whether `signal` goes to every member of the child's cgroup (contained: `KILL`, or any
    /// signal with `KillMode::ControlGroup`).
    pub(crate) fn reaches_cgroup(&self, signal: Signal) -> bool {
        // A container's rungs go to it whole, through its engine.
        #[cfg(target_os = "linux")]
        if self.container.is_some() {
            return true;
        }
        #[cfg(target_os = "linux")]
        if let Some((_, mode)) = &self.cgroup {
            return signal == Signal::KILL || *mode == KillMode::ControlGroup || !self.is_running();
        }
        if let Some(reaches) = self.tree_reaches_all(signal) {
            return reaches;
        }
        let _ = signal;
        false
    }

    /// At the start of a close: for a group leader without containment, lists its
    /// descendants (pinned by pidfds), so that those that left the group (`setsid`) and
    /// outlive the ladder can be reported ([`Process::escaped_pids`]). Costs a read of
    /// `/proc/PID/task/*/children` per process in the tree; nothing for other children.
    pub(crate) fn snapshot_descendants(&mut self) {
        #[cfg(target_os = "linux")]
        if self.leads_group && self.cgroup.is_none() && self.is_running() {
            self.descendants = Some(descendants::Descendants::snapshot(self.pid));
        }
    }

    /// Descendants seen when the close began that are alive and outside the child's process
    /// group now: what `killpg` could not reach.
    pub(crate) fn escaped_pids(&self) -> Vec<u32> {
        #[cfg(target_os = "linux")]
        if let Some(d) = &self.descendants {
            return d.escaped_from(self.pid);
        }
        Vec::new()
    }

    fn holds_group_id(&self) -> bool {
        self.holds_pid()
    }

    /// Whether the child is not reaped yet (running, or a zombie we keep): somebody must still
    /// reap it.
    pub(crate) fn holds_pid(&self) -> bool {
        matches!(self.life, Life::Running | Life::Exited(_))
    }

    /// Why the group's members could not be listed at the last look, if they could not:
    /// survivors we do not know of may then exist.
    pub(crate) fn survivors_unlisted(&self) -> Option<&io::Error> {
        self.survivors.unlisted()
    }

    /// `deadline`, or sooner when something we wait for has no fd to wake us (group members
    /// without a pidfd, looked at in `/proc` now and then).
    pub(crate) fn wake_by(&self, deadline: Instant) -> Instant {
        #[cfg(target_os = "linux")]
        let deadline = self.container_wake_by(deadline);
        if self.is_running() {
            deadline
        } else {
            self.survivors.wake_by(deadline)
        }
    }

    /// Pids of group members still alive (last seen), for the report.
    pub(crate) fn survivor_pids(&self) -> Vec<u32> {
        #[cfg(target_os = "linux")]
        if let Some((cgroup, _)) = &self.cgroup {
            if cgroup.is_removed() || !cgroup.populated() {
                return Vec::new();
            }
            let leader = self.pid;
            return containment::members::pids(cgroup)
                .map(|pids| pids.into_iter().filter(|&p| p != leader).collect())
                .unwrap_or_default();
        }
        self.survivors.pids()
    }
}

/// `waitid(id, WEXITED | WNOHANG)`, plus `WNOWAIT` unless `reap`: the exit status if the
/// child exited. With `reap` the same call reaps it; without, it stays a zombie.
pub(crate) fn observe_exit(
    id: rustix::process::WaitId<'_>,
    reap: bool,
) -> io::Result<Option<ExitStatus>> {
    use rustix::process::WaitIdOptions;
    let mut options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
    if !reap {
        options |= WaitIdOptions::NOWAIT;
    }
    let status = rustix::process::waitid(id, options)?;
    Ok(status.as_ref().and_then(exit_status))
}

/// The [`ExitStatus`] in a `waitid` result, if it reports an exit (with `WNOHANG`, a child
/// that has not exited yields a zeroed siginfo, which is neither exited nor killed).
pub(crate) fn exit_status(s: &rustix::process::WaitIdStatus) -> Option<ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    if !(s.exited() || s.killed() || s.dumped()) {
        return None;
    }
    let raw = match (s.exit_status(), s.terminating_signal()) {
        (Some(code), _) => (code & 0xff) << 8,
        (None, Some(sig)) => (sig & 0x7f) | if s.dumped() { 0x80 } else { 0 },
        (None, None) => 0,
    };
    Some(ExitStatus::from_raw(raw))
}

/// A pid of ours as rustix's type (`EINVAL` for 0, which no child has).
pub(crate) fn pid(pid: u32) -> io::Result<rustix::process::Pid> {
    rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
}
