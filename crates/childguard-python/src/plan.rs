//! `childguard._native.plan(argv, ...)`: what `spawn()` and `supervise()` start, checked once
//! and kept as Rust values ([`Plan`]), so that a supervisor makes each start's builder from
//! it without Python (its starts run on the library's worker threads).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use childguard::{
    Builder, Capture, ChildHandle, Containment, KillMode, Ladder, Limits, NotifyAccess, Ready,
    Reap, SocketMode,
};
use pyo3::prelude::*;

use crate::options::{self, ContainSpec, ReadySpec};

/// A start's description. The Python `spawn()`/`supervise()` make one with `plan(...)`.
#[pyclass(module = "childguard._native", frozen)]
#[derive(Debug, Clone)]
pub struct Plan {
    pub(crate) argv: Vec<OsString>,
    env: Option<Vec<(OsString, OsString)>>,
    cwd: Option<PathBuf>,
    uid: Option<u32>,
    gid: Option<u32>,
    pub(crate) stdin_null: bool,
    pub(crate) stdout_null: bool,
    stderr_null: bool,
    pub(crate) socket_name: Option<String>,
    socket: SocketMode,
    process_group: bool,
    skip_ignored: bool,
    exit_with_parent: bool,
    contain: Containment,
    kill_mode: KillMode,
    ladder: Option<Ladder>,
    ready: Option<Ready>,
    ready_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    pub(crate) capture: Option<Capture>,
    cgroup_parent: Option<PathBuf>,
    runtime_dir: Option<PathBuf>,
    notify_owner: Option<(u32, u32)>,
    notify_access: NotifyAccess,
    watchdog: Option<Duration>,
    limits: Option<Limits>,
}

/// `childguard._native.plan(argv, ...)`: every `spawn()` setting, checked now (a bad one is a
/// `ConfigError` naming it).
#[pyfunction]
#[pyo3(signature = (
    argv, *, env=None, cwd=None, ladder=None, ready=None, ready_timeout=None,
    contain=None, kill_mode=None, cgroup_parent=None, process_group=false, socket=None,
    capture=None, exit_with_parent=false, uid=None, gid=None, notify_owner=None,
    stdin_null=false, stdout_null=false, stderr_null=false, connect_timeout=None,
    runtime_dir=None, notify_access=None, skip_ignored=true, watchdog=None, limits=None,
    passthrough=false,
))]
#[allow(clippy::too_many_arguments)] // Python keyword arguments, one per Builder setting.
pub fn plan(
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
    skip_ignored: bool,
    watchdog: Option<f64>,
    limits: Option<Vec<(String, String)>>,
    passthrough: bool,
) -> PyResult<Plan> {
    if argv.is_empty() {
        return Err(crate::errors::config_error(
            py,
            "argv is empty: no program to run",
        ));
    }
    // `passthrough`: each captured line also written to our stderr (fd 2, `[program pid]
    // line`), by the library's callback thread — no Python, no GIL.
    let capture = options::capture(py, capture)?;
    if passthrough && capture.is_none() {
        return Err(crate::errors::config_error(
            py,
            "passthrough=True needs capture= (the lines passed on are the captured ones)",
        ));
    }
    let capture = capture.map(|c| c.passthrough(passthrough));
    Ok(Plan {
        argv,
        env,
        cwd,
        uid,
        gid,
        stdin_null,
        stdout_null,
        stderr_null,
        socket_name: socket.map(str::to_owned),
        socket: options::socket(py, socket)?,
        process_group,
        skip_ignored,
        exit_with_parent,
        contain: options::contain(py, contain.unwrap_or(ContainSpec::Flag(false)))?,
        kill_mode: options::kill_mode(py, kill_mode)?,
        ladder: options::ladder(py, ladder)?,
        ready: options::ready(py, ready)?,
        ready_timeout: options::seconds(py, "ready_timeout", ready_timeout)?,
        connect_timeout: options::seconds(py, "connect_timeout", connect_timeout)?,
        capture,
        cgroup_parent,
        runtime_dir,
        notify_owner,
        notify_access: options::notify_access(py, notify_access)?,
        watchdog: options::seconds(py, "watchdog", watchdog)?,
        limits: limits.map(|l| options::limits(py, &l)).transpose()?,
    })
}

impl Plan {
    /// The command, with its environment, directory, user and `/dev/null`s.
    pub(crate) fn command(&self) -> Command {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]);
        if let Some(env) = &self.env {
            cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
        if let Some(cwd) = &self.cwd {
            cmd.current_dir(cwd);
        }
        if let Some(uid) = self.uid {
            cmd.uid(uid);
        }
        if let Some(gid) = self.gid {
            cmd.gid(gid);
        }
        if self.stdin_null {
            cmd.stdin(Stdio::null());
        }
        if self.stdout_null {
            cmd.stdout(Stdio::null());
        }
        if self.stderr_null {
            cmd.stderr(Stdio::null());
        }
        cmd
    }

    /// The builder for `cmd` (this plan's [`command`](Plan::command), maybe with pipes), its
    /// capture left to the caller (`spawn` may add a line socket to it).
    pub(crate) fn builder(&self, cmd: Command) -> Builder {
        // The Command is built from the caller's argv: no pre_exec hook.
        let mut builder = ChildHandle::builder(cmd)
            .own_spawn(true)
            .socket(self.socket.clone())
            .process_group(self.process_group)
            .skip_ignored_rungs(self.skip_ignored)
            .exit_with_parent(self.exit_with_parent)
            .contain(self.contain.clone())
            .kill_mode(self.kill_mode)
            // A close from Python climbs the whole ladder before returning (the report is
            // complete) unless Ctrl-C interrupts it; a collected Server closes in the
            // background (Handle's Drop).
            .reap(Reap::Blocking)
            .notify_access(self.notify_access);
        if let Some(ladder) = &self.ladder {
            builder = builder.ladder(ladder.clone());
        }
        if let Some(t) = self.ready_timeout {
            builder = builder.ready_timeout(t);
        }
        if let Some(t) = self.connect_timeout {
            builder = builder.connect_timeout(t);
        }
        if let Some(ready) = &self.ready {
            builder = builder.ready(ready.clone());
        }
        if let Some(dir) = &self.cgroup_parent {
            builder = builder.cgroup_parent(dir.clone());
        }
        if let Some(limits) = &self.limits {
            builder = builder.limits(limits.clone());
        }
        if let Some(dir) = &self.runtime_dir {
            builder = builder.runtime_dir(dir.clone());
        }
        if let Some((uid, gid)) = self.notify_owner {
            builder = builder.notify_owner(uid, gid);
        }
        if let Some(interval) = self.watchdog {
            builder = builder.watchdog(interval);
        }
        builder
    }

    /// The whole grace of this plan's ladder (for the atexit drain).
    pub(crate) fn ladder_grace(&self) -> Duration {
        self.ladder.clone().unwrap_or_default().total_grace()
    }

    /// The program, for messages.
    pub(crate) fn program(&self) -> String {
        self.argv[0].to_string_lossy().into_owned()
    }
}
