//! The report as the steps fill it in, whichever face drives them, and its end: the
//! handle's close folded in.

use std::time::{Duration, Instant};

use childguard::{ChildHandle, CloseReport, Ending};

use crate::report::{Ended, Error, Exit, LspCloseReport, Shutdown};
use crate::session::Listener;

/// How often a wait for `shutdown`'s answer also looks whether the server exited: its stdout
/// may stay open after it (a process it started holds it), and no end of file would come.
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(50);

#[derive(Debug)]
pub(crate) struct Steps {
    pub(crate) began: Instant,
    pub(crate) shutdown: Shutdown,
    pub(crate) shutdown_answered: Option<Duration>,
    pub(crate) exit: Exit,
    pub(crate) exit_sent: Option<Duration>,
    pub(crate) exited: Option<Duration>,
    pub(crate) ended: Option<Ended>,
    pub(crate) listener: Listener,
    pub(crate) notes: Vec<String>,
    /// A write to the server failed (half a frame may have gone out): nothing more is
    /// written.
    pub(crate) input_broken: Option<String>,
    /// A look at the server failed once: not looked at again (the close still ends it).
    look_failed: bool,
}

impl Steps {
    pub(crate) fn new() -> Steps {
        Steps {
            began: Instant::now(),
            shutdown: Shutdown::NotSent("the LSP steps did not run".into()),
            shutdown_answered: None,
            exit: Exit::NotSent("shutdown was not sent".into()),
            exit_sent: None,
            exited: None,
            ended: None,
            listener: Listener::default(),
            notes: Vec::new(),
            input_broken: None,
            look_failed: false,
        }
    }

    /// Whether the server has exited, looked at without blocking; the time is noted.
    pub(crate) fn exited_now(&mut self, handle: &mut ChildHandle) -> bool {
        if self.look_failed {
            return false;
        }
        match handle.try_wait() {
            Ok(Some(_)) => {
                self.exited = Some(self.began.elapsed());
                true
            }
            Ok(None) => false,
            Err(e) => {
                self.look_failed = true;
                self.notes
                    .push(format!("looking at the server failed: {e}"));
                false
            }
        }
    }

    /// Before anything is sent: a server already gone gets nothing.
    pub(crate) fn gone_before(&mut self, handle: &mut ChildHandle) -> bool {
        if !self.exited_now(handle) {
            return false;
        }
        self.ended = Some(Ended::BeforeShutdown);
        self.shutdown = Shutdown::NotSent("the server had exited".into());
        self.exit = Exit::NotSent("the server had exited".into());
        true
    }

    /// `shutdown`'s step is over with `outcome`.
    pub(crate) fn shutdown_over(&mut self, outcome: Shutdown) {
        if matches!(outcome, Shutdown::Answered | Shutdown::Refused { .. }) {
            self.shutdown_answered = Some(self.began.elapsed());
        }
        self.shutdown = outcome;
    }

    /// Whether `exit` should be written: `shutdown` went out, and the server has not exited.
    pub(crate) fn exit_due(&mut self, handle: &mut ChildHandle) -> bool {
        if let Shutdown::NotSent(_) = self.shutdown {
            self.exit = Exit::NotSent("shutdown could not be sent".into());
            return false;
        }
        if let Some(why) = &self.input_broken {
            self.exit = Exit::NotSent(format!("an earlier write failed: {why}"));
            return false;
        }
        if self.exited_now(handle) {
            self.ended = Some(Ended::Shutdown);
            self.exit = Exit::NotSent("the server had exited".into());
            return false;
        }
        true
    }

    /// Answering a request of the server's failed: noted, and nothing more is written.
    pub(crate) fn reply_failed(&mut self, why: String) {
        self.notes
            .push(format!("answering a request of the server's: {why}"));
        self.input_broken = Some(why);
    }

    pub(crate) fn exit_written(&mut self, written: Result<(), String>) {
        match written {
            Ok(()) => {
                self.exit = Exit::Sent;
                self.exit_sent = Some(self.began.elapsed());
            }
            Err(why) => self.exit = Exit::NotSent(why),
        }
    }

    /// The end of the exit grace: the server was seen exited (`Some(true)`), not
    /// (`Some(false)`), or the wait failed (`Err`).
    pub(crate) fn exit_grace_over<E: std::fmt::Display>(&mut self, exited: Result<bool, E>) {
        match exited {
            Ok(true) => {
                self.exited = Some(self.began.elapsed());
                self.ended = Some(Ended::Exit);
            }
            Ok(false) => {}
            Err(e) => self
                .notes
                .push(format!("waiting for the exit after `exit` failed: {e}")),
        }
    }

    /// The report, with the handle's close after the steps.
    pub(crate) fn finish(
        self,
        closed: childguard::Result<CloseReport>,
    ) -> Result<LspCloseReport, Error> {
        match closed {
            Ok(close) => Ok(self.report(close)),
            Err(source) => {
                let report = source
                    .close_report()
                    .cloned()
                    .map(|close| Box::new(self.report(close)));
                Err(Error { source, report })
            }
        }
    }

    fn report(self, close: CloseReport) -> LspCloseReport {
        let ended_by = self.ended.unwrap_or(match close.ended_by {
            // Gone between our last look and the close: after the last step that went out.
            Ending::BeforeClose if self.exit == Exit::Sent => Ended::Exit,
            Ending::BeforeClose if !matches!(self.shutdown, Shutdown::NotSent(_)) => {
                Ended::Shutdown
            }
            Ending::BeforeClose => Ended::BeforeShutdown,
            other => Ended::Ladder(other),
        });
        let (skipped_bytes, garbled, partial_bytes) = self.listener.junk();
        LspCloseReport {
            shutdown: self.shutdown,
            shutdown_answered: self.shutdown_answered,
            exit: self.exit,
            exit_sent: self.exit_sent,
            exited: self.exited,
            ended_by,
            dropped: self.listener.dropped,
            refused: self.listener.refused,
            skipped_bytes,
            garbled,
            partial_bytes,
            notes: self.notes,
            close,
            total: self.began.elapsed(),
        }
    }
}
