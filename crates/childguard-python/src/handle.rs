//! `spawn()` and [`Handle`]: a [`ChildHandle`] owned by a Python object.
//!
//! Every call that can wait (spawn with readiness, `kill`'s grace, `wait`, `close`) runs with
//! the GIL released (`Python::allow_threads`), so other Python threads — and an asyncio loop
//! whose executor thread made the call — keep running for the whole of it, and checks for
//! signals every 40 ms, so Ctrl-C interrupts it (`interrupt.rs`).
//!
//! The handle's lock is taken only with the GIL released, and held only for non-blocking
//! steps — never across a wait (waits go through [`childguard::ExitWatch`]). Race avoided,
//! *a lock held across a wait, taken with the GIL*: `repr(server)` while another thread was in
//! `server.wait(4)` used to block for the rest of that wait holding the GIL, stopping every
//! Python thread, the asyncio loop included.

use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use childguard::ChildHandle;
use pyo3::prelude::*;

use crate::errors::{closed_during_wait, closed_error, inherited_error, report_parts, to_py};
use crate::interrupt::{self, Waited};
use crate::options::{self, SignalSpec};
use crate::plan::Plan;

/// A spawned server. The Python `childguard.Server` wraps it.
#[pyclass(module = "childguard._native", frozen)]
#[derive(Debug)]
pub struct Handle {
    program: String,
    pid: Option<u32>,
    /// The process that spawned the server. In a process made by `os.fork()` from it every
    /// call that needs the handle raises `InheritedError`, before taking the lock: a thread of
    /// the parent may have held it at the fork, and in the child no thread would release it.
    owner: u32,
    /// `None` once closed or detached. A `Mutex` because Python threads may share the object;
    /// taken with the GIL released and held for non-blocking steps only.
    inner: Mutex<Option<ChildHandle>>,
    /// With `stderr_lines=True`: Python's end of the line socket (`stdio.rs`), until taken.
    lines: Mutex<Option<UnixStream>>,
}

/// `subprocess`'s `returncode`: the exit code, or `-N` for death by signal `N`.
fn returncode(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| -status.signal().unwrap_or(0))
}

