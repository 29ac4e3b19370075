//! Supervision, the layer above `handle/`: a server restarted by policy — with growing
//! delays, a crash-loop limit, a good start counted after its readiness held — whose close
//! ends everything at once. One small file per part: [`policy`] (when, how long, when to give
//! up), [`state`] (what the supervisor knows), [`restart`] (the job on the event core).

pub(crate) mod policy;
pub(crate) mod restart;
pub(crate) mod state;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub use policy::{Restart, RestartPolicy};
pub use state::{GenerationExit, SupervisionReport};

use crate::error::{Error, ErrorKind, Result};
use crate::{Builder, ChildHandle};
use state::{Phase, Shared, State};

/// How long a close waits for a start it broke off to be closed by the reaper.
const START_DRAIN: Duration = Duration::from_secs(10);

/// A server started from a builder made by a closure, and started again when it exits as a
/// [`Restart`] policy says (systemd's `Restart=`, `RestartSec=`, `StartLimitBurst=`).
///
/// What happens at each moment:
/// - [`start`](Supervisor::start) calls `make`, spawns (readiness included, as
///   [`Builder::spawn`]) in the calling thread: generation 1; a failure is returned as is.
/// - The generation's exit is watched by the event loop (a pidfd source: no thread per
///   server). On an exit the policy decides: no restart (the supervision ends; the exited
///   generation is closed by [`close`](Supervisor::close)); give up (the crash-loop limit:
///   [`ErrorKind::CrashLoop`] from [`wait_for_start`](Supervisor::wait_for_start), naming the
///   last exits and their output tails); or start again after the delay (a loop timer; none
///   for a zero delay).
/// - A start runs on a short-lived worker thread: the ended generation's close (its reap,
///   its cgroup's removal, what is left of its group), then `make` again and a spawn with its
///   readiness wait. The new generation's handle — a new socket, new stdio — is reached with
///   [`with_current`](Supervisor::with_current); [`wait_for_start`](Supervisor::wait_for_start)
///   and [`on_change`](Supervisor::on_change) say when it is there.
/// - **Close wins**: [`close`](Supervisor::close) — during a run, a delay, a start's spawn or
///   its readiness wait — cancels the timer, breaks off the start, closes every generation
///   with its ladder and returns when nothing is left ([`SupervisionReport`]). Drop closes
///   too.
///
/// A `make` that panics makes the supervisor give up (never a hang, never a restart loop).
pub struct Supervisor {
    shared: Arc<Shared>,
    closed: bool,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("Supervisor")
            .field("generation", &state.generation)
            .field("restarts", &state.restarts)
            .field("phase", &state.phase)
            .finish()
    }
}

