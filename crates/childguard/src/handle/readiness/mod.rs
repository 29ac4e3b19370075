//! Readiness: `spawn()` returns only once the server says, or shows, that it is ready.
//!
//! [`Builder::ready`](crate::Builder::ready) picks the condition,
//! [`Builder::ready_timeout`](crate::Builder::ready_timeout) bounds the wait. What happens:
//!
//! - The condition holds → `spawn()` returns the handle.
//! - The child exits first → `spawn()` fails at once ([`ErrorKind::Ready`]) with its exit
//!   status and, with a [`Capture`](crate::Capture), the tail of its output; it is reaped.
//! - The timeout passes → the child is closed with its ladder, and the error says what was
//!   awaited and for how long, and carries the [`CloseReport`](crate::CloseReport)
//!   ([`Error::close_report`](crate::Error::close_report)).
//!
//! Each wait sleeps in `poll` on what can change — the notify socket, the child's pidfd — or
//! on the capture's condition variable; only [`Ready::Connect`] retries, every 0.1–0.5 ms.

mod connect;
#[cfg(target_os = "linux")]
pub(crate) mod notify;
#[cfg(target_os = "linux")]
mod notify_access;
#[cfg(not(target_os = "linux"))]
pub(crate) mod notify {
    //! Off Linux there is no `SO_PASSCRED`: `Ready::Notify` is refused before the fork, so no
    //! socket exists.
    use std::time::{Duration, Instant};

    use crate::close::report::NotifyReport;

    /// Never made off Linux.
    #[derive(Debug)]
    pub(crate) enum NotifySocket {}

    impl NotifySocket {
        pub(crate) fn extend_max(&self) -> Duration {
            match *self {}
        }
        pub(crate) fn report(&self, _close_started: Instant) -> NotifyReport {
            match *self {}
        }
        pub(crate) fn finish(self, _close_started: Instant) -> NotifyReport {
            match self {}
        }
        pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
            match *self {}
        }
        pub(crate) fn receive(&mut self) -> Option<Instant> {
            match *self {}
        }
    }
}

/// The climb hears the child's `NOTIFY_SOCKET` through [`Listener`]: the close sits below
/// the spawn layer that makes the socket.
impl Listener for notify::NotifySocket {
    fn extend_max(&self) -> Duration {
        notify::NotifySocket::extend_max(self)
    }
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        notify::NotifySocket::fd(self)
    }
    fn receive(&mut self) -> Option<Instant> {
        notify::NotifySocket::receive(self)
    }
    fn report(&self, close_started: Instant) -> crate::close::report::NotifyReport {
        notify::NotifySocket::report(self, close_started)
    }
    fn finish(self: Box<Self>, close_started: Instant) -> crate::close::report::NotifyReport {
        notify::NotifySocket::finish(*self, close_started)
    }
}

use std::io;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

pub use connect::ConnectTo;

use crate::close::climb::Listener;
use crate::core::wait::later;
use crate::core::wait::EXIT_CHECK;
use crate::core::wait::{self, Interrupt};
use crate::error::{Error, ErrorKind};
use crate::spawn::capture::Capture;
use crate::ChildHandle;

/// The default of [`Builder::ready_timeout`](crate::Builder::ready_timeout): 30 s.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The default of [`Builder::notify_extend_max`](crate::Builder::notify_extend_max): 30 s.
pub const DEFAULT_NOTIFY_EXTEND_MAX: Duration = Duration::from_secs(30);

