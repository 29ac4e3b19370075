//! [`ExitWatch`]: wait for the child's exit without holding its [`ChildHandle`].
//!
//! [`ChildHandle::wait_timeout`] needs `&mut ChildHandle` for the whole wait. A handle shared
//! between threads behind a lock (the Python binding's `Server`) would then hold that lock
//! across the wait, and every other call on it — a `repr`, a `close()` from another thread —
//! would block until the wait ends. An `ExitWatch` is taken under the lock in one short,
//! non-blocking call ([`ChildHandle::watch_exit`]); the wait then runs on the watch alone, with
//! the lock released, and the caller takes the lock again afterwards to look (a new watch).

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::{AsFd, OwnedFd};
use std::process::ExitStatus;
use std::time::Instant;

use crate::core::wait::{Interrupt, Wait, Woke};
use crate::error::{Error, ErrorKind, Result};
use crate::process::WaitOn;
use crate::ChildHandle;

/// What to wait on for the child's exit, made by [`ChildHandle::watch_exit`]; owns what it
/// waits on (a duplicate of the child's pidfd), so it outlives any borrow of the handle.
///
/// ```no_run
/// # use std::sync::Mutex;
/// # use std::time::{Duration, Instant};
/// # fn demo(
/// #     shared: &Mutex<childguard::ChildHandle>,
/// # ) -> Result<Option<std::process::ExitStatus>, Box<dyn std::error::Error>> {
/// let deadline = Instant::now() + Duration::from_secs(5);
/// let status = loop {
///     let watch = shared.lock().unwrap().watch_exit()?; // the lock is held for this line only
///     if let Some(status) = watch.exited() {
///         break Some(status);
///     }
///     if Instant::now() >= deadline {
///         break None;
///     }
///     watch.wait_until(deadline)?; // no lock held: other threads use the handle meanwhile
/// };
/// # Ok(status) }
/// ```
#[derive(Debug)]
pub struct ExitWatch {
    exited: Option<ExitStatus>,
    on: On,
}

#[derive(Debug)]
enum On {
    /// The child had exited when the watch was made: nothing to wait for.
    Nothing,
    /// A duplicate of the leader's pidfd: readable once it exited.
    #[cfg(target_os = "linux")]
    Pidfd(OwnedFd),
    /// The portable mechanism (or a zombie a tracer holds): a `SIGCHLD` after this generation
    /// of the notifier, read before the look that made the watch.
    Sigchld(u64),
}

impl ChildHandle {
    /// Looks at the child now, never blocking (as [`try_wait`](ChildHandle::try_wait) does,
    /// reaping a child that leads no group once it exited) and returns an [`ExitWatch`]: the
    /// status if it had exited ([`ExitWatch::exited`]), else something to wait on without the
    /// handle ([`ExitWatch::wait_until`]). After a wait, call `watch_exit` again to look.
    ///
    /// Race avoided, *exit between the look and the wait*: what the watch waits on is taken
    /// with (pidfd) or before (the `SIGCHLD` generation) the look, so an exit after the look
    /// wakes the wait at once.
    ///
    /// # Errors
    ///
    /// As [`try_wait`](ChildHandle::try_wait): no child ([`ErrorKind::Config`]), a handle
    /// inherited through `fork()` ([`ErrorKind::Inherited`]), or the look failed
    /// ([`ErrorKind::Wait`]), also when the pidfd cannot be duplicated.
    pub fn watch_exit(&mut self) -> Result<ExitWatch> {
        #[cfg(target_os = "linux")]
        if let Some(process) = self.process() {
            if !process.is_inherited() {
                // A pidfd that is readable but whose `waitid` finds nothing (a tracer holds the
                // zombie) must turn the handle's waits to `SIGCHLD`, or every watch made from
                // now on would wake at once: a busy loop. `note_readable` tells the look below.
                let readable = process.pidfd().map(|fd| {
                    let woke = Wait::until(Instant::now()).fds(&[fd]).run();
                    matches!(woke, Ok(Woke::Readable(_)))
                });
                if readable == Some(true) {
                    process.note_readable();
                }
            }
        }
        if let Some(status) = self.try_wait()? {
            return Ok(ExitWatch {
                exited: Some(status),
                on: On::Nothing,
            });
        }
        let program = self.program().map(str::to_owned);
        let process = self.process().ok_or_else(crate::handle::no_child)?;
        let on = match process.wait_on() {
            WaitOn::Sigchld(seen) => On::Sigchld(seen),
            #[cfg(target_os = "linux")]
            WaitOn::Fds(_) => match process.pidfd() {
                Some(fd) => On::Pidfd(
                    fd.try_clone_to_owned()
                        .map_err(|e| Error::new(ErrorKind::Wait, program.as_deref(), e))?,
                ),
                None => On::Sigchld(sigchld_generation(program.as_deref())?),
            },
            #[cfg(not(target_os = "linux"))]
            WaitOn::Fds(_) => On::Sigchld(sigchld_generation(program.as_deref())?),
        };
        Ok(ExitWatch { exited: None, on })
    }
}

/// The notifier's generation, for a child whose exit only a `SIGCHLD` shows.
fn sigchld_generation(program: Option<&str>) -> Result<u64> {
    crate::core::sigchld::notifier()
        .map(|n| n.generation())
        .map_err(|e| Error::new(ErrorKind::Wait, program, e))
}

