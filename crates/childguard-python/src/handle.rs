//! `spawn()` and [`Handle`]: a [`ChildHandle`] owned by a Python object.
//!
//! Every call that can wait (spawn with readiness, `kill`'s grace, `wait`, `close`) runs with
//! the GIL released (`Python::allow_threads`), so other Python threads — and an asyncio loop
//! whose executor thread made the call — keep running for the whole of it.

use std::ffi::OsString;
use std::os::fd::{IntoRawFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};

use childguard::{ChildHandle, Reap};
use pyo3::prelude::*;

use crate::errors::{closed_error, report_parts, to_py};
use crate::options::{self, ContainSpec, ReadySpec, SignalSpec};

/// A spawned server. The Python `childguard.Server` wraps it.
#[pyclass(module = "childguard._native", frozen)]
#[derive(Debug)]
pub struct Handle {
    program: String,
    pid: Option<u32>,
    /// `None` once closed or detached. A `Mutex` because Python threads may share the object;
    /// it is held across a `kill`'s grace, which is bounded.
    inner: Mutex<Option<ChildHandle>>,
}

/// `subprocess`'s `returncode`: the exit code, or `-N` for death by signal `N`.
fn returncode(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| -status.signal().unwrap_or(0))
}

impl Handle {
    fn lock(&self) -> MutexGuard<'_, Option<ChildHandle>> {
        // A panic cannot poison it (no Rust code of ours panics while holding it), but a
        // poisoned lock still holds a valid handle: use it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the open handle with the GIL released.
    fn with_open<T: Send>(
        &self,
        py: Python<'_>,
        call: &str,
        f: impl FnOnce(&mut ChildHandle) -> childguard::Result<T> + Send,
    ) -> PyResult<T> {
        let result = py.allow_threads(|| self.lock().as_mut().map(f));
        match result {
            None => Err(closed_error(py, &self.program, call)),
            Some(r) => r.map_err(|e| to_py(py, e)),
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

    /// Whether `close()` or `detach()` has run.
    #[getter]
    fn closed(&self) -> bool {
        self.lock().is_none()
    }

    /// A duplicate of our socket end (the caller owns it), or `None` without a socket.
    fn socket_fd(&self, py: Python<'_>) -> PyResult<Option<RawFd>> {
        let guard = self.lock();
        let handle = guard
            .as_ref()
            .ok_or_else(|| closed_error(py, &self.program, "socket"))?;
        match handle.socket() {
            None => Ok(None),
            Some(s) => Ok(Some(s.try_clone()?.into_raw_fd())),
        }
    }

    /// With `socket="activation"`: the listening socket's path (removed on close).
    fn socket_path(&self) -> Option<PathBuf> {
        self.lock()
            .as_ref()
            .and_then(|h| h.socket_path().map(PathBuf::from))
    }

    /// With capture: the tail of the child's output so far.
    fn output_tail(&self) -> Option<String> {
        self.lock().as_ref().and_then(ChildHandle::output_tail)
    }

    /// The returncode if the child has exited, else `None`; never blocks.
    fn try_wait(&self, py: Python<'_>) -> PyResult<Option<i32>> {
        let status = self.with_open(py, "poll", |h| h.try_wait())?;
        Ok(status.map(returncode))
    }

    /// Waits up to `timeout` seconds for the exit: its returncode, or `None`.
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<Option<i32>> {
        let timeout = options::seconds(py, "timeout", Some(timeout))?.unwrap_or_default();
        let status = self.with_open(py, "wait", |h| h.wait_timeout(timeout))?;
        Ok(status.map(returncode))
    }

    /// One rung by hand: `signal`, then up to `grace` seconds for the exit.
    fn kill(&self, py: Python<'_>, signal: SignalSpec, grace: f64) -> PyResult<Option<i32>> {
        let signal = options::signal(py, signal)?;
        let grace = options::seconds(py, "grace", Some(grace))?.unwrap_or_default();
        let status = self.with_open(py, "kill", |h| h.kill(signal, grace))?;
        Ok(status.map(returncode))
    }

    /// The close (shutdown, close, ladder, reap): the report's `Display` line and JSON.
    fn close(&self, py: Python<'_>) -> PyResult<(String, String)> {
        let taken = self.lock().take();
        let handle = taken.ok_or_else(|| closed_error(py, &self.program, "close"))?;
        let report = py.allow_threads(move || handle.close());
        report.map(|r| report_parts(&r)).map_err(|e| to_py(py, e))
    }

    /// Gives the child up: it keeps running, the shared reaper reaps it when it exits. Returns
    /// our socket end's fd (now the caller's), or `None`.
    fn detach(&self, py: Python<'_>) -> PyResult<Option<RawFd>> {
        let taken = self.lock().take();
        let handle = taken.ok_or_else(|| closed_error(py, &self.program, "detach"))?;
        match handle.detach() {
            Ok(socket) => Ok(socket.map(IntoRawFd::into_raw_fd)),
            Err(e) => {
                let message = e.to_string();
                *self.lock() = Some(e.into_handle());
                Err(pyo3::exceptions::PyOSError::new_err(message))
            }
        }
    }
}

impl Drop for Handle {
    /// A `Server` collected without `close()`: the close runs on a thread of its own, so the
    /// ladder's grace never blocks the interpreter (which holds the GIL here). If no thread can
    /// be started, the closure comes back in the error and drops the handle here — blocking, but
    /// still bounded by the ladder, and never leaving the child unreaped.
    fn drop(&mut self) {
        let Some(handle) = self.inner.get_mut().ok().and_then(Option::take) else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("childguard-drop".into())
            .spawn(move || drop(handle));
    }
}

/// `childguard._native.spawn(argv, ...)`: the Python `childguard.spawn` resolves users,
/// addresses and environments, then calls this.
#[pyfunction]
#[pyo3(signature = (
    argv, *, env=None, cwd=None, ladder=None, ready=None, ready_timeout=None,
    contain=None, kill_mode=None, cgroup_parent=None, process_group=false, socket=None,
    capture=None, exit_with_parent=false, uid=None, gid=None, notify_owner=None,
    stdin_null=false, stdout_null=false, stderr_null=false, connect_timeout=None,
    runtime_dir=None, notify_access=None,
))]
#[allow(clippy::too_many_arguments)] // Python keyword arguments, one per Builder setting.
pub fn spawn(
    py: Python<'_>,
    argv: Vec<OsString>,
    env: Option<Vec<(OsString, OsString)>>,
    cwd: Option<PathBuf>,
    ladder: Option<&str>,
    ready: Option<ReadySpec>,
    ready_timeout: Option<f64>,
    contain: Option<ContainSpec>,
    kill_mode: Option<&str>,
    cgroup_parent: Option<PathBuf>,
    process_group: bool,
    socket: Option<&str>,
    capture: Option<&str>,
    exit_with_parent: bool,
    uid: Option<u32>,
    gid: Option<u32>,
    notify_owner: Option<(u32, u32)>,
    stdin_null: bool,
    stdout_null: bool,
    stderr_null: bool,
    connect_timeout: Option<f64>,
    runtime_dir: Option<PathBuf>,
    notify_access: Option<&str>,
) -> PyResult<Handle> {
    let (program, args) = match argv.split_first() {
        Some(split) => split,
        None => {
            return Err(crate::errors::config_error(
                py,
                "argv is empty: no program to run",
            ))
        }
    };
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(env) = env {
        cmd.env_clear().envs(env);
    }
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    if let Some(uid) = uid {
        cmd.uid(uid);
    }
    if let Some(gid) = gid {
        cmd.gid(gid);
    }
    if stdin_null {
        cmd.stdin(Stdio::null());
    }
    if stdout_null {
        cmd.stdout(Stdio::null());
    }
    if stderr_null {
        cmd.stderr(Stdio::null());
    }
    let mut builder = ChildHandle::builder(cmd)
        .socket(options::socket(py, socket)?)
        .process_group(process_group)
        .exit_with_parent(exit_with_parent)
        .contain(options::contain(
            py,
            contain.unwrap_or(ContainSpec::Flag(false)),
        )?)
        .kill_mode(options::kill_mode(py, kill_mode)?)
        // A close from Python climbs the whole ladder before returning (the report is
        // complete); a collected Server closes on a thread of its own (Handle's Drop).
        .reap(Reap::Blocking);
    if let Some(ladder) = options::ladder(py, ladder)? {
        builder = builder.ladder(ladder);
    }
    if let Some(ready) = options::ready(py, ready)? {
        builder = builder.ready(ready);
    }
    if let Some(t) = options::seconds(py, "ready_timeout", ready_timeout)? {
        builder = builder.ready_timeout(t);
    }
    if let Some(t) = options::seconds(py, "connect_timeout", connect_timeout)? {
        builder = builder.connect_timeout(t);
    }
    if let Some(capture) = options::capture(py, capture)? {
        builder = builder.capture(capture);
    }
    if let Some(dir) = cgroup_parent {
        builder = builder.cgroup_parent(dir);
    }
    if let Some(dir) = runtime_dir {
        builder = builder.runtime_dir(dir);
    }
    if let Some((uid, gid)) = notify_owner {
        builder = builder.notify_owner(uid, gid);
    }
    builder = builder.notify_access(options::notify_access(py, notify_access)?);
    let handle = py
        .allow_threads(move || builder.spawn())
        .map_err(|e| to_py(py, e))?;
    Ok(Handle {
        program: program.to_string_lossy().into_owned(),
        pid: handle.id(),
        inner: Mutex::new(Some(handle)),
    })
}
