//! The tree init: containment without a cgroup. A small process of ours — a fork-like copy
//! of this thread, never an exec — stands between us and the server: the PID 1 of a new PID
//! namespace ([`pid_namespace`](super::pid_namespace)), or a subreaper
//! ([`subreaper`](super::subreaper)). It forks the server, and from then on:
//!
//! - the close's catchable rungs, sent to it, are forwarded to the server (its group, or
//!   with `KillMode::ControlGroup` every process of the tree); it reaps every orphan;
//! - when the server exits, the rest of the tree is killed (by the kernel in a namespace, by
//!   the tree init as a subreaper) and it exits, after sending the server's real wait status
//!   on the control socket — a namespace's init cannot die of the server's signal;
//! - the `KILL` rung ends the whole tree: `SIGKILL` to the namespace's init (the kernel kills
//!   every process in it), or a queued request to the subreaper, which kills its tree itself;
//! - with `exit_with_parent` it watches our pidfd, and ends the tree when we are gone, however
//!   we died.
//!
//! To the rest of childguard the tree init is the child: its pidfd is waited for and reaped,
//! signals go to it; the tree is empty once it is reaped. The pid users see
//! ([`ChildHandle::id`](crate::ChildHandle::id)) is the server's, as this namespace sees it.
//!
//! The control socket (`SOCK_SEQPACKET`) carries three messages from the tree init: `Started`
//! with the server's pidfd, `Failed` (the step and its errno) and `Exited` (the wait status).

mod life;

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::ExitStatus;

use super::Backend;
use crate::sys::tree_init::{self as sys, Forked};
use crate::sys::ChildPlan;

/// The queued request that ends a subreaper's tree: this signal with this `si_int`.
pub(super) const KILL_TREE_SIGNAL: i32 = 64;
pub(super) const KILL_TREE: i32 = 0x6b69_6c6c;

/// A message on the control socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Msg {
    /// The server exec'd, with its pid as we see it (0: unknown).
    Started(u32),
    /// The step (a `sys::Step`, or one of `life`'s `FAILED_*`) and its errno.
    Failed(u8, i32),
    /// The server's wait status.
    Exited(i32),
}

impl Msg {
    fn encode(self) -> [u8; 6] {
        match self {
            Msg::Started(pid) => {
                let p = pid.to_ne_bytes();
                [1, 0, p[0], p[1], p[2], p[3]]
            }
            Msg::Failed(step, e) => {
                let e = e.to_ne_bytes();
                [2, step, e[0], e[1], e[2], e[3]]
            }
            Msg::Exited(s) => {
                let s = s.to_ne_bytes();
                [3, 0, s[0], s[1], s[2], s[3]]
            }
        }
    }

    fn decode(bytes: &[u8]) -> Option<Msg> {
        let [kind, step, a, b, c, d] = *bytes else {
            return None;
        };
        let n = i32::from_ne_bytes([a, b, c, d]);
        match kind {
            1 => Some(Msg::Started(n as u32)),
            2 => Some(Msg::Failed(step, n)),
            3 => Some(Msg::Exited(n)),
            _ => None,
        }
    }
}

/// A tree that could not be had.
#[derive(Debug)]
pub(crate) enum NoTree {
    /// This backend is refused here (the kernel, a seccomp profile, no privilege): the next
    /// one may work.
    Refused(io::Error),
    /// The spawn failed as it would with any backend (the program is missing …).
    Failed(io::Error),
}

/// The tree init as the host holds it, beside the [`Process`](crate::process::Process) that
/// is the tree init itself.
#[derive(Debug)]
pub(crate) struct Tree {
    backend: Backend,
    server_pid: u32,
    #[allow(dead_code)] // Held: it pins the server's pid while the handle lives.
    server_pidfd: OwnedFd,
    ctl: OwnedFd,
    status: Option<i32>,
}

/// A tree init started, its server exec'd.
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) pid: u32,
    pub(crate) pidfd: OwnedFd,
    pub(crate) tree: Tree,
}