/// Who may send on the private `NOTIFY_SOCKET` of [`Ready::Notify`](crate::Ready::Notify)
/// ([`Builder::notify_access`](crate::Builder::notify_access)), after systemd's
/// `NotifyAccess=`. Datagrams from anyone else are ignored and listed in
/// [`NotifyReport::ignored`](crate::NotifyReport::ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NotifyAccess {
    /// Only the main process: the child that was spawned (systemd's `NotifyAccess=main`, its
    /// default for `Type=notify`). Right for a server that sends from its own main process
    /// (postgres, redis) and is started directly.
    Main,
    /// Any process of the child's cgroup when it is [contained](crate::Builder::contain), else
    /// the child and its descendants (systemd's `NotifyAccess=all` is the cgroup). The
    /// default, unlike systemd's: a child here is often a wrapper — `runuser -u postgres --
    /// postgres …` forks and waits, and postgres, its child, sends `READY=1`; `sh -c
    /// 'helper; exec server'` sends from a helper — where systemd would be told the server's
    /// pid by `PIDFile=` or `MAINPID=`.
    ///
    /// Contained, membership is the cgroup the kernel recorded for the sender, kept even after
    /// it was reaped: a helper that sends `READY=1` and exits at once, and a double-forked
    /// daemon, count. Uncontained, the kernel forgets a reaped process's parent: a sender
    /// reaped before its datagram is read, or one that left the child's tree, is refused with
    /// a note saying so — contain the child for those.
    #[default]
    All,
}

/// When the server counts as ready (see [`Builder::ready`](crate::Builder::ready)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ready {
    /// The server sends `READY=1` on a private `NOTIFY_SOCKET`, as for a systemd
    /// `Type=notify` service (postgres ≥ 15 built with systemd support, redis with
    /// `--supervised systemd`, nginx does not). Linux only.
    ///
    /// - `NOTIFY_SOCKET` names a datagram socket in a new 0700 directory (under
    ///   [`runtime_dir`](crate::Builder::runtime_dir), else `$XDG_RUNTIME_DIR`, else
    ///   `/tmp`), removed when the handle closes.
    /// - Only datagrams from whom [`notify_access`](crate::Builder::notify_access) admits
    ///   count (default [`NotifyAccess::All`]: the child's cgroup when contained, else the
    ///   child and its descendants), judged by the sender the kernel attached when it sent
    ///   (`SCM_PIDFD`, `SCM_CREDENTIALS`); others, and malformed ones, are ignored and listed
    ///   in [`NotifyReport::ignored`](crate::NotifyReport::ignored).
    /// - `STATUS=` is kept (the latest); `ERRNO=` before `READY=1` fails the spawn.
    /// - `EXTEND_TIMEOUT_USEC=` extends the ready timeout, and during the close the current
    ///   rung's grace, to that long after the message (systemd's semantics: the server must
    ///   keep sending), but never more than [`notify_extend_max`](crate::Builder::notify_extend_max)
    ///   beyond it. Honoured on every close path, because the socket belongs to the one
    ///   climb (`climb.rs`) that every driver steps: each step first reads what came
    ///   (`STOPPING=1`, `EXTEND_TIMEOUT_USEC=`), then sends the rungs that are due. The
    ///   blocking close (`close`, `drop` outside a runtime) and `close_async` also wake on
    ///   the socket; the shared reaper (`Reap::Background`, a drop inside a runtime, a
    ///   cancelled `close_async`) holds it in its epoll set until the ladder is over;
    ///   [`output`](crate::ChildHandle::output) reads it at each wake-up (its pipes, the
    ///   pidfd, the deadline) before any rung. After a hand-off to the reaper the report has
    ///   what was heard until then; the socket and its directory are removed with the climb.
    /// - `STOPPING=1` during the close is recorded in
    ///   [`CloseReport::notify`](crate::CloseReport::notify).
    Notify,
    /// A line of the server's output contains this text. Enables a
    /// [`Capture`](crate::Capture) of stdout and stderr (stderr only with
    /// [`SocketMode::Stdio`](crate::SocketMode::Stdio)) unless the builder has one.
    Output(String),
    /// A connection to this address is accepted (then closed at once). Retried every
    /// 0.1 ms, doubling to 0.5 ms.
    Connect(ConnectTo),
    /// With [`SocketMode::Activation`](crate::SocketMode::Activation): the server accepted our
    /// connection on the activation socket (what activation always awaits, bounded by
    /// [`connect_timeout`](crate::Builder::connect_timeout)). Any other mode: a
    /// [`Config`](crate::ErrorKind::Config) error.
    Accepted,
    /// Ready as soon as one of these holds ([`Ready::any`]).
    Any(Vec<Ready>),
    /// Ready once every one of these has held ([`Ready::all`]); each counts from the moment it
    /// was first seen (a port that accepted once need not accept again).
    All(Vec<Ready>),
}

