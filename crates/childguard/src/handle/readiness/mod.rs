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
//! Each wait sleeps in `poll` on what can change — the notify socket, the child's pidfd, an
//! HTTP attempt's socket, an exec probe's pidfd — or on the capture's condition variable;
//! [`Ready::Connect`] retries every 0.1–0.5 ms, [`Ready::Http`] and [`Ready::Exec`] on their
//! own schedule (see each).

mod connect;
mod exec;
mod http;
mod miss;
mod not_ready;
#[cfg(target_os = "linux")]
pub(crate) mod notify;
#[cfg(target_os = "linux")]
mod notify_access;
mod probe;
mod probes;
mod ready;
mod reload;
mod waits;
#[cfg(target_os = "linux")]
pub(crate) mod watchdog;
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
        pub(crate) fn signal_main(&mut self, _: crate::Signal) -> Option<std::io::Result<u32>> {
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
    fn signal_main(&mut self, signal: crate::Signal) -> Option<io::Result<u32>> {
        notify::NotifySocket::signal_main(self, signal)
    }
}

use std::io;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub use connect::ConnectTo;
pub(crate) use exec::ProbeSpawn;
pub use exec::{ExecCheck, DEFAULT_EXEC_ATTEMPT_TIMEOUT, EXEC_OUTPUT_BYTES, EXEC_OUTPUT_LINES};
pub(crate) use http::Answer;
pub use http::{HttpCheck, DEFAULT_HTTP_ATTEMPT_TIMEOUT, MAX_STATUS_LINE};
pub(crate) use miss::OnWatchdog;
pub use miss::WatchdogMiss;
use not_ready::NotReady;
pub use probe::ReadyParseError;
pub use ready::{NotifyAccess, Ready};

use crate::close::climb::Listener;
use crate::core::wait::Interrupt;
use crate::error::{Error, ErrorKind};
use crate::spawn::capture::Capture;
use crate::ChildHandle;

/// Before the fork: a [`Builder::watchdog`](crate::Builder::watchdog) needs a notify socket
/// (a [`Ready::Notify`], alone or in an `any`/`all`) and a non-zero interval.
pub(crate) fn check_watchdog(ready: Option<&Ready>, interval: Duration) -> io::Result<()> {
    fn notifies(ready: &Ready) -> bool {
        match ready {
            Ready::Notify => true,
            Ready::Any(parts) | Ready::All(parts) => parts.iter().any(notifies),
            _ => false,
        }
    }
    if interval.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "watchdog: the interval must be more than zero",
        ));
    }
    if !ready.is_some_and(notifies) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "watchdog needs Ready::Notify: WATCHDOG=1 comes on the NOTIFY_SOCKET",
        ));
    }
    Ok(())
}

/// The default of [`Builder::ready_timeout`](crate::Builder::ready_timeout): 30 s.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The default of [`Builder::notify_extend_max`](crate::Builder::notify_extend_max): 30 s.
pub const DEFAULT_NOTIFY_EXTEND_MAX: Duration = Duration::from_secs(30);

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
            let cgroup = process.cgroup().map(|c| (c.fd(), c.hierarchy_path()));
            p.for_child(process.server_pid(), cgroup, self.extend_max)
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
    pub(crate) fn await_on(
        self,
        mut handle: ChildHandle,
        spawn: ProbeSpawn,
    ) -> Result<ChildHandle, Error> {
        let began = Instant::now();
        let outcome = handle.await_ready(
            &self.ready,
            self.timeout,
            self.extend_max,
            self.interrupt.as_ref(),
            spawn,
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
            NotReady::TimedOut(last) => (
                io::ErrorKind::TimedOut,
                format!(
                    "not ready after {}: awaited {what}{}{}",
                    humantime::format_duration(self.timeout),
                    ignored_on_notify(&handle),
                    last.as_ref()
                        .map(|l| format!("; last attempt: {l}"))
                        .unwrap_or_default()
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
