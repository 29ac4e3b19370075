//! Who may speak on the private `NOTIFY_SOCKET` ([`NotifyAccess`], as systemd's
//! `NotifyAccess=`), and how a datagram's sender is told apart from a stranger.
//!
//! The sender is identified *at send time*, never by who holds its pid number when we get to
//! the datagram: the kernel records the sender's `struct pid` when it sends, and hands it to
//! us with the datagram as an `SCM_PIDFD` (`SO_PASSPIDFD`, Linux 6.5) next to the pid number of
//! `SCM_CREDENTIALS` (`SO_PASSCRED`). What is then asked of the sender, and the race each step
//! avoids:
//!
//! - **`Main`**: the pid is the child's. The child is ours and only we reap it, so its number
//!   cannot name anyone else while we read its datagrams. (Left: a datagram queued before the
//!   fork by an earlier holder of the same number — only our uid, or root, can reach the
//!   socket in its fresh 0700 directory.)
//! - **`All`, contained**: the sender's cgroup is the child's (or below it). Asked of the pidfd
//!   with `PIDFD_GET_INFO` (Linux 6.13), which the kernel answers from the process itself in
//!   one step — no `/proc` path whose pid number could be reused in between — and, for a
//!   sender already reaped, from the cgroup it had when it was reaped (`PIDFD_INFO_EXIT`, Linux
//!   6.15; the kernel gives a pidfd of a reaped sender from 6.16). A cgroup is kept by the
//!   kernel after the exit, so a helper that sends `READY=1` and exits at once is recognised
//!   however late we read its datagram. That is the case this module makes reliable.
//! - **`All`, uncontained**: the sender descends from the child: its parent pid (again from
//!   `PIDFD_GET_INFO`, atomic), then the parent chain in `/proc` up to the child. The kernel
//!   forgets a process's parent when it is reaped, so a sender reaped before we read its
//!   datagram can no longer be placed and is ignored with a note saying so (use
//!   [`contain`](crate::Builder::contain), or a helper that waits until its message is read,
//!   as `sd_notify_barrier(3)` does). A double-forked daemon has left the chain: only
//!   containment accepts it.
//!
//! Kernels without `PIDFD_GET_INFO` (6.5–6.12): `/proc/PID/cgroup` or `/proc/PID/status` is
//! read and then the pidfd is asked whether the process is still unreaped
//! (`pidfd_send_signal` with signal 0): a pid number is reused only after its process is
//! reaped, so if the sender is unreaped after the read, the read was about the sender. A
//! kernel without `SO_PASSPIDFD` (before 6.5) leaves the plain `/proc` read, which a pid reused
//! in between can fool.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::NotifyAccess;
use crate::sys::peer::{self, PidfdInfo};

/// systemd reads at most this much of a notify datagram; longer ones are ignored as malformed.
/// Here, below both readers of the socket (`notify.rs`, and `watchdog.rs` on the loop).
pub(crate) const MAX_DATAGRAM: usize = 4096;

/// How far up the parent chain a sender is looked for.
const MAX_DEPTH: usize = 64;

/// The child's cgroup, for [`NotifyAccess::All`] when contained.
#[derive(Debug, Clone)]
pub(crate) struct CgroupScope {
    /// The cgroup id: the inode number of its directory on the cgroup2 file system.
    id: Option<u64>,
    /// Its path as `/proc/PID/cgroup` shows it after `0::`.
    path: String,
}

impl CgroupScope {
    /// `dir`: the cgroup's directory, open — its id is read by `fstat` of that fd, never by
    /// a path someone could have replaced since (issue 49).
    pub(crate) fn new(dir: BorrowedFd<'_>, path: &str) -> CgroupScope {
        CgroupScope {
            id: rustix::fs::fstat(dir).ok().map(|s| s.st_ino),
            path: path.to_owned(),
        }
    }

    fn holds(&self, path: &str) -> bool {
        path == self.path
            || path
                .strip_prefix(self.path.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    }
}

/// Who sent one datagram, as the kernel attached it.
#[derive(Debug)]
pub(crate) struct Sender {
    /// `SCM_CREDENTIALS`: the pid at send time.
    pub(crate) pid: Option<u32>,
    /// `SCM_PIDFD`: `None` on kernels before 6.5; `Err(errno)` when the kernel could not open
    /// one (a sender reaped before we read, before 6.16).
    pub(crate) pidfd: Option<Result<OwnedFd, i32>>,
}

/// The rule and whom it admits.
#[derive(Debug, Clone)]
pub(crate) struct Access {
    pub(crate) rule: NotifyAccess,
    pub(crate) child: u32,
    pub(crate) cgroup: Option<CgroupScope>,
}

impl Access {
    /// `Ok(pid)` if `sender` may speak, else why not (for the report).
    pub(crate) fn judge(&self, sender: &Sender) -> Result<u32, String> {
        let Some(pid) = sender.pid else {
            return Err("a datagram without credentials".into());
        };
        // The child's number is its own until we reap it (see the module doc).
        if pid == self.child {
            return Ok(pid);
        }
        let verdict = match self.rule {
            NotifyAccess::Main => Err(format!(
                "not the main process {} (notify_access is Main)",
                self.child
            )),
            NotifyAccess::All => match &self.cgroup {
                Some(cgroup) => self.in_cgroup(pid, sender, cgroup),
                None => self.descends(pid, sender),
            },
        };
        verdict
            .map(|()| pid)
            .map_err(|why| format!("a datagram from pid {pid}, {why}"))
    }

