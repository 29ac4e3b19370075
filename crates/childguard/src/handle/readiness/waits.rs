//! The waits for readiness: one per [`Ready`] kind, and for [`Ready::any`]/[`Ready::all`] the
//! combined wait, each ending when the condition holds, the child exits, the deadline passes,
//! or the interrupt fires ([`NotReady`] says which).

use std::io;
use std::time::{Duration, Instant};

use super::connect;
use super::connect::ConnectTo;
use super::exec::ProbeSpawn;
use super::not_ready::NotReady;
#[cfg(target_os = "linux")]
use super::notify;
use super::probes::Retrying;
use super::ready::Ready;
use crate::core::wait::later;
use crate::core::wait::Interrupt;
use crate::core::wait::EXIT_CHECK;
use crate::ChildHandle;

impl ChildHandle {
    /// Waits until `ready` holds, the child exits, or `timeout` passes (extended by
    /// `EXTEND_TIMEOUT_USEC=`, at most `extend_max` beyond it).
    pub(crate) fn await_ready(
        &mut self,
        ready: &Ready,
        timeout: Duration,
        extend_max: Duration,
        interrupt: Option<&Interrupt>,
        spawn: ProbeSpawn,
    ) -> Result<(), NotReady> {
        crate::failpoint::before_ready_wait();
        let deadline = later(Instant::now(), timeout);
        match ready {
            Ready::Accepted => Ok(()),
            Ready::Connect(to) => self.await_connect(to, deadline, interrupt),
            Ready::Output(_) => self.await_line(deadline, interrupt),
            Ready::Notify => self.await_notify(deadline, later(deadline, extend_max), interrupt),
            Ready::Http(_) | Ready::Exec(_) => self.await_probe(ready, deadline, interrupt, spawn),
            Ready::Any(parts) => {
                self.await_combination(parts, false, deadline, extend_max, interrupt, spawn)
            }
            Ready::All(parts) => {
                self.await_combination(parts, true, deadline, extend_max, interrupt, spawn)
            }
        }
    }

    /// [`Ready::any`] (`all` false) or [`Ready::all`]: checks each condition not yet seen,
    /// then pauses in a `poll` of the pidfd and the notify socket, 0.1 ms doubling to 0.5 ms.
    /// An HTTP or exec condition is attempted only when its own schedule says so
    /// ([`Schedule`](super::probe::Schedule)), and its attempt runs to its end (bounded by
    /// its attempt timeout) before the next condition is looked at.
    fn await_combination(
        &mut self,
        parts: &[Ready],
        all: bool,
        deadline: Instant,
        extend_max: Duration,
        interrupt: Option<&Interrupt>,
        spawn: ProbeSpawn,
    ) -> Result<(), NotReady> {
        let hard = later(deadline, extend_max);
        let mut deadline = deadline;
        // Off Linux there is no notify socket to extend the deadline.
        #[cfg(not(target_os = "linux"))]
        let _ = (hard, &mut deadline);
        let mut seen = vec![false; parts.len()];
        let mut retrying: Vec<Retrying> = parts.iter().map(|_| Retrying::new()).collect();
        let mut pause = connect::FIRST_PAUSE;
        loop {
            #[cfg(target_os = "linux")]
            if let Some(notify) = self.notify_mut() {
                if let Some(until) = notify.receive() {
                    deadline = deadline.max(until.min(hard));
                }
                if let Some(errno) = notify.errno {
                    return Err(NotReady::Errno(errno));
                }
            }
            for ((part, seen), retrying) in parts.iter().zip(seen.iter_mut()).zip(&mut retrying) {
                if *seen {
                    continue;
                }
                *seen = match part {
                    Ready::Http(_) | Ready::Exec(_) => {
                        self.probe_once(part, retrying, deadline, interrupt, spawn)?
                    }
                    _ => self.holds_now(part, deadline, interrupt)?,
                };
            }
            let done = if all {
                seen.iter().all(|&s| s)
            } else {
                seen.iter().any(|&s| s)
            };
            if done {
                return Ok(());
            }
            self.exited()?;
            let now = Instant::now();
            if now >= deadline {
                let last: Vec<String> = retrying.into_iter().filter_map(|r| r.last).collect();
                return Err(NotReady::TimedOut(
                    (!last.is_empty()).then(|| last.join("; ")),
                ));
            }
            let until = deadline.min(now + pause);
            // One wait on the child and the notify socket (if any), the interrupt checked.
            if let Some(process) = self.process() {
                #[cfg(target_os = "linux")]
                let notify_fd = self.notify_ref().map(notify::NotifySocket::fd);
                #[cfg(not(target_os = "linux"))]
                let notify_fd = None;
                process
                    .wait_with(notify_fd.as_slice(), until, interrupt)
                    .map_err(NotReady::from_wait)?;
            }
            pause = (pause * 2).min(connect::MAX_PAUSE);
        }
    }

