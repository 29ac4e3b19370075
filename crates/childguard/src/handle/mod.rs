//! [`ChildHandle`]: a spawned server and the socket connected to it, closed as one.
//!
//! This file is the handle itself and its small accessors, waits and kill; the rest is in a
//! file per job: [`builder`] (the `Builder` and its options), [`spawn`] (`Builder::spawn`:
//! placement, cgroup, stdio, activation, readiness), [`close`] (every close path and its
//! steps), [`on_drop`] (the `Drop` and how it closes).

#[cfg(doctest)]
mod api_marks;
mod birth;
mod builder;
mod check_once;
pub(crate) mod close;
#[cfg(target_os = "linux")]
mod container;
pub(crate) mod detach;
pub(crate) mod exit_watch;
mod interruptible;
pub(crate) mod on_drop;
pub(crate) mod output;
pub(crate) mod readiness;
mod spawn;
mod stdio;
mod stdio_server;

pub use builder::{Builder, Reap, SocketMode, DEFAULT_CONNECT_TIMEOUT};

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::base::signal::Signal;
use crate::close::ladder::Ladder;
use crate::core::wait::later;
use crate::error::{Error, ErrorKind, Result};
use crate::handle::readiness::notify::NotifySocket;
use crate::process::Process;
use crate::spawn::activation::SocketDir;
use crate::spawn::capture::Captured;
use crate::spawn::stdio::Pipes;

// Named by the docs only.
#[cfg(doc)]
use crate::spawn::capture::Capture;

/// A spawned server process and the socket connected to it, closed together.
///
/// # The close timeline
///
/// [`close`](ChildHandle::close) and `Drop` run the same path, top to bottom:
///
/// 1. **Shutdown** — `shutdown(SHUT_RDWR)` on our socket. This is what wakes a server blocked in
///    `read` or `write` on it, even if another process (a forked worker) still holds a copy of
///    its end: `close` alone would not, as long as any copy stays open.
/// 2. **Close** — our socket fd is closed. With [`SocketMode::Activation`], the socket file and
///    its private directory are removed right after.
/// 3. **EOF wait** (only if the ladder starts with `EOF:…`) — a well-behaved server exits on
///    EOF; give it that long before any signal.
/// 4. **Rungs** — for each rung: send its signal (to the group with
///    [`process_group`](Builder::process_group)), then `SIGCONT` if the signal is catchable so
///    a stopped server can act on it; wait up to the rung's grace for the exit, woken by the
///    pidfd the moment it happens. The next rung comes only if the grace ran out.
/// 5. **Reap** — `waitid` collects the exit status and frees the pid. A child that outlived
///    the last rung (uninterruptible sleep) is handed to the background reaper instead, and the
///    report says so: the close never blocks longer than the ladder's
///    [`total_grace`](Ladder::total_grace) plus a few milliseconds.
///
/// A [`kill`](ChildHandle::kill) before the close counts as a rung already taken: the close
/// resumes after the first rung sending that signal, once its grace (from the kill) ran out.
///
/// [`detach`](ChildHandle::detach) gives the child up instead of closing it: it keeps running,
/// you keep the socket, and the shared reaper still reaps it when it exits.
///
/// With the `tokio` feature, a handle dropped (not closed) inside a tokio context closes as with
/// [`Reap::Background`] unless the builder chose [`Reap::Blocking`] explicitly (kept on a
/// multi-thread runtime, see there), so that no grace period blocks an executor thread:
/// shutdown, close, the first due rung, and the rest is climbed by the shared
/// [`reaper`](crate::reaper). `close_async` (see `childguard::tokio`) is the awaitable close.
#[derive(Debug)]
#[must_use = "dropping a ChildHandle closes the child at once: its ladder runs (up to 8 s by default); keep it, or call close()/detach()"]
pub struct ChildHandle {
    program: Option<String>,
    socket: Option<UnixStream>,
    process: Option<Process>,
    ladder: Ladder,
    reap: Reap,
    /// Whether `reap` was set with [`Builder::reap`] (see [`crate::handle::on_drop`]).
    reap_chosen: bool,
    release_memory: bool,
    /// [`Builder::skip_ignored_rungs`].
    skip_ignored: bool,
    last_kill: Option<(Signal, Instant)>,
    closed: bool,
    /// Socket activation: the socket file and its private directory, removed on close.
    socket_dir: Option<SocketDir>,
    /// The stdio pipes the Command asked for (see [`crate::spawn::stdio`]).
    pipes: Pipes,
    /// [`Builder::capture`]: the handle's side of the capture (drained by the event loop).
    capture: Option<Captured>,
    /// `Containment::BestEffort` fell back to the process group: why.
    containment_fallback: Option<String>,
    /// The backend that holds the child's tree, and those passed over.
    containment: Option<crate::process::containment::ContainmentReport>,
    /// [`Builder::own_spawn`] was chosen but std's path spawned the child: why (a note).
    spawned_by_std: Option<String>,
    /// [`Ready::Notify`]: the `NOTIFY_SOCKET`, read until the close ends.
    notify: Option<NotifySocket>,
}

