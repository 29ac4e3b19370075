//! The interruptible faces of the handle's blocking calls: [`Builder::interrupt`] (the spawn's
//! readiness and activation waits), [`ChildHandle::wait_timeout_interruptible`], and what an
//! interrupted close returns ([`CloseControl::interrupt`]). The check itself is
//! [`Interrupt`] (`core/wait.rs`), called by the one wait primitive.
//!
//! What an interrupt leaves, by call:
//!
//! | interrupted during | returns | the child |
//! |---|---|---|
//! | a spawn's readiness or activation wait | [`ErrorKind::Interrupted`] at once | closed by its ladder in the background: shut down, the first due rung sent, the rest and the reap by the [`reaper`](crate::reaper) — nothing is left |
//! | a close ([`CloseControl::interrupt`]) | [`ErrorKind::Interrupted`] with the report so far | the rest of the ladder and the reap go to the reaper |
//! | a wait ([`ChildHandle::wait_timeout_interruptible`]) | [`ErrorKind::Interrupted`] | left running, the handle still usable |
//!
//! A child is never left unreaped: the reaper reaps it when it exits; call
//! [`reaper::drain`](crate::reaper::drain) before the process exits if that must happen here.

use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::close::close_control::CloseControl;
use crate::close::report::CloseReport;
use crate::core::wait::later;
use crate::core::wait::Interrupt;
use crate::error::{Error, ErrorKind, Result};
use crate::{Builder, ChildHandle};

impl Builder {
    /// Calls `interrupt`'s check during the spawn's waits — the readiness wait
    /// ([`ready`](Builder::ready)) and socket activation's connect — at least every
    /// [`INTERRUPT_CHECK_EVERY`](crate::INTERRUPT_CHECK_EVERY) and at once on `EINTR`. When
    /// it returns an error, `spawn` returns at once with [`ErrorKind::Interrupted`] (the
    /// check's error as its source, the close report so far attached) and the server is
    /// closed by its ladder in the background (see the module table): nothing is left.
    ///
    /// The Python binding passes `PyErr_CheckSignals`: Ctrl-C during `spawn(ready=…)` raises
    /// `KeyboardInterrupt` within 0.1 s.
    pub fn interrupt(mut self, interrupt: Interrupt) -> Builder {
        self.interrupt = Some(interrupt);
        self
    }
}

impl ChildHandle {
    /// [`wait_timeout`](ChildHandle::wait_timeout), calling `interrupt`'s check at least every
    /// [`INTERRUPT_CHECK_EVERY`](crate::INTERRUPT_CHECK_EVERY) and on each `EINTR`. When it
    /// returns an error, so does this ([`ErrorKind::Interrupted`], the check's error as its
    /// source), and the child is left running: the handle is as before the call.
    pub fn wait_timeout_interruptible(
        &mut self,
        timeout: Duration,
        interrupt: &Interrupt,
    ) -> Result<Option<ExitStatus>> {
        self.wait_until(later(Instant::now(), timeout), Some(interrupt))
    }

    /// Waits until the child exits or `deadline` (`wait_timeout`, `kill`'s grace), woken by
    /// its pidfd (or `SIGCHLD`) the moment it does, `interrupt`'s check called meanwhile: its
    /// error comes back as [`ErrorKind::Interrupted`] and the child is left as it was.
    pub(crate) fn wait_until(
        &mut self,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> Result<Option<ExitStatus>> {
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            let process = self.process().ok_or_else(crate::handle::no_child)?;
            process
                .wait_until(deadline, interrupt)
                .map_err(|e| Error::from_wait(ErrorKind::Wait, self.program(), e))?;
        }
    }

    /// Closes without waiting: shut down, the first due rung sent, the rest of the ladder and
    /// the reap left to the background reaper. For a spawn whose caller was interrupted.
    pub(crate) fn close_in_background(self) -> Result<CloseReport> {
        self.close_with(CloseControl::new().hand_off_when(Duration::ZERO, || true))
    }

    /// A spawn interrupted after the fork: the child closed in the background, the error
    /// ([`ErrorKind::Interrupted`]) returned with the report so far.
    pub(crate) fn interrupted_at_spawn(self, e: io::Error) -> Error {
        let program = self.program().map(str::to_owned);
        let closed = self.close_in_background();
        let error = Error::new(ErrorKind::Interrupted, program.as_deref(), e);
        match closed {
            Ok(report) => error.with_close_report(report),
            Err(_) => error,
        }
    }
}

/// What a blocking close returns: `finished`, unless its interrupt ended the waiting (`e`):
/// then [`ErrorKind::Interrupted`] with the report (the rest went to the reaper).
pub(crate) fn after_close(
    finished: Result<CloseReport>,
    interrupted: Option<io::Error>,
) -> Result<CloseReport> {
    match (finished, interrupted) {
        (Ok(report), Some(e)) => {
            let program = report.program.clone();
            Err(Error::new(ErrorKind::Interrupted, program.as_deref(), e).with_close_report(report))
        }
        (finished, _) => finished,
    }
}
