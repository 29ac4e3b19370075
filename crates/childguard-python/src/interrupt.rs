//! The waits of the Python calls, interruptible by Ctrl-C.
//!
//! A wait runs with the GIL released, so Python's signal handler only sets a flag: nothing
//! raises `KeyboardInterrupt` until some thread runs Python code again. So every wait here is
//! cut into slices of at most [`SIGNAL_CHECK`]: between two, the waiting thread takes the GIL
//! back for a moment and calls `PyErr_CheckSignals` (`Python::check_signals`), which runs the
//! handlers on the main thread (elsewhere it does nothing). What an interrupted wait leaves:
//!
//! - `wait`/`kill`'s grace ([`wait_until`]): nothing — the server keeps running.
//! - `close()` ([`close`]): the rest of the ladder, on its schedule, and the reap go to the
//!   library's background reaper (`CloseControl::hand_off_when`); the atexit drain
//!   (`exit.rs`) waits for it before the interpreter exits.
//! - spawn with `ready=` ([`spawn_ready`]): the readiness wait cannot be cut short from
//!   outside, so it runs on a thread of its own; the interrupted caller returns at once, and
//!   that thread closes the server as soon as the spawn returns (ready, or `ready_timeout`
//!   passed: the library closes it then), in the background.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use childguard::{Builder, ChildHandle, CloseControl, CloseReport, ExitWatch};
use pyo3::prelude::*;

use crate::exit;

/// The longest a wait runs without checking for signals: Ctrl-C raises `KeyboardInterrupt`
/// within this (plus the time to take the GIL back).
pub const SIGNAL_CHECK: Duration = Duration::from_millis(40);

/// `PyErr_CheckSignals`, from a thread that released the GIL: the handler's exception, if a
/// signal came and its handler raised.
fn signal_raised() -> Option<PyErr> {
    Python::with_gil(|py| py.check_signals().err())
}

/// One look at the child, the lock held only for that look: `Ok(None)`: the handle is closed.
pub type Look<'a> = dyn FnMut() -> Option<childguard::Result<ExitWatch>> + Send + 'a;

/// How a wait ended.
pub enum Waited {
    Exited(std::process::ExitStatus),
    TimedOut,
    /// The handle was closed (or detached) by another thread during the wait.
    Closed,
    Failed(childguard::Error),
    WaitFailed(std::io::Error),
    Interrupted(PyErr),
}

/// Waits until the child exits or `deadline`, looking with `look` (which takes the handle's
/// lock for one non-blocking [`ChildHandle::watch_exit`]) and waiting on the watch with no
/// lock held and the GIL released. Race avoided, *a lock held across a wait*: the old wait held
/// the handle's lock for its whole length, so a `repr()` or `close()` from another thread
/// blocked until it ended — with the GIL, freezing every Python thread. A close from another
/// thread is seen within one slice (the look finds the handle gone).
pub fn wait_until(py: Python<'_>, deadline: Instant, look: &mut Look<'_>) -> Waited {
    loop {
        let watched = py.allow_threads(&mut *look);
        let watch = match watched {
            None => return Waited::Closed,
            Some(Err(e)) => return Waited::Failed(e),
            Some(Ok(watch)) => watch,
        };
        if let Some(status) = watch.exited() {
            return Waited::Exited(status);
        }
        let now = Instant::now();
        if now >= deadline {
            return Waited::TimedOut;
        }
        let slice = deadline.min(now + SIGNAL_CHECK);
        if let Err(e) = py.allow_threads(|| watch.wait_until(slice)) {
            return Waited::WaitFailed(e);
        }
        if let Err(e) = py.check_signals() {
            return Waited::Interrupted(e);
        }
    }
}