impl ChildHandle {
    /// A handle over a socket for which we spawned no server. Closing it shuts the socket down
    /// and closes it; it never signals anyone.
    pub fn from_socket(socket: impl Into<OwnedFd>) -> ChildHandle {
        ChildHandle {
            program: None,
            socket: Some(UnixStream::from(socket.into())),
            process: None,
            ladder: Ladder::default(),
            reap: Reap::Blocking,
            reap_chosen: false,
            release_memory: false,
            skip_ignored: true,
            last_kill: None,
            closed: false,
            socket_dir: None,
            pipes: Pipes::default(),
            capture: None,
            containment_fallback: None,
            containment: None,
            spawned_by_std: None,
            notify: None,
        }
    }

    /// The stdio pipes the Command asked for, for the accessors in [`crate::spawn::stdio`].
    pub(crate) fn pipes_mut(&mut self) -> &mut Pipes {
        &mut self.pipes
    }

    /// Our end of the socket, if the handle has one.
    pub fn socket(&self) -> Option<&UnixStream> {
        self.socket.as_ref()
    }

    /// With [`SocketMode::Activation`]: the listening socket's path, for clients that open
    /// more connections (it is removed on close).
    pub fn socket_path(&self) -> Option<&Path> {
        self.socket_dir.as_ref().map(SocketDir::path)
    }

    /// With [`Builder::capture`]: the tail of the child's output as it stands (complete lines,
    /// oldest first, bounded by [`Capture::tail_bytes`]/[`Capture::tail_lines`]).
    pub fn output_tail(&self) -> Option<String> {
        self.capture.as_ref().map(Captured::tail_text)
    }

    /// On the event loop's thread, once the child has exited: reads what its captured pipes
    /// hold into the tail now, so that [`output_tail`](ChildHandle::output_tail) ends with its
    /// last output (see `spawn/capture/drain.rs`, `read_now`).
    pub(crate) fn read_output_now_on_loop(&self, ops: &mut crate::core::event_loop::Ops) {
        if let Some(capture) = &self.capture {
            capture.read_now_on_loop(ops);
        }
    }

    /// The capture, lent to a readiness wait ([`put_capture`](ChildHandle::put_capture) gives
    /// it back).
    pub(crate) fn take_capture(&mut self) -> Option<Captured> {
        self.capture.take()
    }

    pub(crate) fn put_capture(&mut self, captured: Captured) {
        self.capture = Some(captured);
    }

    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))] // Linux-only callers
    pub(crate) fn notify_mut(&mut self) -> Option<&mut NotifySocket> {
        self.notify.as_mut()
    }

    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))] // Linux-only callers
    pub(crate) fn notify_ref(&self) -> Option<&NotifySocket> {
        self.notify.as_ref()
    }

    /// With [`Builder::watchdog`]: the missed deadline (or `WATCHDOG=trigger`), if one came.
    /// After a miss the server is being closed with its ladder in the background (unless
    /// [`Builder::on_watchdog`] was given): [`close`](ChildHandle::close) still reaps it and
    /// returns the report, which names the miss.
    pub fn watchdog_missed(&self) -> Option<crate::WatchdogMiss> {
        #[cfg(target_os = "linux")]
        return self.notify.as_ref().and_then(NotifySocket::watchdog_missed);
        #[cfg(not(target_os = "linux"))]
        return None;
    }

    /// With [`Builder::limits`]: what the kernel counted under them so far, read now — the
    /// OOM killer's kills (`result` `oom-kill`, as the close report will say), throttling, the
    /// peak usage. `None` without limits.
    pub fn limits_report(&self) -> Option<crate::LimitsReport> {
        self.process.as_ref()?.cgroup_report()?.limits
    }

    /// The child's pid, if there is a child.
    pub fn id(&self) -> Option<u32> {
        self.process.as_ref().map(Process::server_pid)
    }

    /// The program this handle spawned.
    pub fn program(&self) -> Option<&str> {
        self.program.as_deref()
    }

    /// The ladder the close path will climb.
    pub fn ladder(&self) -> &Ladder {
        &self.ladder
    }

    /// Whether the child has exited, without blocking. Like `std`, this reaps an exited child
    /// — except a process-group leader, which stays a zombie until `close` so that its group
    /// id cannot be recycled while we may still signal the group.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let Some(process) = self.process.as_mut() else {
            return Err(no_child());
        };
        if process.is_inherited() {
            return Err(inherited(self.program.as_deref(), process));
        }
        // `check_exit` reaps a child that leads no group in the `waitid` that sees it exited.
        process
            .check_exit()
            .map_err(|e| Error::new(ErrorKind::Wait, self.program.as_deref(), e))
    }

    /// Sends `signal` once (to the group with `process_group`), then waits up to `grace` for
    /// the exit. `Ok(None)`: still alive. After the child exited this sends nothing and returns
    /// its status again.
    pub fn kill(&mut self, signal: Signal, grace: Duration) -> Result<Option<ExitStatus>> {
        match self.send_kill(signal)? {
            Err(status) => Ok(Some(status)),
            Ok(sent_at) => self.wait_until(later(sent_at, grace), None),
        }
    }

    /// The sending half of [`kill`](ChildHandle::kill), shared with the tokio face: `Ok(when)`
    /// the signal (and `SIGCONT`) went out, `Err(status)` if the child had already exited.
    pub(crate) fn send_kill(
        &mut self,
        signal: Signal,
    ) -> Result<std::result::Result<Instant, ExitStatus>> {
        if let Some(status) = self.try_wait()? {
            return Ok(Err(status));
        }
        let process = self.process.as_mut().ok_or_else(no_child)?;
        let err = |kind, e| Error::new(kind, self.program.as_deref(), e);
        let sent_at = Instant::now();
        process
            .signal(signal)
            .map_err(|e| err(ErrorKind::Signal, e))?;
        if signal.is_catchable() {
            process
                .signal(Signal::CONT)
                .map_err(|e| err(ErrorKind::Signal, e))?;
        }
        self.last_kill = Some((signal, sent_at));
        Ok(Ok(sent_at))
    }

    /// The child, for drivers that wait on it their own way (the tokio face).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn process(&self) -> Option<&Process> {
        self.process.as_ref()
    }

    /// Waits up to `timeout` for the child to exit, woken by its pidfd (or `SIGCHLD`) the
    /// moment it does. `Ok(None)`: still running. Reaps like [`try_wait`](ChildHandle::try_wait).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        self.wait_until(later(Instant::now(), timeout), None)
    }
}