impl Supervisor {
    /// Starts the first generation from `make()` (in this thread) and supervises it.
    pub fn start(
        mut make: impl FnMut() -> Builder + Send + 'static,
        restart: Restart,
    ) -> Result<Supervisor> {
        let began = Instant::now();
        let first = make().spawn()?;
        let program = first.program().map(str::to_owned);
        let mut starts = policy::Starts::default();
        starts.started(began);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                current: Some(first),
                ended: None,
                started_at: Instant::now(),
                generation: 1,
                restarts: 0,
                exits: Vec::new(),
                previous: Vec::new(),
                starts,
                phase: Phase::Running,
                closing: false,
                gave_up: None,
                timer: None,
                worker: None,
                on_change: Vec::new(),
                on_end: Vec::new(),
            }),
            changed: Condvar::new(),
            make: Mutex::new(Box::new(make)),
            restart,
            program,
            stop_start: Arc::new(AtomicBool::new(false)),
        });
        restart::watch(&shared, 1);
        Ok(Supervisor {
            shared,
            closed: false,
        })
    }

    /// The running generation: 1 for the first start, one more per restart.
    pub fn generation(&self) -> u64 {
        self.shared.lock().generation
    }

    /// Restarts so far.
    pub fn restarts(&self) -> u64 {
        self.shared.lock().restarts
    }

    /// The exits (and failed starts) so far, in order (the most recent 32).
    pub fn exits(&self) -> Vec<GenerationExit> {
        self.shared.lock().exits.clone()
    }

    /// Whether the supervision has ended: the policy said no restart, or it gave up.
    pub fn ended(&self) -> bool {
        matches!(self.shared.lock().phase, Phase::Ended | Phase::GaveUp)
    }

    /// Calls `f` with the running generation's handle (its socket, stdio, pid) under the
    /// supervisor's lock — keep it short; `None` while no generation runs (a delay, a start).
    pub fn with_current<R>(&self, f: impl FnOnce(&mut ChildHandle) -> R) -> Option<R> {
        let mut state = self.shared.lock();
        if state.phase != Phase::Running {
            return None;
        }
        state.current.as_mut().map(f)
    }

    /// Calls `callback` with the new generation after each restart (on the worker thread that
    /// started it, under no lock: it may call the supervisor).
    pub fn on_change(&self, callback: impl Fn(u64) + Send + Sync + 'static) {
        self.shared.lock().on_change.push(Arc::new(callback));
    }

    /// Calls `callback` when the supervision ends — the policy said no restart, or the
    /// supervisor gave up — on the event loop's (or a start's) thread, under the supervisor's
    /// lock: it must not block, nor call the supervisor (wake a waiter, send on a channel).
    pub fn on_end(&self, callback: impl Fn() + Send + Sync + 'static) {
        self.shared.lock().on_end.push(Arc::new(callback));
    }

    /// Waits until a generation newer than `after` runs, and returns it; at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::CrashLoop`] once the supervisor gave up (the message names the last
    /// exits); [`ErrorKind::Wait`] when the supervision ended without a restart, was closed,
    /// or the timeout passed.
    pub fn wait_for_start(&self, after: u64, timeout: Duration) -> Result<u64> {
        self.shared.wait_for_start(after, timeout)
    }

    /// The shared state, for the tokio face's blocking-pool waits.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// Ends the supervision: no more restarts; the delay's timer cancelled; a start under way
    /// broken off (its readiness wait ends at once; the half-started server is closed by the
    /// reaper, whose work for it this waits for, at most 10 s); every generation closed with
    /// its ladder. Returns when nothing of the server is left.
    pub fn close(mut self) -> Result<SupervisionReport> {
        self.close_now()
    }

    fn close_now(&mut self) -> Result<SupervisionReport> {
        self.closed = true;
        let stopped = restart::stop(&self.shared);
        let last = stopped.current.map(ChildHandle::close).transpose();
        if let Some(ended) = stopped.ended {
            if let Ok(report) = ended.close() {
                self.shared.lock().keep_report(report);
            }
        }
        if let Some(worker) = stopped.worker {
            let _ = worker.join();
        }
        if stopped.was_starting {
            crate::reaper::drain(Instant::now() + START_DRAIN);
        }
        let mut state = self.shared.lock();
        Ok(SupervisionReport {
            last: last?,
            previous: std::mem::take(&mut state.previous),
            restarts: state.restarts,
            exits: state.exits.clone(),
            gave_up: state.gave_up.clone(),
        })
    }
}

impl Drop for Supervisor {
    /// Closes, as [`close`](Supervisor::close) does, if it was not closed.
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.close_now();
        }
    }
}

impl Shared {
    /// [`Supervisor::wait_for_start`].
    pub(crate) fn wait_for_start(&self, after: u64, timeout: Duration) -> Result<u64> {
        let deadline = crate::core::wait::later(Instant::now(), timeout);
        let mut state = self.lock();
        loop {
            if state.generation > after && state.phase == Phase::Running {
                return Ok(state.generation);
            }
            if let Some(why) = &state.gave_up {
                return Err(restart::crash_loop(self.program.as_deref(), why));
            }
            let why = match (state.phase, state.closing) {
                (_, true) => Some("the supervisor was closed"),
                (Phase::Ended, _) => Some("the server exited and the policy does not restart it"),
                _ => None,
            };
            if let Some(why) = why {
                let program = self.program.as_deref();
                return Err(Error::new(
                    ErrorKind::Wait,
                    program,
                    std::io::Error::other(why),
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::new(
                    ErrorKind::Wait,
                    self.program.as_deref(),
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no start after generation {after} within {timeout:?}"),
                    ),
                ));
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}
