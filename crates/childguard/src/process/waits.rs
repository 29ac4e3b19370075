//! The waits of a [`Process`]: what wakes a wait on the child (its pidfd, the cgroup's watch,
//! the survivors' pidfds, or `SIGCHLD`) and the blocking wait itself.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

#[cfg(target_os = "linux")]
use super::Life;
use super::{Mechanism, Process};
use crate::core::wait::{Interrupt, Wait, Woke};

impl Process {
    /// Blocks until something we wait for may have changed, `deadline` passes, or `interrupt`
    /// ends the wait (its error). Spurious wake-ups are allowed; callers re-check with
    /// [`Process::is_gone`].
    pub(crate) fn wait_until(
        &self,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> io::Result<()> {
        self.wait_with(&[], deadline, interrupt).map(drop)
    }

    /// [`Process::wait_until`], also woken by any of `extra` turning readable: those come
    /// first in the [`Woke::Readable`] it returns (index `i` is `extra[i]`). The one wait of a
    /// child, through [`Wait`]: the leader's pidfd alone (the common case) takes no allocation.
    pub(crate) fn wait_with(
        &self,
        extra: &[BorrowedFd<'_>],
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> io::Result<Woke> {
        self.wait_io(extra, &[], deadline, interrupt)
    }

    /// [`Process::wait_with`], also woken by any of `writable` having room to write (a
    /// non-blocking `connect` done): those count after every fd `wait_with` polls, so a caller
    /// that needs to know re-tries its own operation rather than read the index.
    pub(crate) fn wait_io(
        &self,
        extra: &[BorrowedFd<'_>],
        writable: &[BorrowedFd<'_>],
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> io::Result<Woke> {
        #[cfg(target_os = "linux")]
        let by_fds = self.cgroup.is_some() && (self.uses_pidfd() || !self.is_running());
        #[cfg(not(target_os = "linux"))]
        let by_fds = false;
        if by_fds || !self.is_running() {
            // The cgroup's watch (and the leader's pidfd while it runs), or the survivors'
            // pidfds — looked at in `/proc` now and then for those without one (`wake_by`).
            let deadline = if by_fds {
                deadline
            } else {
                self.wake_by(deadline)
            };
            let mut fds = extra.to_vec();
            fds.extend(self.wait_fds());
            return Wait::until(deadline)
                .fds(&fds)
                .writable(writable)
                .interrupt(interrupt)
                .run();
        }
        match &self.mechanism {
            #[cfg(target_os = "linux")]
            Mechanism::Pidfd(fd) if !self.held_by_tracer => {
                let woke = joined(extra, &[fd.as_fd()], |fds| {
                    Wait::until(deadline)
                        .fds(fds)
                        .writable(writable)
                        .interrupt(interrupt)
                        .run()
                })?;
                if matches!(woke, Woke::Readable(r) if r.contains(extra.len())) {
                    self.note_readable();
                }
                Ok(woke)
            }
            _ => Wait::until(deadline)
                .fds(extra)
                .writable(writable)
                .sigchld(Some(self.sigchld_seen))
                .interrupt(interrupt)
                .run(),
        }
    }

    /// The leader's pidfd was seen readable (it exited, or a tracer holds its zombie): the
    /// next [`Process::check_exit`] tells which.
    pub(crate) fn note_readable(&self) {
        if self.is_running() {
            self.readable_seen.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a change arrives as `SIGCHLD` rather than on an fd (the portable mechanism, or
    /// a zombie a tracer holds).
    pub(crate) fn waits_on_sigchld(&self) -> bool {
        matches!(self.wait_on(), WaitOn::Sigchld(_))
    }

    /// The leader's pidfd (Linux), while it has not been reaped.
    pub(crate) fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        match (&self.mechanism, self.life) {
            #[cfg(target_os = "linux")]
            (Mechanism::Pidfd(fd), Life::Running | Life::Exited(_)) => Some(fd.as_fd()),
            _ => None,
        }
    }

    /// The fds that become readable when what we wait for changes: the leader's pidfd while
    /// it runs, then the survivors' pidfds. Empty for the portable mechanism, whose changes
    /// arrive as `SIGCHLD` instead.
    pub(crate) fn wait_fds(&self) -> Vec<BorrowedFd<'_>> {
        #[cfg(target_os = "linux")]
        if let Some((cgroup, _)) = &self.cgroup {
            // The leader's exit (it is reaped or kept a zombie), then the cgroup emptying.
            // While the leader runs the cgroup cannot be empty, and its pidfd wakes us at its
            // exit: the cgroup's bell is not waited on until then, so a child whose cgroup is
            // empty once it exits never enters the loop's epoll set (no `epoll_ctl`, no
            // wake-up of the loop's thread at each change of `cgroup.events`). Race avoided:
            // a change before the bell is first waited on is reported when it is entered
            // (`FileWatch::fd`).
            if let (true, false, Some(pidfd)) =
                (self.is_running(), self.held_by_tracer, self.pidfd())
            {
                return vec![pidfd];
            }
            return vec![cgroup.watch().fd()];
        }
        if !self.is_running() {
            return self.survivors.fds();
        }
        match &self.mechanism {
            #[cfg(target_os = "linux")]
            Mechanism::Pidfd(fd) if !self.held_by_tracer => vec![fd.as_fd()],
            _ => Vec::new(),
        }
    }

    /// What [`Process::wait_until`] would block on, for drivers that wait without blocking (the
    /// tokio face): fds that turn readable, or a `SIGCHLD` after the generation last seen.
    pub(crate) fn wait_on(&self) -> WaitOn<'_> {
        let on_sigchld = matches!(self.mechanism, Mechanism::Sigchld(_)) || self.held_by_tracer;
        if on_sigchld && self.is_running() {
            WaitOn::Sigchld(self.sigchld_seen)
        } else {
            WaitOn::Fds(self.wait_fds())
        }
    }
}

/// Calls `f` with `a` then `b` in one slice: on the stack for up to three fds (the pidfd with
/// a notify socket, or with two output pipes), so the common waits allocate nothing.
#[cfg(target_os = "linux")]
pub(super) fn joined<'f, R>(
    a: &[BorrowedFd<'f>],
    b: &[BorrowedFd<'f>],
    f: impl FnOnce(&[BorrowedFd<'f>]) -> R,
) -> R {
    match (a, b) {
        ([], _) => f(b),
        (_, []) => f(a),
        ([x], [y]) => f(&[*x, *y]),
        ([x, y], [z]) | ([x], [y, z]) => f(&[*x, *y, *z]),
        _ => f(&a.iter().chain(b).copied().collect::<Vec<_>>()),
    }
}

/// What a change in the child's state wakes, as told by [`Process::wait_on`].
#[derive(Debug)]
#[cfg_attr(not(feature = "tokio"), allow(dead_code))]
pub(crate) enum WaitOn<'a> {
    /// Any of these fds turning readable (pidfds; empty: only the deadline wakes).
    Fds(Vec<BorrowedFd<'a>>),
    /// A `SIGCHLD` after this [`crate::core::sigchld::Notifier`] generation.
    Sigchld(u64),
}