/// `handle.close()` with the GIL released, checking for signals every [`SIGNAL_CHECK`]: an
/// interrupted close hands the rest to the background reaper and returns the exception.
pub fn close(
    py: Python<'_>,
    handle: ChildHandle,
) -> Result<childguard::Result<CloseReport>, PyErr> {
    let mut interrupted = None;
    let report = py.allow_threads(|| {
        handle.close_with(CloseControl::new().hand_off_when(SIGNAL_CHECK, || {
            interrupted = signal_raised();
            interrupted.is_some()
        }))
    });
    match interrupted {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// Closes `handle` without waiting: the socket shut down, the first due rung sent, the rest
/// of the ladder and the reap left to the background reaper. For a `Server` collected or still
/// open at exit, and a spawn whose caller was interrupted. Call with the GIL released where
/// possible: it waits for nothing, but may take a millisecond (the reaper's first start).
pub fn close_in_background(handle: ChildHandle) {
    let _report_or_error =
        handle.close_with(CloseControl::new().hand_off_when(Duration::ZERO, || true));
}

/// A spawn running on its thread.
enum Slot {
    /// Not taken by the thread yet (it may have failed to start).
    ToSpawn(Box<Builder>),
    Spawning,
    Done(Box<childguard::Result<ChildHandle>>),
    /// The caller was interrupted: the thread closes what the spawn returns.
    Abandoned,
}

struct Pending {
    slot: Mutex<Slot>,
    done: Condvar,
}

impl Pending {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `builder.spawn()` (which waits for readiness) on a thread of its own, the caller waiting for
/// it in slices with signal checks; see the module's doc for what an interrupt leaves. If no
/// thread can be started, the spawn runs on the caller's thread, GIL released, not
/// interruptible. `bound`: the longest the spawn can take, for the atexit drain.
pub fn spawn_ready(
    py: Python<'_>,
    builder: Builder,
    bound: Duration,
) -> Result<childguard::Result<ChildHandle>, PyErr> {
    let pending = Arc::new(Pending {
        slot: Mutex::new(Slot::ToSpawn(Box::new(builder))),
        done: Condvar::new(),
    });
    let theirs = Arc::clone(&pending);
    let in_flight = exit::SpawnInFlight::begin(bound);
    let started = std::thread::Builder::new()
        .name("childguard-spawn".into())
        .spawn(move || {
            let _counted = in_flight;
            let builder = match std::mem::replace(&mut *theirs.lock(), Slot::Spawning) {
                Slot::ToSpawn(builder) => builder,
                _ => return,
            };
            let result = (*builder).spawn();
            let mut slot = theirs.lock();
            if matches!(*slot, Slot::Abandoned) {
                drop(slot);
                if let Ok(handle) = result {
                    close_in_background(handle);
                }
                return;
            }
            *slot = Slot::Done(Box::new(result));
            theirs.done.notify_all();
        });
    if started.is_err() {
        // The closure (and the counted guard) went with the error; the builder is still here.
        if let Slot::ToSpawn(builder) = std::mem::replace(&mut *pending.lock(), Slot::Spawning) {
            return Ok(py.allow_threads(move || (*builder).spawn()));
        }
    }
    loop {
        let finished = py.allow_threads(|| {
            let mut slot = pending.lock();
            let until = Instant::now() + SIGNAL_CHECK;
            loop {
                if let Slot::Done(_) = &*slot {
                    return match std::mem::replace(&mut *slot, Slot::Spawning) {
                        Slot::Done(result) => Some(*result),
                        _ => None,
                    };
                }
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return None;
                }
                slot = pending
                    .done
                    .wait_timeout(slot, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
        });
        if let Some(result) = finished {
            return Ok(result);
        }
        if let Err(e) = py.check_signals() {
            // Race avoided, *ready just as the interrupt came*: the slot is looked at under its
            // lock, so the server is closed here (it was ready) or by the thread (not yet).
            let late = std::mem::replace(&mut *pending.lock(), Slot::Abandoned);
            if let Slot::Done(done) = late {
                if let Ok(handle) = *done {
                    py.allow_threads(move || close_in_background(handle));
                }
            }
            return Err(e);
        }
    }
}