impl ExitWatch {
    /// The child's status if it had exited when the watch was made.
    pub fn exited(&self) -> Option<ExitStatus> {
        self.exited
    }

    /// The fd that turns readable at the exit (Linux: a duplicate of the child's pidfd), for
    /// a source of the event loop; `None` when the child had exited, or where there is no
    /// pidfd (the portable mechanism).
    #[cfg(target_os = "linux")]
    pub(crate) fn into_fd(self) -> Option<OwnedFd> {
        match self.on {
            On::Pidfd(fd) => Some(fd),
            _ => None,
        }
    }

    /// Blocks until the child may have exited, or `deadline`. Returns whether something
    /// changed (`false`: the deadline passed); spurious wake-ups are allowed: look with
    /// [`ChildHandle::watch_exit`] again. A signal (`EINTR`) does not end it. Returns at once
    /// if the child had exited when the watch was made. Needs no handle, so another thread may
    /// use (or close) the handle meanwhile; the wait then simply runs to its deadline or the
    /// exit, whichever comes first — bound it by how soon you want to notice.
    pub fn wait_until(&self, deadline: Instant) -> io::Result<bool> {
        self.wait(deadline, None)
    }

    /// [`wait_until`](ExitWatch::wait_until), calling `interrupt`'s check at least every
    /// [`INTERRUPT_CHECK_EVERY`](crate::INTERRUPT_CHECK_EVERY) and on each `EINTR`: an `Err`
    /// from it ends the wait with that error (kind [`io::ErrorKind::Interrupted`], its source
    /// the check's error). The child is left as it is: still running.
    pub fn wait_until_interruptible(
        &self,
        deadline: Instant,
        interrupt: &Interrupt,
    ) -> io::Result<bool> {
        self.wait(deadline, Some(interrupt))
    }

    fn wait(&self, deadline: Instant, interrupt: Option<&Interrupt>) -> io::Result<bool> {
        let woke = match &self.on {
            On::Nothing => return Ok(true),
            #[cfg(target_os = "linux")]
            On::Pidfd(fd) => Wait::until(deadline)
                .fds(&[fd.as_fd()])
                .interrupt(interrupt)
                .run()?,
            On::Sigchld(seen) => Wait::until(deadline)
                .sigchld(Some(*seen))
                .interrupt(interrupt)
                .run()?,
        };
        Ok(woke != Woke::Deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Duration;

    /// The watch waits with no borrow of the handle: the handle is used (and the child
    /// killed) by another thread while this one waits, and the wait ends with the exit.
    #[test]
    fn a_watch_waits_for_the_exit_while_another_thread_uses_the_handle() {
        for portable in [false, true] {
            let mut cmd = Command::new("sleep");
            cmd.arg("1000");
            let mut handle = ChildHandle::builder(cmd)
                .force_portable(portable)
                .ladder("KILL:10s".parse().unwrap())
                .spawn()
                .expect("spawning sleep");
            let watch = handle.watch_exit().expect("watch");
            assert!(
                watch.exited().is_none(),
                "portable={portable}: sleep exited at once"
            );
            let shared = std::sync::Mutex::new(Some(handle));
            std::thread::scope(|s| {
                let start = Instant::now();
                s.spawn(|| {
                    let mut guard = shared.lock().unwrap();
                    let h = guard.as_mut().unwrap();
                    assert!(h.try_wait().unwrap().is_none());
                    h.kill(crate::Signal::KILL, Duration::ZERO).unwrap();
                });
                let deadline = Instant::now() + Duration::from_secs(30);
                // `false` early: a signal cut the wait short (another test's SIGCHLD).
                while !watch.wait_until(deadline).unwrap() {
                    assert!(
                        Instant::now() < deadline,
                        "portable={portable}: the wait ran to its deadline"
                    );
                }
                assert!(start.elapsed() < Duration::from_secs(20));
            });
            let mut handle = shared.into_inner().unwrap().unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            let status = loop {
                let watch = handle.watch_exit().unwrap();
                if let Some(status) = watch.exited() {
                    break status;
                }
                assert!(
                    Instant::now() < deadline,
                    "portable={portable}: never seen exited"
                );
                watch.wait_until(deadline).unwrap();
            };
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(status.signal(), Some(libc::SIGKILL), "portable={portable}");
            // Once exited, a watch says so and its wait returns at once.
            let watch = handle.watch_exit().unwrap();
            assert_eq!(watch.exited(), Some(status));
            assert!(watch
                .wait_until(Instant::now() + Duration::from_secs(60))
                .unwrap());
            let report = handle.close().unwrap();
            assert!(!report.handed_to_reaper, "{report}");
        }
    }

    /// A watch on a running child times out at its deadline, saying nothing changed.
    #[test]
    fn a_watch_on_a_running_child_returns_false_at_its_deadline() {
        let mut cmd = Command::new("sleep");
        cmd.arg("1000");
        let mut handle = ChildHandle::builder(cmd)
            .ladder("KILL:10s".parse().unwrap())
            .spawn()
            .expect("spawning sleep");
        let watch = handle.watch_exit().unwrap();
        let deadline = Instant::now() + Duration::from_millis(100);
        // A signal (another test's SIGCHLD) may cut a wait short: that is `false` too.
        while Instant::now() < deadline {
            assert!(!watch.wait_until(deadline).unwrap());
        }
        assert!(handle.try_wait().unwrap().is_none());
        let report = handle.close().unwrap();
        assert!(!report.handed_to_reaper, "{report}");
    }
}