impl ChildHandle {
    /// For [`detach`](ChildHandle::detach): takes the child, our socket and the activation
    /// directory out of the handle and marks it closed, so that its drop does nothing but
    /// close the stdio pipes it still holds.
    pub(crate) fn take_for_detach(&mut self) -> crate::handle::detach::Parts {
        self.closed = true;
        crate::handle::detach::Parts {
            program: self.program.clone(),
            process: self.process.take(),
            socket: self.socket.take(),
            socket_dir: self.socket_dir.take(),
        }
    }

    /// Undoes [`take_for_detach`](ChildHandle::take_for_detach) after a failed detach.
    pub(crate) fn untake(&mut self, parts: crate::handle::detach::Parts) {
        self.closed = false;
        self.process = parts.process;
        self.socket = parts.socket;
        self.socket_dir = parts.socket_dir;
    }
}

/// The error for anything but a close on a handle inherited through `fork()`.
fn inherited(program: Option<&str>, process: &Process) -> Error {
    Error::new(
        ErrorKind::Inherited,
        program,
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "this handle was inherited through fork(): its child belongs to process {}, \
                 which spawned it; only that process may signal or wait for it",
                process.owner()
            ),
        ),
    )
}

pub(crate) fn no_child() -> Error {
    Error::new(
        ErrorKind::Config,
        None,
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "this handle has no child (made by from_socket)",
        ),
    )
}

// Beside the type rather than in `builder.rs`: the one place that lists every option's
// default.
impl ChildHandle {
    /// Starts configuring a handle for `command`.
    pub fn builder(command: std::process::Command) -> Builder {
        Builder {
            command,
            socket: SocketMode::None,
            ladder: None,
            process_group: false,
            exit_with_parent: false,
            death_signal: crate::base::signal::Signal::KILL,
            ignore_sigpipe: false,
            own_spawn: None,
            start_signals: crate::sys::StartSignals::default(),
            reap: None,
            portable: false,
            release_memory: true,
            skip_ignored: true,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            runtime_dir: None,
            capture: None,
            containment: crate::process::containment::Containment::None,
            kill_mode: crate::process::containment::KillMode::default(),
            cgroup_parent: None,
            #[cfg(target_os = "linux")]
            container_engine: None,
            limits: crate::process::containment::limits::Limits::default(),
            ready: None,
            ready_timeout: readiness::DEFAULT_READY_TIMEOUT,
            notify_extend_max: readiness::DEFAULT_NOTIFY_EXTEND_MAX,
            notify_owner: None,
            notify_access: readiness::NotifyAccess::default(),
            watchdog: None,
            on_watchdog: None,
            interrupt: None,
        }
    }
}