impl Ready {
    /// [`Ready::Connect`] to a TCP address or a Unix path.
    pub fn connect(to: impl Into<ConnectTo>) -> Ready {
        Ready::Connect(to.into())
    }

    /// [`Ready::Output`] for a line containing `text`.
    pub fn output(text: impl Into<String>) -> Ready {
        Ready::Output(text.into())
    }

    /// Ready when the first of `conditions` holds: e.g. `READY=1` from a server built with
    /// systemd support, or its port for one built without —
    /// `Ready::any([Ready::Notify, Ready::connect(addr)])`.
    ///
    /// What happens: everything each condition needs is made before the fork (the
    /// `NOTIFY_SOCKET`, the capture), then the conditions are checked in turn, every 0.1 ms
    /// doubling to 0.5 ms (as [`Ready::Connect`] retries; the notify socket and the child's
    /// pidfd also end each pause), until one holds, the child exits, or the
    /// [`ready_timeout`](crate::Builder::ready_timeout) passes — the same outcomes as a single
    /// condition. Refused as [`Config`](crate::ErrorKind::Config) errors: an empty list, a
    /// nested `any`/`all`, and more than one [`Ready::Output`] (the capture watches one text).
    pub fn any(conditions: impl IntoIterator<Item = Ready>) -> Ready {
        Ready::Any(conditions.into_iter().collect())
    }

    /// Ready once every one of `conditions` has held, each from the moment it was first seen:
    /// e.g. `READY=1` *and* the HTTP port accepting. Checked, and refused, as [`Ready::any`];
    /// the error on a timeout names every condition of the list.
    pub fn all(conditions: impl IntoIterator<Item = Ready>) -> Ready {
        Ready::All(conditions.into_iter().collect())
    }

    /// The single conditions: the list of an `Any`/`All`, or this one.
    fn parts(&self) -> &[Ready] {
        match self {
            Ready::Any(parts) | Ready::All(parts) => parts,
            one => std::slice::from_ref(one),
        }
    }

    /// What was awaited, for error messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Ready::Notify => "READY=1 on NOTIFY_SOCKET".into(),
            Ready::Output(text) => format!("an output line containing {text:?}"),
            Ready::Connect(to) => format!("a connection to {to} to be accepted"),
            Ready::Accepted => "the activation socket's accept".into(),
            Ready::Any(parts) => format!("any of: {}", describe_all(parts)),
            Ready::All(parts) => format!("all of: {}", describe_all(parts)),
        }
    }
}

/// For a ready timeout: what the notify socket ignored (a `READY=1` from a sender
/// [`NotifyAccess`] refuses is the usual reason), else nothing.
fn ignored_on_notify(handle: &ChildHandle) -> String {
    #[cfg(target_os = "linux")]
    if let Some(notify) = handle.notify_ref() {
        let ignored = notify.ignored();
        if !ignored.is_empty() {
            return format!("; ignored on NOTIFY_SOCKET: {}", ignored.join("; "));
        }
    }
    let _ = handle;
    String::new()
}

