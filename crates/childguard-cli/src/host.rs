//! [`HostWatch`]: `run --stdio-server`, childguard as the server command of an MCP or LSP host
//! (a desktop app, an editor), which talks to CMD over childguard's own stdin and stdout.
//!
//! CMD inherits both fds as they are (no copy loop, no buffer: the host's bytes reach CMD as
//! the host wrote them). childguard watches them without touching the data, for the two ways
//! a host ends a session:
//!
//! - **It closes our stdin** — the MCP close, and what the kernel does for a host that dies,
//!   even by `SIGKILL`. `poll` on fd 0 asks for no readable event (`POLLIN` would fire at
//!   every message and leave it there: a busy loop), only for the hangups, which `poll` reports
//!   without consuming a byte: `POLLHUP` on a pipe once every writer is gone (what Python's
//!   asyncio and most hosts use); `POLLRDHUP` on a Unix socket whose peer shut its writing
//!   side (libuv, hence node and Electron hosts, give their children socketpairs, and close
//!   stdin with `shutdown(SHUT_WR)`), `POLLRDHUP | POLLHUP` once the peer is closed. Data the
//!   host wrote before closing stays queued for CMD, which reads it during the ladder's
//!   `EOF:` wait. A regular file, `/dev/null` or an idle terminal never reports these.
//! - **It exits** while something else still holds our stdin open (a sibling that inherited
//!   the host's end): childguard's parent is then gone. A pidfd of the parent, opened at
//!   start, becomes readable when the whole parent process has exited (Linux ≥ 5.3). Not
//!   `PR_SET_PDEATHSIG` on ourselves: it fires when the parent *thread* that forked us exits,
//!   and a host that spawns servers from a worker thread (a thread pool, Go's runtime) would
//!   close them while it is alive.
//!
//! Both are fds in the one `poll` the main thread already waits in ([`crate::events`]): no
//! thread, no timer.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::event::{PollFd, PollFlags};

/// What the host did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostEvent {
    /// It closed childguard's stdin (or died, closing it).
    StdinClosed,
    /// childguard's parent, this pid, exited.
    ParentExited(u32),
}

/// What is asked of fd 0: the hangups only (see the module doc).
#[cfg(any(target_os = "linux", target_os = "android"))]
const STDIN_HANGUP: PollFlags = PollFlags::RDHUP;
/// Elsewhere `POLLHUP` alone, which `poll` always reports.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const STDIN_HANGUP: PollFlags = PollFlags::empty();

/// What ends the watch of an fd: any of these in `revents`. `POLLERR` comes with a reset
/// connection, `POLLNVAL` when fd 0 is not open (then there is no host on it to watch).
fn hung_up(revents: PollFlags) -> bool {
    revents.intersects(STDIN_HANGUP | PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL)
}

/// The host's lifeline: childguard's stdin and its parent.
#[derive(Debug)]
pub struct HostWatch {
    /// fd 0 (std's handle: fd 0 stays open as long as the process), and whether its hangup
    /// is still to be reported.
    fd0: io::Stdin,
    stdin: Cell<bool>,
    /// The parent's pid at start and a pidfd of it (Linux), while it has not fired.
    parent: Option<(u32, OwnedFd)>,
    parent_armed: Cell<bool>,
    /// What was already true at start (the parent gone before we looked).
    early: Cell<Option<HostEvent>>,
}

impl HostWatch {
    /// Starts watching: reads the parent now. A parent that cannot be watched (no
    /// `pidfd_open`: Linux < 5.3, or not Linux) is said on stderr once; stdin is still
    /// watched.
    pub fn start() -> HostWatch {
        let (parent, early) = match watch_parent() {
            Ok(Parent::Watched(pid, fd)) => (Some((pid, fd)), None),
            Ok(Parent::Gone(pid)) => (None, Some(HostEvent::ParentExited(pid))),
            Ok(Parent::None) => (None, None),
            Err(why) => {
                crate::messages::say!(
                    "--stdio-server: cannot watch the parent process ({why}); only stdin \
                     closing starts the ladder"
                );
                (None, None)
            }
        };
        HostWatch {
            fd0: io::stdin(),
            stdin: Cell::new(true),
            parent_armed: Cell::new(parent.is_some()),
            parent,
            early: Cell::new(early),
        }
    }

    /// The fds to `poll`, in the order [`HostWatch::fired`] reads them back.
    pub fn poll_fds<'a>(&'a self, fds: &mut Vec<PollFd<'a>>) {
        if self.stdin.get() {
            fds.push(PollFd::from_borrowed_fd(self.fd0.as_fd(), STDIN_HANGUP));
        }
        if let Some((_, pidfd)) = self.parent.as_ref().filter(|_| self.parent_armed.get()) {
            fds.push(PollFd::new(pidfd, PollFlags::IN));
        }
    }

    /// What was already true at start (the parent gone before we looked), once.
    pub fn take_early(&self) -> Option<HostEvent> {
        self.early.take()
    }

    /// What the `poll` of [`HostWatch::poll_fds`]' fds (`fds`, in that order) reports, once
    /// each: a fired watch is disarmed (a hangup stays reported).
    pub fn fired(&self, fds: &[PollFd<'_>]) -> Option<HostEvent> {
        let mut fds = fds.iter();
        if self.stdin.get() {
            let stdin = fds.next()?;
            if hung_up(stdin.revents()) {
                self.stdin.set(false);
                return Some(HostEvent::StdinClosed);
            }
        }
        if let Some((pid, _)) = self.parent.as_ref().filter(|_| self.parent_armed.get()) {
            let parent = fds.next()?;
            if !parent.revents().is_empty() {
                self.parent_armed.set(false);
                return Some(HostEvent::ParentExited(*pid));
            }
        }
        None
    }
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
enum Parent {
    /// The parent's pid and a pidfd of it.
    Watched(u32, OwnedFd),
    /// The parent exited before the pidfd was open (we were re-parented already).
    Gone(u32),
    /// No parent to watch (pid 0: we are a namespace's init).
    None,
}

#[cfg(target_os = "linux")]
fn watch_parent() -> io::Result<Parent> {
    use rustix::process::{getppid, pidfd_open, PidfdFlags};
    let Some(parent) = getppid() else {
        return Ok(Parent::None);
    };
    let pid = parent.as_raw_nonzero().get().unsigned_abs();
    match pidfd_open(parent, PidfdFlags::empty()) {
        // Opened: it is our parent's only if we were not re-parented meanwhile (a parent that
        // exited re-parents us at once, before its pid can be reused).
        Ok(fd) if getppid() == Some(parent) => Ok(Parent::Watched(pid, fd)),
        Ok(_) => Ok(Parent::Gone(pid)),
        Err(rustix::io::Errno::SRCH) => Ok(Parent::Gone(pid)),
        Err(e) => Err(io::Error::other(format!(
            "pidfd_open of parent {pid}: {}",
            io::Error::from(e)
        ))),
    }
}

#[cfg(not(target_os = "linux"))]
fn watch_parent() -> io::Result<Parent> {
    Err(io::Error::other("no pidfd on this system"))
}