    /// Whether one single condition holds now (never waits longer than a connect attempt).
    fn holds_now(
        &mut self,
        part: &Ready,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> Result<bool, NotReady> {
        match part {
            Ready::Accepted => Ok(true),
            Ready::Connect(to) => to.try_once(deadline).map_err(NotReady::Failed),
            // Attempted by `probe_once`, on their own schedule.
            Ready::Http(_) | Ready::Exec(_) => Ok(false),
            #[cfg(target_os = "linux")]
            Ready::Notify => Ok(self.notify_ref().is_some_and(|n| n.ready)),
            #[cfg(not(target_os = "linux"))]
            Ready::Notify => Ok(false),
            Ready::Output(_) => {
                let Some(captured) = self.take_capture() else {
                    return Err(NotReady::Failed(io::Error::other("no capture to watch")));
                };
                // A look, no wait: the interrupt is the caller's combination loop's to check.
                let _ = interrupt;
                let seen = captured.wait_for_line(Instant::now(), EXIT_CHECK, || false);
                self.put_capture(captured);
                Ok(seen)
            }
            // Refused by `Pending::prepare`.
            Ready::Any(_) | Ready::All(_) => {
                Err(NotReady::Failed(io::Error::other("nested Ready::any/all")))
            }
        }
    }

    /// [`Ready::Http`] or [`Ready::Exec`] alone: an attempt when its schedule says (the
    /// first at once), else a pause in the pidfd poll until the next one is due.
    fn await_probe(
        &mut self,
        part: &Ready,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
        spawn: ProbeSpawn,
    ) -> Result<(), NotReady> {
        let mut retrying = Retrying::new();
        loop {
            if self.probe_once(part, &mut retrying, deadline, interrupt, spawn)? {
                return Ok(());
            }
            self.exited()?;
            let now = Instant::now();
            if now >= deadline {
                return Err(NotReady::TimedOut(retrying.last));
            }
            if let Some(process) = self.process() {
                process
                    .wait_until(deadline.min(retrying.schedule.next(now)), interrupt)
                    .map_err(NotReady::from_wait)?;
            }
        }
    }

    /// The child's exit, if it exited: checked before every wait.
    pub(super) fn exited(&mut self) -> Result<(), NotReady> {
        match self.try_wait() {
            Ok(Some(status)) => Err(NotReady::Exited(status)),
            Ok(None) if self.process().is_some_and(|p| !p.is_running()) => Err(NotReady::Lost),
            Ok(None) => Ok(()),
            Err(e) => Err(NotReady::Failed(e.into())),
        }
    }

    fn await_connect(
        &mut self,
        to: &ConnectTo,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> Result<(), NotReady> {
        let mut pause = connect::FIRST_PAUSE;
        loop {
            if to.try_once(deadline).map_err(NotReady::Failed)? {
                return Ok(());
            }
            self.exited()?;
            let now = Instant::now();
            if now >= deadline {
                return Err(NotReady::TimedOut(None));
            }
            // Sleeps in the pidfd poll: the child's exit ends the pause at once.
            if let Some(process) = self.process() {
                process
                    .wait_until(deadline.min(now + pause), interrupt)
                    .map_err(NotReady::from_wait)?;
            }
            pause = (pause * 2).min(connect::MAX_PAUSE);
        }
    }

    fn await_line(
        &mut self,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> Result<(), NotReady> {
        let Some(captured) = self.take_capture() else {
            return Err(NotReady::Failed(io::Error::other("no capture to watch")));
        };
        let mut exited = Ok(());
        // `stop` is asked every EXIT_CHECK (5 ms): the interrupt check rides on it (rate-limited
        // by the `Interrupt` itself to one call per INTERRUPT_CHECK_EVERY).
        let seen = captured.wait_for_line(deadline, EXIT_CHECK, || {
            exited = self.exited();
            if exited.is_ok() {
                if let Some(Err(e)) = interrupt.map(|i| i.check(false)) {
                    exited = Err(NotReady::Interrupted(e));
                }
            }
            exited.is_err()
        });
        self.put_capture(captured);
        if seen {
            return Ok(());
        }
        exited?;
        // Both streams at EOF while the child runs: no line can come any more; wait for the
        // exit or the timeout, whichever is first.
        loop {
            self.exited()?;
            if Instant::now() >= deadline {
                return Err(NotReady::TimedOut(None));
            }
            if let Some(process) = self.process() {
                process
                    .wait_until(deadline, interrupt)
                    .map_err(NotReady::from_wait)?;
            }
        }
    }

    #[cfg(target_os = "linux")]
    fn await_notify(
        &mut self,
        deadline: Instant,
        hard: Instant,
        interrupt: Option<&Interrupt>,
    ) -> Result<(), NotReady> {
        let mut deadline = deadline;
        loop {
            let Some(notify) = self.notify_mut() else {
                return Err(NotReady::Failed(io::Error::other("no notify socket")));
            };
            if let Some(until) = notify.receive() {
                deadline = deadline.max(until.min(hard));
            }
            if notify.ready {
                return Ok(());
            }
            if let Some(errno) = notify.errno {
                return Err(NotReady::Errno(errno));
            }
            self.exited()?;
            let now = Instant::now();
            if now >= deadline {
                return Err(NotReady::TimedOut(None));
            }
            let (Some(notify), Some(process)) = (self.notify_ref(), self.process()) else {
                return Err(NotReady::Failed(io::Error::other("no notify socket")));
            };
            // Without a pidfd the child's exit is a SIGCHLD: the wait reads its generation
            // between short polls of the socket (`wait::SIGCHLD_SLICE`).
            process
                .wait_with(&[notify.fd()], deadline, interrupt)
                .map_err(NotReady::from_wait)?;
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn await_notify(
        &mut self,
        _deadline: Instant,
        _hard: Instant,
        _interrupt: Option<&Interrupt>,
    ) -> Result<(), NotReady> {
        Err(NotReady::Failed(io::Error::new(
            io::ErrorKind::Unsupported,
            "Ready::Notify needs Linux (SO_PASSCRED)",
        )))
    }
}