fn describe_all(parts: &[Ready]) -> String {
    parts
        .iter()
        .map(Ready::describe)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why the server did not become ready.
#[derive(Debug)]
pub(crate) enum NotReady {
    /// It exited first.
    Exited(ExitStatus),
    /// It was reaped by someone else before it became ready.
    Lost,
    /// It sent `ERRNO=`.
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    // Linux-only callers
    Errno(i32),
    /// The timeout passed.
    TimedOut,
    /// Waiting failed (or a `Connect` failure no retry fixes).
    Failed(io::Error),
    /// The caller's [`Interrupt`] check ended the wait (its error).
    Interrupted(io::Error),
}

impl NotReady {
    /// A failed wait: [`NotReady::Interrupted`] if the interrupt check ended it.
    fn from_wait(e: io::Error) -> NotReady {
        if wait::is_interrupt(&e) {
            NotReady::Interrupted(e)
        } else {
            NotReady::Failed(e)
        }
    }
}

impl ChildHandle {
    /// Waits until `ready` holds, the child exits, or `timeout` passes (extended by
    /// `EXTEND_TIMEOUT_USEC=`, at most `extend_max` beyond it).
    pub(crate) fn await_ready(
        &mut self,
        ready: &Ready,
        timeout: Duration,
        extend_max: Duration,
        interrupt: Option<&Interrupt>,
    ) -> Result<(), NotReady> {
        crate::failpoint::before_ready_wait();
        let deadline = later(Instant::now(), timeout);
        match ready {
            Ready::Accepted => Ok(()),
            Ready::Connect(to) => self.await_connect(to, deadline, interrupt),
            Ready::Output(_) => self.await_line(deadline, interrupt),
            Ready::Notify => self.await_notify(deadline, later(deadline, extend_max), interrupt),
            Ready::Any(parts) => {
                self.await_combination(parts, false, deadline, extend_max, interrupt)
            }
            Ready::All(parts) => {
                self.await_combination(parts, true, deadline, extend_max, interrupt)
            }
        }
    }

    /// [`Ready::any`] (`all` false) or [`Ready::all`]: checks each condition not yet seen,
    /// then pauses in a `poll` of the pidfd and the notify socket, 0.1 ms doubling to 0.5 ms.
    fn await_combination(
        &mut self,
        parts: &[Ready],
        all: bool,
        deadline: Instant,
        extend_max: Duration,
        interrupt: Option<&Interrupt>,
    ) -> Result<(), NotReady> {
        let hard = later(deadline, extend_max);
        let mut deadline = deadline;
        // Off Linux there is no notify socket to extend the deadline.
        #[cfg(not(target_os = "linux"))]
        let _ = (hard, &mut deadline);
        let mut seen = vec![false; parts.len()];
        let mut pause = connect::FIRST_PAUSE;
        loop {
            #[cfg(target_os = "linux")]
            if let Some(notify) = self.notify_mut() {
                if let Some(until) = notify.receive() {
                    deadline = deadline.max(until.min(hard));
                }
                if let Some(errno) = notify.errno {
                    return Err(NotReady::Errno(errno));
                }
            }
            for (part, seen) in parts.iter().zip(seen.iter_mut()) {
                if !*seen {
                    *seen = self.holds_now(part, deadline, interrupt)?;
                }
            }
            let done = if all {
                seen.iter().all(|&s| s)
            } else {
                seen.iter().any(|&s| s)
            };
            if done {
                return Ok(());
            }
            self.exited()?;
            let now = Instant::now();
            if now >= deadline {
                return Err(NotReady::TimedOut);
            }
            let until = deadline.min(now + pause);
            // One wait on the child and the notify socket (if any), the interrupt checked.
            if let Some(process) = self.process() {
                #[cfg(target_os = "linux")]
                let notify_fd = self.notify_ref().map(notify::NotifySocket::fd);
                #[cfg(not(target_os = "linux"))]
                let notify_fd = None;
                process
                    .wait_with(notify_fd.as_slice(), until, interrupt)
                    .map_err(NotReady::from_wait)?;
            }
            pause = (pause * 2).min(connect::MAX_PAUSE);
        }
    }

    /// Whether one single condition holds now (never waits longer than a connect attempt).
    fn holds_now(
        &mut self,
        part: &Ready,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> Result<bool, NotReady> {
        match part {
            Ready::Accepted => Ok(true),
            Ready::Connect(to) => to.try_once(deadline).map_err(NotReady::Failed),
            #[cfg(target_os = "linux")]
            Ready::Notify => Ok(self.notify_ref().is_some_and(|n| n.ready)),
            #[cfg(not(target_os = "linux"))]
            Ready::Notify => Ok(false),
            Ready::Output(_) => {
                let Some(captured) = self.take_capture() else {
                    return Err(NotReady::Failed(io::Error::other("no capture to watch")));
                };
                // A look, no wait: the interrupt is the caller's combination loop's to check.
                let _ = interrupt;
                let seen = captured.wait_for_line(Instant::now(), EXIT_CHECK, || false);
                self.put_capture(captured);
                Ok(seen)
            }
            // Refused by `Pending::prepare`.
            Ready::Any(_) | Ready::All(_) => {
                Err(NotReady::Failed(io::Error::other("nested Ready::any/all")))
            }
        }
    }

    /// The child's exit, if it exited: checked before every wait.
    fn exited(&mut self) -> Result<(), NotReady> {
        match self.try_wait() {
            Ok(Some(status)) => Err(NotReady::Exited(status)),
            Ok(None) if self.process().is_some_and(|p| !p.is_running()) => Err(NotReady::Lost),
            Ok(None) => Ok(()),
            Err(e) => Err(NotReady::Failed(e.into())),
        }
    }

    fn await_connect(
        &mut self,
        to: &ConnectTo,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> Result<(), NotReady> {
        let mut pause = connect::FIRST_PAUSE;
        loop {
            if to.try_once(deadline).map_err(NotReady::Failed)? {
                return Ok(());
            }
            self.exited()?;
            let now = Instant::now();
            if now >= deadline {
                return Err(NotReady::TimedOut);
            }
            // Sleeps in the pidfd poll: the child's exit ends the pause at once.
            if let Some(process) = self.process() {
                process
                    .wait_until(deadline.min(now + pause), interrupt)
                    .map_err(NotReady::from_wait)?;
            }
            pause = (pause * 2).min(connect::MAX_PAUSE);
        }
    }

    fn await_line(
        &mut self,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> Result<(), NotReady> {
        let Some(captured) = self.take_capture() else {
            return Err(NotReady::Failed(io::Error::other("no capture to watch")));
        };
        let mut exited = Ok(());
        // `stop` is asked every EXIT_CHECK (5 ms): the interrupt check rides on it (rate-limited
        // by the `Interrupt` itself to one call per INTERRUPT_CHECK_EVERY).
        let seen = captured.wait_for_line(deadline, EXIT_CHECK, || {
            exited = self.exited();
            if exited.is_ok() {
                if let Some(Err(e)) = interrupt.map(|i| i.check(false)) {
                    exited = Err(NotReady::Interrupted(e));
                }
            }
            exited.is_err()
        });
        self.put_capture(captured);
        if seen {
            return Ok(());
        }
        exited?;
        // Both streams at EOF while the child runs: no line can come any more; wait for the
        // exit or the timeout, whichever is first.
        loop {
            self.exited()?;
            if Instant::now() >= deadline {
                return Err(NotReady::TimedOut);
            }
            if let Some(process) = self.process() {
                process
                    .wait_until(deadline, interrupt)
                    .map_err(NotReady::from_wait)?;
            }
        }
    }

    #[cfg(target_os = "linux")]
    fn await_notify(
        &mut self,
        deadline: Instant,
        hard: Instant,
        interrupt: Option<&Interrupt>,
    ) -> Result<(), NotReady> {
        let mut deadline = deadline;
        loop {
            let Some(notify) = self.notify_mut() else {
                return Err(NotReady::Failed(io::Error::other("no notify socket")));
            };
            if let Some(until) = notify.receive() {
                deadline = deadline.max(until.min(hard));
            }
            if notify.ready {
                return Ok(());
            }
            if let Some(errno) = notify.errno {
                return Err(NotReady::Errno(errno));
            }
            self.exited()?;
            let now = Instant::now();
            if now >= deadline {
                return Err(NotReady::TimedOut);
            }
            let (Some(notify), Some(process)) = (self.notify_ref(), self.process()) else {
                return Err(NotReady::Failed(io::Error::other("no notify socket")));
            };
            // Without a pidfd the child's exit is a SIGCHLD: the wait reads its generation
            // between short polls of the socket (`wait::SIGCHLD_SLICE`).
            process
                .wait_with(&[notify.fd()], deadline, interrupt)
                .map_err(NotReady::from_wait)?;
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn await_notify(
        &mut self,
        _deadline: Instant,
        _hard: Instant,
        _interrupt: Option<&Interrupt>,
    ) -> Result<(), NotReady> {
        Err(NotReady::Failed(io::Error::new(
            io::ErrorKind::Unsupported,
            "Ready::Notify needs Linux (SO_PASSCRED)",
        )))
    }
}

/// The readiness part of a spawn, made before the fork ([`Pending::prepare`]) and awaited
/// once the handle exists ([`Pending::await_on`]).
#[derive(Debug)]
pub(crate) struct Pending {
    ready: Ready,
    timeout: Duration,
    extend_max: Duration,
    /// The caller's [`Builder::interrupt`](crate::Builder::interrupt), checked by every wait.
    interrupt: Option<Interrupt>,
    #[cfg(target_os = "linux")]
    notify: Option<notify::Prepared>,
}

/// What [`Pending::prepare`] needs from the builder.
#[derive(Debug)]
pub(crate) struct Setup<'a> {
    pub(crate) ready: Ready,
    pub(crate) timeout: Duration,
    pub(crate) extend_max: Duration,
    pub(crate) runtime_dir: Option<&'a Path>,
    pub(crate) notify_owner: Option<(u32, u32)>,
    pub(crate) notify_access: NotifyAccess,
    pub(crate) activating: bool,
    pub(crate) stdout_is_socket: bool,
    pub(crate) interrupt: Option<Interrupt>,
}

impl Pending {
    /// Before the fork: checks the condition against the socket mode, turns on the capture
    /// `Output` needs, makes the notify socket and sets `NOTIFY_SOCKET`. Errors:
    /// [`ErrorKind::Config`] for a bad combination, [`ErrorKind::Socket`] for the socket.
    pub(crate) fn prepare(
        setup: Setup<'_>,
        command: &mut Command,
        capture: &mut Option<Capture>,
    ) -> Result<Pending, (ErrorKind, io::Error)> {
        let config = |why: &str| {
            (
                ErrorKind::Config,
                io::Error::new(io::ErrorKind::InvalidInput, why.to_owned()),
            )
        };
        if let Ready::Any(parts) | Ready::All(parts) = &setup.ready {
            if parts.is_empty() {
                return Err(config("Ready::any/all needs at least one condition"));
            }
            if parts
                .iter()
                .any(|p| matches!(p, Ready::Any(_) | Ready::All(_)))
            {
                return Err(config(
                    "Ready::any/all cannot be nested: list the single conditions",
                ));
            }
            if parts
                .iter()
                .filter(|p| matches!(p, Ready::Output(_)))
                .count()
                > 1
            {
                return Err(config(
                    "Ready::any/all takes at most one Ready::Output (the capture watches one text)",
                ));
            }
        }
        for part in setup.ready.parts() {
            match part {
                Ready::Accepted if !setup.activating => {
                    return Err(config("Ready::Accepted needs SocketMode::Activation"));
                }
                Ready::Output(_) if capture.is_none() => {
                    *capture = Some(if setup.stdout_is_socket {
                        Capture::stderr()
                    } else {
                        Capture::both()
                    });
                }
                Ready::Notify if !cfg!(target_os = "linux") => {
                    return Err(config("Ready::Notify needs Linux (SO_PASSCRED)"));
                }
                _ => {}
            }
        }
        #[cfg(target_os = "linux")]
        let notify = if setup.ready.parts().contains(&Ready::Notify) {
            Some(
                notify::prepare(
                    command,
                    setup.runtime_dir,
                    setup.notify_owner,
                    setup.notify_access,
                )
                .map_err(|e| {
                    let kind = match e.kind() {
                        io::ErrorKind::InvalidInput => ErrorKind::Config,
                        _ => ErrorKind::Socket,
                    };
                    (kind, e)
                })?,
            )
        } else {
            None
        };
        #[cfg(not(target_os = "linux"))]
        let _ = (
            command,
            setup.runtime_dir,
            setup.notify_owner,
            setup.notify_access,
        );
        Ok(Pending {
            ready: setup.ready,
            timeout: setup.timeout,
            extend_max: setup.extend_max,
            interrupt: setup.interrupt,
            #[cfg(target_os = "linux")]
            notify,
        })
    }

    /// The text an [`Ready::Output`] condition (alone or in a list) watches for: the capture
    /// must watch it from its first byte ([`Capture::start`](crate::Capture)).
    pub(crate) fn watched_text(&self) -> Option<&str> {
        self.ready.parts().iter().find_map(|part| match part {
            Ready::Output(text) => Some(text.as_str()),
            _ => None,
        })
    }

    /// After the fork: the notify socket, now that the child (pid, cgroup) is known.
    pub(crate) fn notify_for(
        &mut self,
        process: &crate::process::Process,
    ) -> Option<notify::NotifySocket> {
        #[cfg(target_os = "linux")]
        return self.notify.take().map(|p| {
            let cgroup = process.cgroup().map(|c| (c.dir(), c.hierarchy_path()));
            p.for_child(process.pid(), cgroup, self.extend_max)
        });
        #[cfg(not(target_os = "linux"))]
        return {
            let _ = process;
            None
        };
    }

    /// Waits for the condition. On failure the child is closed — reaped if it exited, else
    /// with its ladder (a `KILL` if waiting itself failed) — and the error says why, with the
    /// output tail and the close report. Interrupted ([`Builder::interrupt`]): the error
    /// ([`ErrorKind::Interrupted`]) comes back at once, and the child's ladder is climbed by
    /// the background reaper (shut down, the first due rung sent here, the rest there).
    ///
    /// [`Builder::interrupt`]: crate::Builder::interrupt
    pub(crate) fn await_on(self, mut handle: ChildHandle) -> Result<ChildHandle, Error> {
        let began = Instant::now();
        let outcome = handle.await_ready(
            &self.ready,
            self.timeout,
            self.extend_max,
            self.interrupt.as_ref(),
        );
        let pid = handle.id();
        let not_ready = match outcome {
            Ok(()) => {
                crate::base::trace::readiness(
                    pid,
                    || self.ready.describe(),
                    began.elapsed(),
                    Ok(()),
                );
                return Ok(handle);
            }
            Err(NotReady::Interrupted(e)) => {
                let why = e.to_string();
                crate::base::trace::readiness(
                    pid,
                    || self.ready.describe(),
                    began.elapsed(),
                    Err(&why),
                );
                return Err(handle.interrupted_at_spawn(e));
            }
            Err(e) => e,
        };
        let program = handle.program().map(str::to_owned);
        let what = self.ready.describe();
        let (kind, message) = match &not_ready {
            NotReady::Exited(status) => (
                io::ErrorKind::Other,
                format!("exited during start-up with {status} (awaiting {what})"),
            ),
            NotReady::Lost => (
                io::ErrorKind::Other,
                format!("was reaped by someone else during start-up (awaiting {what})"),
            ),
            NotReady::Errno(errno) => (
                io::Error::from_raw_os_error(*errno).kind(),
                format!(
                    "reported ERRNO={errno} ({}) during start-up",
                    io::Error::from_raw_os_error(*errno)
                ),
            ),
            NotReady::TimedOut => (
                io::ErrorKind::TimedOut,
                format!(
                    "not ready after {}: awaited {what}{}",
                    humantime::format_duration(self.timeout),
                    ignored_on_notify(&handle)
                ),
            ),
            // (Interrupted returned above.)
            NotReady::Failed(e) | NotReady::Interrupted(e) => {
                (e.kind(), format!("waiting for {what}: {e}"))
            }
        };
        crate::base::trace::readiness(pid, || what.clone(), began.elapsed(), Err(&message));
        let closed = match not_ready {
            NotReady::Failed(_) => handle.abandon_with_report(),
            _ => handle.close(),
        };
        let error = Error::new(
            ErrorKind::Ready,
            program.as_deref(),
            io::Error::new(kind, message),
        );
        Err(match closed {
            Ok(report) => {
                let tail = report.output_tail.clone();
                error.with_output_tail(tail).with_close_report(report)
            }
            Err(_) => error,
        })
    }
}