/// `at + wait`, saturating (a timeout too long for the clock means "a century").
fn later(at: Instant, wait: Duration) -> Instant {
    at.checked_add(wait)
        .or_else(|| at.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(at)
}

impl Handle {
    fn lock(&self) -> MutexGuard<'_, Option<ChildHandle>> {
        // A panic cannot poison it (no Rust code of ours panics while holding it), but a
        // poisoned lock still holds a valid handle: use it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `InheritedError` in a process forked from the one that spawned the server.
    fn check_owner(&self, py: Python<'_>, call: &str) -> PyResult<()> {
        if std::process::id() == self.owner {
            Ok(())
        } else {
            Err(inherited_error(py, &self.program, self.owner, call))
        }
    }

    /// Runs `f` on the open handle, the GIL released before the lock is taken. `f` must not
    /// block: the lock is held while it runs.
    fn with_open<T: Send>(
        &self,
        py: Python<'_>,
        call: &str,
        f: impl FnOnce(&mut ChildHandle) -> T + Send,
    ) -> PyResult<T> {
        self.check_owner(py, call)?;
        py.allow_threads(|| self.lock().as_mut().map(f))
            .ok_or_else(|| closed_error(py, &self.program, call))
    }

    /// Waits for the exit until `deadline`, the lock taken only to look (see `interrupt.rs`).
    fn wait_until(&self, py: Python<'_>, call: &str, deadline: Instant) -> PyResult<Option<i32>> {
        let mut look = || self.lock().as_mut().map(ChildHandle::watch_exit);
        match interrupt::wait_until(py, deadline, &mut look) {
            Waited::Exited(status) => Ok(Some(returncode(status))),
            Waited::TimedOut => Ok(None),
            Waited::Closed => Err(closed_during_wait(py, &self.program, call)),
            Waited::Failed(e) => Err(to_py(py, e)),
            Waited::WaitFailed(e) => Err(crate::errors::wait_error(py, &self.program, e)),
            Waited::Interrupted(e) => Err(e),
        }
    }

    /// At interpreter exit (`exit.rs`): closes the handle in the background if it is open and
    /// this process's.
    pub fn close_at_exit(&self, py: Python<'_>) {
        if std::process::id() != self.owner {
            return;
        }
        let taken = py.allow_threads(|| self.lock().take());
        if let Some(handle) = taken {
            py.allow_threads(move || interrupt::close_in_background(handle));
        }
    }
}

#[pymethods]
impl Handle {
    /// The child's pid (kept after the close, for reports and logs).
    #[getter]
    fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// The program spawned, as given.
    #[getter]
    fn program(&self) -> &str {
        &self.program
    }

    /// The pid of the process that spawned the server.
    #[getter]
    fn owner(&self) -> u32 {
        self.owner
    }

    /// Whether this process is a `fork()` of the one that spawned the server (every call but
    /// `pid`, `program`, `owner` and `inherited` then raises `InheritedError`).
    #[getter]
    fn inherited(&self) -> bool {
        std::process::id() != self.owner
    }

    /// Whether `close()` or `detach()` has run.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        self.check_owner(py, "closed")?;
        Ok(py.allow_threads(|| self.lock().is_none()))
    }

    /// A duplicate of our socket end (the caller owns it), or `None` without a socket.
    fn socket_fd(&self, py: Python<'_>) -> PyResult<Option<RawFd>> {
        let cloned = self.with_open(py, "socket", |h| {
            h.socket()
                .map(|s| s.try_clone().map(IntoRawFd::into_raw_fd))
        })?;
        Ok(cloned.transpose()?)
    }

    /// Takes our end of the child's piped stdin (`stdin="pipe"`): its fd, now the caller's —
    /// the close no longer closes it, the caller does (the Python layer before the close, for
    /// the server's EOF). `None`: not piped, or taken.
    fn take_stdin_fd(&self, py: Python<'_>) -> PyResult<Option<RawFd>> {
        let taken = self.with_open(py, "stdin", |h| h.take_stdin().map(OwnedFd::from))?;
        Ok(taken.map(IntoRawFd::into_raw_fd))
    }

    /// Takes our end of the child's piped stdout (`stdout="pipe"`): its fd, now the caller's.
    fn take_stdout_fd(&self, py: Python<'_>) -> PyResult<Option<RawFd>> {
        let taken = self.with_open(py, "stdout", |h| h.take_stdout().map(OwnedFd::from))?;
        Ok(taken.map(IntoRawFd::into_raw_fd))
    }

    /// Takes the line socket's end (`stderr_lines=True`): each captured line, with its `\n`,
    /// until EOF once the capture has ended. Works after the close too (lines still queued).
    fn take_lines_fd(&self, py: Python<'_>) -> PyResult<Option<RawFd>> {
        self.check_owner(py, "lines")?;
        let taken =
            py.allow_threads(|| self.lines.lock().unwrap_or_else(|p| p.into_inner()).take());
        Ok(taken.map(IntoRawFd::into_raw_fd))
    }

    /// With `socket="activation"`: the listening socket's path (removed on close).
    fn socket_path(&self, py: Python<'_>) -> PyResult<Option<PathBuf>> {
        self.check_owner(py, "socket_path")?;
        Ok(py.allow_threads(|| {
            self.lock()
                .as_ref()
                .and_then(|h| h.socket_path().map(PathBuf::from))
        }))
    }

    /// With capture: the tail of the child's output so far.
    fn output_tail(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.check_owner(py, "output_tail")?;
        Ok(py.allow_threads(|| self.lock().as_ref().and_then(ChildHandle::output_tail)))
    }

    /// The returncode if the child has exited, else `None`; never blocks.
    fn try_wait(&self, py: Python<'_>) -> PyResult<Option<i32>> {
        let status = self
            .with_open(py, "poll", ChildHandle::try_wait)?
            .map_err(|e| to_py(py, e))?;
        Ok(status.map(returncode))
    }

    /// Waits up to `timeout` seconds for the exit: its returncode, or `None`. The lock is not
    /// held while it waits; a close on another thread ends the wait (`ClosedError`), Ctrl-C
    /// raises `KeyboardInterrupt` within 0.1 s and the server keeps running.
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<i32>> {
        let timeout = options::seconds(py, "timeout", Some(timeout))?.unwrap_or_default();
        self.check_owner(py, "wait")?;
        self.wait_until(py, "wait", later(Instant::now(), timeout))
    }

    /// One rung by hand: `signal`, then up to `grace` seconds for the exit (waited for as
    /// `wait` waits: no lock held, interruptible).
    fn kill(&self, py: Python<'_>, signal: SignalSpec, grace: f64) -> PyResult<Option<i32>> {
        let signal = options::signal(py, signal)?;
        let grace = options::seconds(py, "grace", Some(grace))?.unwrap_or_default();
        let sent_at = Instant::now();
        // A zero grace sends (and SIGCONT) and looks once: it never blocks.
        let status = self
            .with_open(py, "kill", |h| h.kill(signal, Duration::ZERO))?
            .map_err(|e| to_py(py, e))?;
        match status {
            Some(status) => Ok(Some(returncode(status))),
            None if grace.is_zero() => Ok(None),
            None => self.wait_until(py, "kill", later(sent_at, grace)),
        }
    }

    /// `reload(signal, timeout)`: systemd's `Type=notify-reload` (`ChildHandle::reload`): the
    /// seconds it took, or `ReadyError` (timeout, exit during the reload, watchdog miss) /
    /// `ConfigError` (no `Notify()`). The handle's lock is held during it (other calls on this
    /// server wait); Ctrl-C raises `KeyboardInterrupt` within 0.1 s, the server left reloading.
    fn reload(&self, py: Python<'_>, signal: SignalSpec, timeout: f64) -> PyResult<f64> {
        let signal = options::signal(py, signal)?;
        let timeout = options::seconds(py, "timeout", Some(timeout))?.unwrap_or_default();
        let guard = interrupt::PyInterrupt::new();
        let result = self.with_open(py, "reload", |h| {
            h.reload_interruptible(signal, timeout, guard.interrupt())
        })?;
        match result {
            Ok(took) => Ok(took.as_secs_f64()),
            Err(e) => Err(guard.take().unwrap_or_else(|| to_py(py, e))),
        }
    }

    /// With `watchdog=`: seconds from the spawn to the missed deadline, or `None`.
    fn watchdog_missed(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        self.check_owner(py, "watchdog_missed")?;
        Ok(py.allow_threads(|| {
            self.lock()
                .as_ref()
                .and_then(ChildHandle::watchdog_missed)
                .map(|m| m.at.as_secs_f64())
        }))
    }

    /// The close (shutdown, close, ladder, reap): the report's `Display` line and JSON.
    /// Ctrl-C during it raises `KeyboardInterrupt` within 0.1 s; the rest of the ladder and the
    /// reap then go to the background reaper (the atexit drain waits for it).
    #[pyo3(signature = (cancel=None))]
    fn close(
        &self,
        py: Python<'_>,
        cancel: Option<PyRef<'_, interrupt::Cancel>>,
    ) -> PyResult<(String, String)> {
        self.check_owner(py, "close")?;
        let cancel = cancel.map(|c| std::sync::Arc::clone(&c.flag));
        let taken = py.allow_threads(|| self.lock().take());
        let handle = taken.ok_or_else(|| closed_error(py, &self.program, "close"))?;
        let report = interrupt::close(py, handle, cancel)?;
        report.map(|r| report_parts(&r)).map_err(|e| to_py(py, e))
    }

    /// Gives the child up: it keeps running, the shared reaper reaps it when it exits. Returns
    /// our socket end's fd (now the caller's), or `None`.
    fn detach(&self, py: Python<'_>) -> PyResult<Option<RawFd>> {
        self.check_owner(py, "detach")?;
        let taken = py.allow_threads(|| self.lock().take());
        let handle = taken.ok_or_else(|| closed_error(py, &self.program, "detach"))?;
        match py.allow_threads(move || handle.detach()) {
            Ok(socket) => Ok(socket.map(IntoRawFd::into_raw_fd)),
            Err(e) => {
                let message = e.to_string();
                py.allow_threads(|| *self.lock() = Some(e.into_handle()));
                Err(pyo3::exceptions::PyOSError::new_err(message))
            }
        }
    }
}

