//! What a supervisor knows, behind one lock: the running generation's handle, the exits so
//! far, the phase (running, waiting out a delay, starting, ended, given up) and what a close
//! must stop (the delay's timer, the start in progress).

use std::process::ExitStatus;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime};

use super::policy::{Restart, Starts};
use crate::close::report::CloseReport;
use crate::core::event_loop::TimerId;
use crate::{Builder, ChildHandle};

/// Exits (and failed starts) kept, the most recent; older ones are dropped.
pub(crate) const KEPT: usize = 32;

/// One end of a supervised server's generation, or one start that failed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GenerationExit {
    /// The generation that ended (1 is the first start); for a failed start, the generation
    /// it would have been.
    pub generation: u64,
    /// Its exit status (`None` for a start that failed, or a status lost).
    pub status: Option<ExitStatus>,
    /// The kernel's OOM killer ended it (see [`Builder::limits`](crate::Builder::limits)).
    pub oom_kill: bool,
    /// Why the start failed, for a start that failed.
    pub start_error: Option<String>,
    /// The tail of its captured output (with [`Builder::capture`](crate::Builder::capture)).
    pub output_tail: Option<String>,
    /// When the exit (or the failure) was seen.
    pub at: SystemTime,
}

impl std::fmt::Display for GenerationExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "start {}: ", self.generation)?;
        match (&self.start_error, self.status) {
            (Some(e), _) => write!(f, "failed to start ({e})")?,
            (None, Some(s)) => f.write_str(&crate::close::report::describe_status(&s))?,
            (None, None) => f.write_str("exited, status lost")?,
        }
        if self.oom_kill {
            f.write_str(" (oom-kill)")?;
        }
        if let Some(tail) = self.output_tail.as_deref().filter(|t| !t.trim().is_empty()) {
            let last: Vec<&str> = tail.trim_end().lines().rev().take(3).collect();
            let last: Vec<&str> = last.into_iter().rev().collect();
            write!(f, "; its output ended with: {}", last.join(" | "))?;
        }
        Ok(())
    }
}

/// What [`Supervisor::close`](crate::Supervisor::close) returns.
#[derive(Debug)]
#[non_exhaustive]
pub struct SupervisionReport {
    /// The close of the generation running when the close came (`None`: none was running —
    /// the close came during a delay or a start, or after the supervision ended).
    pub last: Option<CloseReport>,
    /// The closes of the generations that ended before (their reaps, cgroups removed), in
    /// order, the most recent 32 at most.
    pub previous: Vec<CloseReport>,
    /// Restarts done (starts after the first).
    pub restarts: u64,
    /// Every exit and failed start, in order (the most recent 32).
    pub exits: Vec<GenerationExit>,
    /// Why the supervisor gave up, if it did (the crash-loop error's message).
    pub gave_up: Option<String>,
}

/// Where the supervision is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// A generation runs.
    Running,
    /// Waiting out the delay before the next start.
    Waiting,
    /// A start (spawn and readiness) is under way on a worker thread.
    Starting,
    /// The policy said no restart: the last generation exited.
    Ended,
    /// The crash-loop limit was reached (or `make` panicked).
    GaveUp,
}

/// The builder of each start.
pub(crate) type Make = Box<dyn FnMut() -> Builder + Send>;

/// Shared by the supervisor, its loop handlers and its worker.
pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    /// Notified on every change of `generation`, `phase` or `closing`.
    pub(crate) changed: Condvar,
    pub(crate) make: Mutex<Make>,
    pub(crate) restart: Restart,
    /// The first generation's program, for errors.
    pub(crate) program: Option<String>,
    /// Set by the close: breaks off a start's readiness wait.
    pub(crate) stop_start: Arc<AtomicBool>,
}

pub(crate) struct State {
    pub(crate) current: Option<ChildHandle>,
    /// A generation that exited, kept until the worker (or the close) closes it: its reap,
    /// its cgroup's removal, what is left of its group.
    pub(crate) ended: Option<ChildHandle>,
    pub(crate) started_at: Instant,
    pub(crate) generation: u64,
    pub(crate) restarts: u64,
    pub(crate) exits: Vec<GenerationExit>,
    pub(crate) previous: Vec<CloseReport>,
    pub(crate) starts: Starts,
    pub(crate) phase: Phase,
    pub(crate) closing: bool,
    pub(crate) gave_up: Option<String>,
    pub(crate) timer: Option<TimerId>,
    pub(crate) worker: Option<JoinHandle<()>>,
    /// Called (under no lock of ours) with the new generation after each restart.
    pub(crate) on_change: Vec<Arc<dyn Fn(u64) + Send + Sync>>,
    /// Called (under the lock, on the loop or worker thread) when the supervision ends.
    pub(crate) on_end: Vec<Arc<dyn Fn() + Send + Sync>>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    /// Ends the supervision in `phase` (`Ended` or `GaveUp`), telling the `on_end` callbacks.
    pub(crate) fn end(&mut self, phase: Phase, gave_up: Option<String>) {
        self.phase = phase;
        if gave_up.is_some() {
            self.gave_up = gave_up;
        }
        for callback in &self.on_end {
            callback();
        }
    }

    /// Keeps `exit`, dropping the oldest beyond [`KEPT`].
    pub(crate) fn record(&mut self, exit: GenerationExit) {
        if self.exits.len() == KEPT {
            self.exits.remove(0);
        }
        self.exits.push(exit);
    }

    /// Keeps the report of a generation's close.
    pub(crate) fn keep_report(&mut self, report: CloseReport) {
        if self.previous.len() == KEPT {
            drop(self.previous.remove(0));
        }
        self.previous.push(report);
    }

    /// The crash-loop message: how many starts in which window, and the last exits.
    pub(crate) fn crash_loop_message(&self, restart: &Restart) -> String {
        let last: Vec<String> = self
            .exits
            .iter()
            .rev()
            .take(3)
            .rev()
            .map(|e| e.to_string())
            .collect();
        format!(
            "gave up: {} starts within {:?} (the limit), last exits: {}",
            restart.burst,
            restart.interval,
            last.join("; ")
        )
    }
}
