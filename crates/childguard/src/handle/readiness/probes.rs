//! The attempts of [`Ready::Http`](super::Ready::Http) and [`Ready::Exec`](super::Ready::Exec),
//! each bounded, each waiting only through the child's one wait (its pidfd, the caller's
//! interrupt): the child exiting, or the caller interrupting, ends an attempt at once.

use std::io;
use std::time::Instant;

use super::exec::{ExecCheck, ProbeSpawn};
use super::http::{Answer, HttpCheck};
use super::not_ready::NotReady;
use super::probe::{bound_text, Schedule};
use super::ready::Ready;
use crate::core::wait::{later, Interrupt, EXIT_CHECK};
use crate::ChildHandle;

/// How one attempt went, when it did not end the wait.
#[derive(Debug)]
pub(super) enum Tried {
    Ready,
    /// Not yet: `patient` if the server (or the probe) worked for it (see
    /// [`Schedule::done`]); `last` says what came, for the timeout's message.
    NotYet {
        patient: bool,
        last: String,
    },
    /// The ready timeout passed while the attempt still waited: `last` is kept only if no
    /// finished attempt said more.
    Cut(String),
}

/// One HTTP or exec condition being retried: when its next attempt is due, and what its last
/// one got.
#[derive(Debug)]
pub(super) struct Retrying {
    pub(super) schedule: Schedule,
    pub(super) last: Option<String>,
}

impl Retrying {
    pub(super) fn new() -> Retrying {
        Retrying {
            schedule: Schedule::new(),
            last: None,
        }
    }
}

impl ChildHandle {
    /// One attempt of `part` if it is due (else `false`): ready, or not yet (the schedule
    /// and `last` updated). Only for [`Ready::Http`] and [`Ready::Exec`].
    pub(super) fn probe_once(
        &mut self,
        part: &Ready,
        retrying: &mut Retrying,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
        spawn: ProbeSpawn,
    ) -> Result<bool, NotReady> {
        if !retrying.schedule.due(Instant::now()) {
            return Ok(false);
        }
        let tried = match part {
            Ready::Http(check) => self.http_once(check, deadline, interrupt)?,
            Ready::Exec(check) => self.exec_once(check, deadline, interrupt, spawn)?,
            _ => return Err(NotReady::Failed(io::Error::other("not a probe condition"))),
        };
        match tried {
            Tried::Ready => Ok(true),
            Tried::NotYet { patient, last } => {
                retrying.schedule.done(Instant::now(), patient);
                retrying.last = Some(format!("{}: {last}", part.describe_short()));
                Ok(false)
            }
            Tried::Cut(last) => {
                retrying.schedule.done(Instant::now(), true);
                if retrying.last.is_none() {
                    retrying.last = Some(format!("{}: {last}", part.describe_short()));
                }
                Ok(false)
            }
        }
    }

    fn http_once(
        &mut self,
        check: &HttpCheck,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> Result<Tried, NotReady> {
        let answer = check.attempt(deadline, |readable, writable, until| {
            self.exited()?;
            if let Some(process) = self.process() {
                process
                    .wait_io(readable, writable, until, interrupt)
                    .map_err(NotReady::from_wait)?;
            }
            Ok(())
        })?;
        Ok(match answer {
            Answer::Ready => Tried::Ready,
            Answer::NotListening(last) => Tried::NotYet {
                patient: false,
                last,
            },
            Answer::NotYet(last) => Tried::NotYet {
                patient: true,
                last,
            },
            Answer::Cut(last) => Tried::Cut(last),
            Answer::Failed(e) => return Err(NotReady::Failed(e)),
        })
    }

    /// Runs the probe once: until it exits, or past its attempt timeout (then its close
    /// kills and reaps it). The server exiting, or the interrupt, ends the wait at once; the
    /// probe's handle is then dropped, which closes it the same way.
    fn exec_once(
        &mut self,
        check: &ExecCheck,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
        spawn: ProbeSpawn,
    ) -> Result<Tried, NotReady> {
        let mut probe = spawn(check.command()).map_err(|e| {
            NotReady::Failed(io::Error::other(format!(
                "starting the probe for {check}: {e}"
            )))
        })?;
        let started = Instant::now();
        let until = deadline.min(later(started, check.timeout()));
        let status = loop {
            match probe.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) => {}
                Err(e) => {
                    return Err(NotReady::Failed(io::Error::other(format!(
                        "waiting for the probe of {check}: {e}"
                    ))))
                }
            }
            self.exited()?;
            let now = Instant::now();
            if now >= until {
                break None;
            }
            // The probe's pidfd beside the server's: either exit ends the wait. Without one
            // (the portable path) its SIGCHLD does, or the look every EXIT_CHECK.
            let probe_fds = probe.process().map(|p| p.wait_fds()).unwrap_or_default();
            let slice = if probe_fds.is_empty() {
                until.min(now + EXIT_CHECK)
            } else {
                until
            };
            if let Some(process) = self.process() {
                process
                    .wait_with(&probe_fds, slice, interrupt)
                    .map_err(NotReady::from_wait)?;
            }
        };
        let tail = match probe.close() {
            Ok(report) => report.output_tail,
            Err(e) => e.close_report().and_then(|r| r.output_tail.clone()),
        };
        let output = match tail.as_deref().map(str::trim_end) {
            Some(t) if !t.is_empty() => format!("; its output ended with:\n{t}"),
            _ => "; no output".to_owned(),
        };
        Ok(match status {
            Some(status) if status.success() => Tried::Ready,
            Some(status) => Tried::NotYet {
                patient: true,
                last: format!("exited with {status}{output}"),
            },
            None => {
                let last = format!(
                    "still running after {}, killed{output}",
                    bound_text(started, check.timeout(), until)
                );
                if until < later(started, check.timeout()) {
                    Tried::Cut(last)
                } else {
                    Tried::NotYet {
                        patient: true,
                        last,
                    }
                }
            }
        })
    }
}