impl Drop for Handle {
    /// A `Server` collected without `close()`: closed in the background (shut down, the first
    /// due rung sent; the rest of the ladder and the reap are the background reaper's, which
    /// the atexit drain waits for), so a garbage collection never blocks the interpreter for a
    /// grace period. In a process forked from the owner the library only lets go of its copies
    /// — unless a thread of the parent held the lock at the fork: then nothing is touched (its
    /// fds stay open, close-on-exec, until this process execs or exits).
    fn drop(&mut self) {
        let taken = match self.inner.try_lock() {
            Ok(mut guard) => Some(guard.take()),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner().take()),
            Err(TryLockError::WouldBlock) => None,
        };
        let Some(taken) = taken else {
            std::mem::forget(std::mem::replace(&mut self.inner, Mutex::new(None)));
            return;
        };
        if let Some(handle) = taken {
            interrupt::close_in_background(handle);
        }
    }
}

/// `childguard._native.spawn(plan, ...)`: the Python `childguard.spawn` makes the plan
/// (`plan.rs`), then calls this with the per-start stdio: pipes, the stderr line socket.
#[pyfunction]
#[pyo3(signature = (plan, *, stdin_pipe=false, stdout_pipe=false, stderr_lines=false))]
pub fn spawn(
    py: Python<'_>,
    plan: PyRef<'_, Plan>,
    stdin_pipe: bool,
    stdout_pipe: bool,
    stderr_lines: bool,
) -> PyResult<Handle> {
    let mut cmd = plan.command();
    crate::stdio::pipes(
        py,
        &mut cmd,
        stdin_pipe,
        stdout_pipe,
        (
            &plan.socket_name.as_deref(),
            plan.stdin_null,
            plan.stdout_null,
        ),
    )?;
    let mut builder = plan.builder(cmd);
    let mut lines = None;
    match (plan.capture.clone(), stderr_lines) {
        (Some(capture), true) => {
            let (capture, theirs) = crate::stdio::line_socket(py, capture)?;
            lines = Some(theirs);
            builder = builder.capture(capture);
        }
        (Some(capture), false) => builder = builder.capture(capture),
        (None, true) => {
            return Err(crate::errors::config_error(
                py,
                "stderr_lines=True needs capture= (the lines are the captured ones)",
            ))
        }
        (None, false) => {}
    }
    // Noted before the spawn: an interrupted spawn's server is closed by the reaper, whose
    // drain at exit must allow for this ladder.
    crate::exit::note_ladder(plan.ladder_grace());
    // Interruptible (readiness, activation's connect): Ctrl-C raises at once, and the library
    // closes the server in the background.
    let spawned = interrupt::spawn(py, builder)?;
    let handle = spawned.map_err(|e| to_py(py, e))?;
    Ok(Handle {
        program: plan.program(),
        pid: handle.id(),
        owner: std::process::id(),
        inner: Mutex::new(Some(handle)),
        lines: Mutex::new(lines),
    })
}