    /// [`NotifyAccess::All`], contained: the sender's cgroup is the child's or below it.
    fn in_cgroup(&self, pid: u32, sender: &Sender, cgroup: &CgroupScope) -> Result<(), String> {
        let outside = || format!("outside the child's cgroup {}", cgroup.path);
        match sender_info(sender) {
            Info::Kernel(info) => {
                // Atomic, and kept after the reaping: the cgroup the kernel has for it.
                if info.cgroup_id.is_some() && info.cgroup_id == cgroup.id {
                    return Ok(());
                }
                if info.pid_ppid.is_none() {
                    return Err(outside());
                }
                // A cgroup below the child's has another id: look at its path, confirmed.
            }
            Info::Reaped => return Err(reaped("its cgroup")),
            Info::Unknown => {}
        }
        let path = crate::base::kernel_text::read(format!("/proc/{pid}/cgroup"))
            .ok()
            .and_then(|text| {
                crate::process::containment::mount::unified_path(&text).map(str::to_owned)
            });
        // Race: the read is about the sender only if the sender was still unreaped after it
        // (its number could not have been reused before); without a pidfd, unconfirmed.
        confirm(sender, "its cgroup")?;
        match path {
            Some(path) if cgroup.holds(&path) => Ok(()),
            Some(_) => Err(outside()),
            None => Err(format!(
                "gone before its cgroup could be read ({})",
                outside()
            )),
        }
    }

    /// [`NotifyAccess::All`], uncontained: the sender descends from the child.
    fn descends(&self, pid: u32, sender: &Sender) -> Result<(), String> {
        let not_ours = || {
            format!(
                "not a descendant of the child {} (a daemon that left it is accepted only \
                 with contain())",
                self.child
            )
        };
        let parent = match sender_info(sender) {
            // Atomic: the parent the kernel has for the unreaped (perhaps zombie) sender.
            Info::Kernel(PidfdInfo {
                pid_ppid: Some((_, ppid)),
                ..
            }) => Some(ppid),
            Info::Kernel(_) | Info::Reaped => return Err(reaped("its parent")),
            Info::Unknown => {
                let parent = crate::process::group::parent_of(pid);
                confirm(sender, "its parent")?;
                parent
            }
        };
        // The ancestors' chain in /proc: an ancestor reaped during the walk ends it (the
        // sender was then orphaned, and is not accepted).
        let mut at = parent;
        for _ in 0..MAX_DEPTH {
            match at {
                Some(p) if p == self.child => return Ok(()),
                Some(p) if p > 1 => at = crate::process::group::parent_of(p),
                _ => break,
            }
        }
        Err(not_ours())
    }
}

/// What the kernel said of the sender through its pidfd.
enum Info {
    /// `PIDFD_GET_INFO` answered.
    Kernel(PidfdInfo),
    /// The sender was reaped before we read its datagram and the kernel keeps nothing we
    /// can use (no pidfd for a reaped sender before 6.16, no exit information before 6.15).
    Reaped,
    /// No pidfd (before 6.5), or no `PIDFD_GET_INFO` (before 6.13): ask `/proc`.
    Unknown,
}

fn sender_info(sender: &Sender) -> Info {
    match &sender.pidfd {
        None => Info::Unknown,
        Some(Err(_)) => Info::Reaped,
        Some(Ok(pidfd)) => match peer::pidfd_get_info(pidfd.as_fd()) {
            Ok(info) => Info::Kernel(info),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Info::Reaped,
            Err(_) => Info::Unknown,
        },
    }
}

/// After a `/proc` read about `sender`: `Ok` if its pidfd says it was not reaped yet.
fn confirm(sender: &Sender, what: &str) -> Result<(), String> {
    match &sender.pidfd {
        Some(Ok(pidfd)) => match peer::pidfd_not_reaped(pidfd.as_fd()) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Err(reaped(what)),
            Err(e) => Err(format!("its pidfd: {e}")),
        },
        Some(Err(_)) => Err(reaped(what)),
        None => Ok(()),
    }
}

fn reaped(what: &str) -> String {
    format!(
        "which exited and was reaped before its datagram was read, so {what} is no longer \
         known (contain() keeps it: the kernel remembers a reaped process's cgroup)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(pid: u32) -> Sender {
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::PidfdFlags::empty(),
        )
        .ok()
        .map(Ok);
        Sender {
            pid: Some(pid),
            pidfd,
        }
    }

    #[test]
    fn main_admits_only_the_child() {
        let me = std::process::id();
        let parent = crate::process::group::parent_of(me).unwrap();
        let access = Access {
            rule: NotifyAccess::Main,
            child: parent,
            cgroup: None,
        };
        assert_eq!(access.judge(&sender(parent)), Ok(parent));
        let why = access.judge(&sender(me)).unwrap_err();
        assert!(why.contains("not the main process"), "{why}");
        let all = Access {
            rule: NotifyAccess::All,
            ..access
        };
        assert_eq!(all.judge(&sender(me)), Ok(me), "we descend from our parent");
    }

    #[test]
    fn all_uncontained_refuses_a_stranger_and_a_sender_without_credentials() {
        let me = std::process::id();
        let parent = crate::process::group::parent_of(me).unwrap();
        let access = Access {
            rule: NotifyAccess::All,
            child: me,
            cgroup: None,
        };
        let why = access.judge(&sender(parent)).unwrap_err();
        assert!(why.contains("not a descendant of the child"), "{why}");
        let none = Sender {
            pid: None,
            pidfd: None,
        };
        assert_eq!(
            access.judge(&none).unwrap_err(),
            "a datagram without credentials"
        );
    }

    #[test]
    fn cgroup_paths_below_count_and_lookalikes_do_not() {
        let scope = CgroupScope {
            id: None,
            path: "/a/childguard-1-2".into(),
        };
        assert!(scope.holds("/a/childguard-1-2"));
        assert!(scope.holds("/a/childguard-1-2/sub"));
        assert!(!scope.holds("/a/childguard-1-20"));
        assert!(!scope.holds("/a"));
    }
}
