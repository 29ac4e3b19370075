//! `childguard._native.supervise(plan, ...)` and [`Supervised`]: the library's `Supervisor`
//! owned by a Python object (the Python `childguard.Supervisor` wraps it). Each start is made
//! from the [`Plan`] without Python, on the library's threads; every wait runs with the GIL
//! released.

use std::os::fd::{IntoRawFd, RawFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use childguard::{Restart, RestartPolicy, Supervisor};
use pyo3::prelude::*;

use crate::errors::{closed_error, config_error, report_parts, to_py};
use crate::plan::Plan;

/// A supervised server.
#[pyclass(module = "childguard._native", frozen)]
#[derive(Debug)]
pub struct Supervised {
    program: String,
    /// `None` once closed.
    inner: Mutex<Option<Supervisor>>,
}

/// What `close()` returns: the running start's report (line, JSON), the ended starts'
/// reports, the restarts, why it gave up, and the exits as text.
type Closed = (
    Option<(String, String)>,
    Vec<(String, String)>,
    u64,
    Option<String>,
    Vec<String>,
);

/// `supervise(plan, restart=..., ...)`: starts the first generation (its readiness included,
/// the GIL released) and supervises it.
#[pyfunction]
#[pyo3(signature = (
    plan, *, restart, delay_first=0.1, delay_max=5.0, burst=5, interval=60.0, hold=1.0,
))]
#[allow(clippy::too_many_arguments)]
pub fn supervise(
    py: Python<'_>,
    plan: PyRef<'_, Plan>,
    restart: &str,
    delay_first: f64,
    delay_max: f64,
    burst: u32,
    interval: f64,
    hold: f64,
) -> PyResult<Supervised> {
    let policy = match restart {
        "no" => RestartPolicy::Never,
        "on-failure" => RestartPolicy::OnFailure,
        "always" => RestartPolicy::Always,
        other => {
            return Err(config_error(
                py,
                format!("restart={other:?}: expected \"no\", \"on-failure\" or \"always\""),
            ))
        }
    };
    let secs = |name: &str, v: f64| -> PyResult<Duration> {
        Duration::try_from_secs_f64(v)
            .map_err(|_| config_error(py, format!("{name}={v}: a number of seconds, 0 or more")))
    };
    let restart = Restart::new(policy)
        .delay(
            secs("restart_delay", delay_first)?,
            secs("restart_delay", delay_max)?,
        )
        .limit(burst, secs("restart_limit", interval)?)
        .hold(secs("restart_hold", hold)?);
    let plan: Plan = plan.clone();
    crate::exit::note_ladder(plan.ladder_grace());
    let program = plan.program();
    let make = move || {
        let builder = plan.builder(plan.command());
        match &plan.capture {
            Some(capture) => builder.capture(capture.clone()),
            None => builder,
        }
    };
    let started = py.allow_threads(move || Supervisor::start(make, restart));
    let sup = started.map_err(|e| to_py(py, e))?;
    Ok(Supervised {
        program,
        inner: Mutex::new(Some(sup)),
    })
}

impl Supervised {
    fn lock(&self) -> MutexGuard<'_, Option<Supervisor>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the open supervisor (its calls do not block: the lock is brief).
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        call: &str,
        f: impl FnOnce(&Supervisor) -> T + Send,
    ) -> PyResult<T> {
        py.allow_threads(|| self.lock().as_ref().map(f))
            .ok_or_else(|| closed_error(py, &self.program, call))
    }
}

#[pymethods]
impl Supervised {
    /// The running generation (1, then one more per restart).
    fn generation(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, "generation", Supervisor::generation)
    }

    /// Restarts so far.
    fn restarts(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, "restarts", Supervisor::restarts)
    }

    /// Whether the supervision ended (no restart by the policy, or it gave up).
    fn ended(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, "ended", Supervisor::ended)
    }

    /// The running generation's pid (`None` during a delay or a start).
    fn pid(&self, py: Python<'_>) -> PyResult<Option<u32>> {
        self.with(py, "pid", |s| s.with_current(|h| h.id()).flatten())
    }

    /// A duplicate of the running generation's socket (the caller's to close), or `None`.
    fn socket_fd(&self, py: Python<'_>) -> PyResult<Option<RawFd>> {
        let dup = self.with(py, "socket_fd", |s| {
            s.with_current(|h| h.socket().map(|sock| sock.try_clone()))
                .flatten()
        })?;
        match dup {
            None => Ok(None),
            Some(Ok(sock)) => Ok(Some(sock.into_raw_fd())),
            Some(Err(e)) => Err(pyo3::exceptions::PyOSError::new_err(e.to_string())),
        }
    }

    /// The exits so far, as text (`start 1: exit 3; its output ended with: …`).
    fn exits(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.with(py, "exits", |s| {
            s.exits().iter().map(ToString::to_string).collect()
        })
    }

    /// Waits (the GIL released) for a generation newer than `after`; `CrashLoopError` once
    /// the supervisor gave up, `WaitError` when it ended or the timeout passed.
    fn wait_for_start(&self, py: Python<'_>, after: u64, timeout: f64) -> PyResult<u64> {
        let timeout = Duration::try_from_secs_f64(timeout.max(0.0)).unwrap_or(Duration::MAX);
        let waited = py.allow_threads(|| {
            self.lock()
                .as_ref()
                .map(|s| s.wait_for_start(after, timeout))
        });
        match waited {
            None => Err(closed_error(py, &self.program, "wait_for_start")),
            Some(r) => r.map_err(|e| to_py(py, e)),
        }
    }

    /// Ends the supervision and closes every generation (the GIL released).
    fn close(&self, py: Python<'_>) -> PyResult<Closed> {
        let taken = py.allow_threads(|| self.lock().take());
        let sup = taken.ok_or_else(|| closed_error(py, &self.program, "close"))?;
        let report = py
            .allow_threads(move || sup.close())
            .map_err(|e| to_py(py, e))?;
        Ok((
            report.last.as_ref().map(report_parts),
            report.previous.iter().map(report_parts).collect(),
            report.restarts,
            report.gave_up.clone(),
            report.exits.iter().map(ToString::to_string).collect(),
        ))
    }
}

impl Drop for Supervised {
    /// Collected without `close()`: closed on a thread of its own, so a garbage collection
    /// never waits for a ladder.
    fn drop(&mut self) {
        if let Some(sup) = self.lock().take() {
            let _ = std::thread::Builder::new()
                .name("childguard-sup-drop".into())
                .spawn(move || drop(sup));
        }
    }
}
