//! The waits of the Python calls, interruptible by Ctrl-C.
//!
//! A wait runs with the GIL released, so Python's signal handler only sets a flag: nothing
//! raises `KeyboardInterrupt` until some thread runs Python code again. So every wait passes
//! the library an [`Interrupt`] whose check takes the GIL back for a moment and calls
//! `PyErr_CheckSignals` (`Python::check_signals`), which runs the handlers on the main thread
//! (elsewhere it does nothing). The library's one wait primitive calls it at least every
//! [`childguard::INTERRUPT_CHECK_EVERY`] (20 ms) and at once when the signal interrupts its
//! `poll` (`EINTR`, when the signal lands on the waiting thread). The exception the handler
//! raised is kept ([`PyInterrupt::take`]) and raised by the call. What an interrupted wait
//! leaves (the library's rules, `childguard::Interrupt`):
//!
//! - `wait`/`kill`'s grace ([`wait_until`]): nothing — the server keeps running.
//! - `close()` ([`close`]): the rest of the ladder, on its schedule, and the reap go to the
//!   library's background reaper; the atexit drain (`exit.rs`) waits for it before the
//!   interpreter exits.
//! - spawn with `ready=` ([`spawn`]): the spawn returns at once, and the server is closed by
//!   its ladder in the background (shut down, first rung sent now, the rest by the reaper).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use childguard::{Builder, ChildHandle, CloseControl, CloseReport, ExitWatch, Interrupt};
use pyo3::prelude::*;

/// `childguard._native.Cancel()`: a flag that ends a `close(cancel)` on another thread — set by
/// `aclose()` when its task is cancelled (Ctrl-C under `asyncio.run` cancels the main task),
/// so the executor thread stops waiting and the rest of the ladder goes to the reaper.
#[pyclass(module = "childguard._native", frozen)]
#[derive(Debug, Default)]
pub struct Cancel {
    pub flag: Arc<AtomicBool>,
}

#[pymethods]
impl Cancel {
    #[new]
    fn new() -> Cancel {
        Cancel::default()
    }

    /// Sets the flag: the close reading it stops waiting within 20 ms.
    fn set(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }
}

/// How often a wait looks at the handle again (a close from another thread ends the wait
/// within this): the handle's lock is taken only for a look, never across a wait.
pub const LOOK_AGAIN: Duration = Duration::from_millis(40);

/// `PyErr_CheckSignals` as the library's interrupt check, the exception kept for the caller.
#[derive(Clone)]
pub struct PyInterrupt {
    raised: Arc<Mutex<Option<PyErr>>>,
    interrupt: Interrupt,
}

impl PyInterrupt {
    pub fn new() -> PyInterrupt {
        PyInterrupt::or_cancelled(None)
    }

    /// [`PyInterrupt::new`], also ended once `cancel` is set (`aclose()` cancelled: its close
    /// runs on an executor thread, where no signal handler runs): `CancelledError` then.
    pub fn or_cancelled(cancel: Option<Arc<AtomicBool>>) -> PyInterrupt {
        let raised: Arc<Mutex<Option<PyErr>>> = Arc::default();
        let keep = Arc::clone(&raised);
        let interrupt = Interrupt::new(move || {
            if cancel.as_ref().is_some_and(|c| c.load(Ordering::SeqCst)) {
                let e = pyo3::exceptions::asyncio::CancelledError::new_err(
                    "aclose() was cancelled: the rest of the close went to childguard's reaper",
                );
                *keep.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "aclose() was cancelled",
                ));
            }
            // Called on the waiting thread, which released the GIL: take it for the check.
            match Python::with_gil(|py| py.check_signals()) {
                Ok(()) => Ok(()),
                Err(e) => {
                    *keep.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    Err(std::io::Error::new(
                        std::io::ErrorKind::Interrupted,
                        "a Python signal handler raised (KeyboardInterrupt on Ctrl-C)",
                    ))
                }
            }
        });
        PyInterrupt { raised, interrupt }
    }

    pub fn interrupt(&self) -> &Interrupt {
        &self.interrupt
    }

    /// The exception a signal handler raised during the wait, if one did.
    pub fn take(&self) -> Option<PyErr> {
        self.raised.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
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
/// lock held and the GIL released, interruptible. Race avoided, *a lock held across a wait*:
/// the old wait held the handle's lock for its whole length, so a `repr()` or `close()` from
/// another thread blocked until it ended — with the GIL, freezing every Python thread. A close
/// from another thread is seen within [`LOOK_AGAIN`] (the look finds the handle gone).
pub fn wait_until(py: Python<'_>, deadline: Instant, look: &mut Look<'_>) -> Waited {
    let checked = PyInterrupt::new();
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
        let slice = deadline.min(now + LOOK_AGAIN);
        let waited =
            py.allow_threads(|| watch.wait_until_interruptible(slice, checked.interrupt()));
        if let Some(e) = checked.take() {
            return Waited::Interrupted(e);
        }
        if let Err(e) = waited {
            return Waited::WaitFailed(e);
        }
    }
}

/// `handle.close()` with the GIL released, interruptible: an interrupted close hands the rest
/// to the background reaper and returns the exception.
pub fn close(
    py: Python<'_>,
    handle: ChildHandle,
    cancel: Option<Arc<AtomicBool>>,
) -> Result<childguard::Result<CloseReport>, PyErr> {
    let checked = PyInterrupt::or_cancelled(cancel);
    let report = py.allow_threads(|| {
        handle.close_with(CloseControl::new().interrupt(checked.interrupt().clone()))
    });
    match checked.take() {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// Closes `handle` without waiting: the socket shut down, the first due rung sent, the rest
/// of the ladder and the reap left to the background reaper. For a `Server` collected or still
/// open at exit. Call with the GIL released where possible: it waits for nothing, but may take
/// a millisecond (the reaper's first start).
pub fn close_in_background(handle: ChildHandle) {
    let _report_or_error =
        handle.close_with(CloseControl::new().hand_off_when(Duration::ZERO, || true));
}

/// `builder.spawn()` (which waits for readiness, and for socket activation's connect) with the
/// GIL released, interruptible: interrupted, the spawn returns at once with the exception and
/// the library closes the server in the background (the atexit drain waits for that).
pub fn spawn(py: Python<'_>, builder: Builder) -> Result<childguard::Result<ChildHandle>, PyErr> {
    let checked = PyInterrupt::new();
    let builder = builder.interrupt(checked.interrupt().clone());
    let spawned = py.allow_threads(move || builder.spawn());
    match checked.take() {
        // The handler's exception is raised; the library closes the server in the background.
        // A check that raised just as the spawn succeeded (never, as the library stands: an
        // `Err` from the check always ends the wait) would leave a handle: closed here alike.
        Some(e) => {
            if let Ok(handle) = spawned {
                py.allow_threads(move || close_in_background(handle));
            }
            Err(e)
        }
        None => Ok(spawned),
    }
}