/// Starts a tree init of `backend` that runs `plan` as its server. `to_all`: catchable rungs
/// to every process of the tree; `group`: to the server's process group; `host_gone`: end
/// the tree when this process is gone.
pub(crate) fn start(
    backend: Backend,
    plan: &mut ChildPlan,
    to_all: bool,
    group: bool,
    host_gone: bool,
) -> Result<Started, NoTree> {
    let (ours, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| NoTree::Failed(e.into()))?;
    let host = if host_gone {
        let me = rustix::process::getpid();
        Some(
            rustix::process::pidfd_open(me, rustix::process::PidfdFlags::empty())
                .map_err(|e| NoTree::Refused(e.into()))?,
        )
    } else {
        None
    };
    let mut attempts = super::pid_namespace::ways(backend).into_iter().peekable();
    let (pid, pidfd) = loop {
        let Some((flags, maps)) = attempts.next() else {
            return Err(NoTree::Refused(io::Error::other(
                "no way to start the tree init",
            )));
        };
        let args = life::Args {
            backend,
            maps: maps.as_ref().map(|(u, g)| (u.as_slice(), g.as_slice())),
            ctl: theirs.as_fd(),
            host: host.as_ref().map(AsFd::as_fd),
            to_all,
            group,
        };
        match sys::clone_init(flags) {
            Ok(Forked::Child) => life::run(&args, plan),
            Ok(Forked::Parent(pid, Some(pidfd))) => break (pid as u32, pidfd),
            Ok(Forked::Parent(..)) => unreachable!("clone_init always gives a pidfd"),
            // Refused this way (root without CAP_SYS_ADMIN after all): the next one.
            Err(_) if attempts.peek().is_some() => {}
            Err(e) => {
                let e = io::Error::from_raw_os_error(e);
                return Err(NoTree::Refused(io::Error::new(
                    e.kind(),
                    format!("clone({}) refused: {e}", clone_flags(flags)),
                )));
            }
        }
    };
    drop(theirs);
    drop(host);
    match receive_start(&ours) {
        Ok((server_pidfd, sent)) => {
            // Race avoided (*a pid read after the reap*): the server may have exited, and the
            // tree init reaped it, before we read its pidfd's `fdinfo` (`Pid: -1` then). The
            // tree init read it from its own children before anything could reap it.
            let server_pid = if sent != 0 {
                sent
            } else {
                pid_of(&server_pidfd).unwrap_or(0)
            };
            Ok(Started {
                pid,
                pidfd,
                tree: Tree {
                    backend,
                    server_pid,
                    server_pidfd,
                    ctl: ours,
                    status: None,
                },
            })
        }
        Err(e) => {
            // The tree init failed (and said why) or died: reap it; nothing else is left (in
            // a namespace the kernel killed the rest; a failed server was reaped by it).
            let _ = rustix::process::waitid(
                rustix::process::WaitId::PidFd(pidfd.as_fd()),
                rustix::process::WaitIdOptions::EXITED,
            );
            Err(e)
        }
    }
}

/// The flags of the tree init's `clone`, as the error names them.
fn clone_flags(flags: std::ffi::c_long) -> &'static str {
    let user = flags & libc::CLONE_NEWUSER as std::ffi::c_long != 0;
    let pid = flags & libc::CLONE_NEWPID as std::ffi::c_long != 0;
    match (user, pid) {
        (true, true) => "CLONE_NEWUSER|CLONE_NEWPID",
        (false, true) => "CLONE_NEWPID",
        (true, false) => "CLONE_NEWUSER",
        (false, false) => "a plain fork",
    }
}

/// The first message: the server's pidfd and pid, or why the tree init failed.
fn receive_start(ctl: &OwnedFd) -> Result<(OwnedFd, u32), NoTree> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    use std::mem::MaybeUninit;
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut bytes = [0u8; 6];
    let received = loop {
        match rustix::net::recvmsg(
            ctl,
            &mut [io::IoSliceMut::new(&mut bytes)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other,
        }
    };
    let n = received.map_err(|e| NoTree::Failed(e.into()))?.bytes;
    let mut fd = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for received in fds {
                fd.get_or_insert(received);
            }
        }
    }
    match Msg::decode(&bytes[..n]) {
        Some(Msg::Started(pid)) => fd
            .map(|fd| (fd, pid))
            .ok_or_else(|| NoTree::Failed(io::Error::other("no pidfd"))),
        Some(Msg::Failed(step, errno)) => Err(failure(step, errno)),
        _ => Err(NoTree::Failed(io::Error::other(
            "the tree init ended before it started the server",
        ))),
    }
}

/// A `Failed` message as an error naming the step.
fn failure(step: u8, errno: i32) -> NoTree {
    let e = io::Error::from_raw_os_error(errno);
    let what = match step {
        life::FAILED_SIGNALFD => "signalfd in the tree init",
        life::FAILED_MAPS => "writing the user namespace's uid_map and gid_map",
        life::FAILED_SUBREAPER => "prctl(PR_SET_CHILD_SUBREAPER)",
        life::FAILED_FORK => "forking the server in the tree init",
        _ => {
            let step = crate::sys::step_from(step);
            if step == crate::sys::Step::Exec {
                return NoTree::Failed(e);
            }
            step.call()
        }
    };
    let refused = matches!(step, life::FAILED_MAPS | life::FAILED_SUBREAPER);
    let e = io::Error::new(e.kind(), format!("{what} failed: {e}"));
    if refused {
        NoTree::Refused(e)
    } else {
        NoTree::Failed(e)
    }
}

/// The pid a pidfd names, in our namespace (`Pid:` of its fdinfo).
fn pid_of(pidfd: &OwnedFd) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .and_then(|p| p.trim().parse().ok())
}

impl Tree {
    /// The server's pid, as this process sees it (0 if unknown).
    pub(crate) fn server_pid(&self) -> u32 {
        self.server_pid
    }

    /// Ends the whole tree, through the tree init's pidfd: see the module.
    pub(crate) fn kill(&self, init: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
        match self.backend {
            Backend::Subreaper => sys::queue_signal(init, KILL_TREE_SIGNAL, KILL_TREE),
            _ => rustix::process::pidfd_send_signal(init, rustix::process::Signal::KILL)
                .map_err(Into::into),
        }
    }

    /// Kills and reaps a tree init we could not adopt, by its pid (unreaped: still its own);
    /// in a namespace the kernel ends the rest, a subreaper's server gets its `SIGKILL`
    /// through the tree init's death only if it asked for a death signal.
    pub(crate) fn kill_by_pid(&self, pid: u32) -> io::Result<()> {
        let pid = crate::process::pid(pid)?;
        rustix::process::kill_process(pid, rustix::process::Signal::KILL)?;
        rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty())?;
        Ok(())
    }

    /// The server's status as the tree init sent it before it exited (`None`: it sent none,
    /// killed first), read once and kept.
    pub(crate) fn recorded_status(&mut self) -> Option<ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        if self.status.is_none() {
            let mut bytes = [0u8; 6];
            if let Ok(n) =
                rustix::net::recv(&self.ctl, &mut bytes, rustix::net::RecvFlags::DONTWAIT)
            {
                if let Some(Msg::Exited(status)) = Msg::decode(&bytes[..n.0.min(6)]) {
                    self.status = Some(status);
                }
            }
        }
        self.status.map(ExitStatus::from_raw)
    }
}

#[cfg(test)]
mod tests {
    use super::Msg;

    #[test]
    fn messages_round_trip() {
        for msg in [
            Msg::Started(4_000_000),
            Msg::Failed(7, 13),
            Msg::Exited(0x0f00),
        ] {
            assert_eq!(Msg::decode(&msg.encode()), Some(msg));
        }
        assert_eq!(Msg::decode(&[9, 0, 0, 0, 0, 0]), None);
        assert_eq!(Msg::decode(&[1, 0]), None);
    }
}
