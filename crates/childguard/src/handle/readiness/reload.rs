//! [`ChildHandle::reload`]: systemd's `Type=notify-reload` for a child of ours. The reload
//! signal goes out; the server answers on its `NOTIFY_SOCKET` with `RELOADING=1` (and
//! `MONOTONIC_USEC=`), reloads, and sends `READY=1`: the reload is done when a `READY=1`
//! follows a `RELOADING=1` heard after the signal. A `READY=1` without `RELOADING=1` before it
//! does not count (systemd does not count it either).
//!
//! The wait is the handle's one wait on the child (`Process::wait_with`, over
//! `core/wait.rs`): the child's pidfd and the notify socket (or, with a watchdog, the bell the
//! event loop rings), the caller's [`Interrupt`] checked as in every wait. It ends at the
//! `READY=1`, the child's exit, a watchdog miss, the timeout, or the interrupt.

use std::io;
use std::time::Duration;
#[cfg(target_os = "linux")]
use std::time::Instant;

use crate::base::signal::Signal;
#[cfg(target_os = "linux")]
use crate::core::wait::later;
use crate::core::wait::Interrupt;
use crate::error::{Error, ErrorKind, Result};
use crate::ChildHandle;

impl ChildHandle {
    /// Reloads a [`Ready::Notify`](crate::Ready::Notify) server the way systemd's
    /// `Type=notify-reload` does: sends `signal` (e.g. [`Signal::HUP`], systemd's default
    /// `ReloadSignal=`; to the group with `process_group`, then `SIGCONT`) and returns once the
    /// server sent `RELOADING=1` and then `READY=1`, with how long that took from the signal.
    ///
    /// Errors (kind [`ErrorKind::Ready`]): no `READY=1` after `RELOADING=1` within `timeout`
    /// (the message says whether `RELOADING=1` came), the server exited during the reload
    /// (its status), a watchdog miss ([`Builder::watchdog`](crate::Builder::watchdog)); kind
    /// [`ErrorKind::Config`] without a notify socket. The server is left as it is either way.
    pub fn reload(&mut self, signal: Signal, timeout: Duration) -> Result<Duration> {
        self.reload_with(signal, timeout, None)
    }

    /// [`reload`](ChildHandle::reload), calling `interrupt`'s check during the wait (as
    /// [`wait_timeout_interruptible`](ChildHandle::wait_timeout_interruptible)): an `Err` from it
    /// ends the wait with [`ErrorKind::Interrupted`]; the server is left reloading.
    pub fn reload_interruptible(
        &mut self,
        signal: Signal,
        timeout: Duration,
        interrupt: &Interrupt,
    ) -> Result<Duration> {
        self.reload_with(signal, timeout, Some(interrupt))
    }

    #[cfg(not(target_os = "linux"))]
    fn reload_with(
        &mut self,
        _signal: Signal,
        _timeout: Duration,
        _interrupt: Option<&Interrupt>,
    ) -> Result<Duration> {
        Err(Error::new(
            ErrorKind::Config,
            self.program.as_deref(),
            io::Error::new(
                io::ErrorKind::Unsupported,
                "reload needs Ready::Notify, which needs Linux (SO_PASSCRED)",
            ),
        ))
    }

    #[cfg(target_os = "linux")]
    fn reload_with(
        &mut self,
        signal: Signal,
        timeout: Duration,
        interrupt: Option<&Interrupt>,
    ) -> Result<Duration> {
        let program = self.program.clone();
        let fail = |kind, e: io::Error| Error::new(kind, program.as_deref(), e);
        let not_done = |why: String| fail(ErrorKind::Ready, io::Error::other(why));
        let process = self.process.as_mut().ok_or_else(super::super::no_child)?;
        let Some(notify) = self.notify.as_mut() else {
            return Err(fail(
                ErrorKind::Config,
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "reload needs Ready::Notify: RELOADING=1 and READY=1 come on the NOTIFY_SOCKET",
                ),
            ));
        };
        if let Some(miss) = notify.watchdog_missed() {
            return Err(not_done(format!("reload: {miss}")));
        }
        if let Some(status) = process.check_exit().map_err(|e| fail(ErrorKind::Wait, e))? {
            return Err(not_done(format!(
                "reload: the server exited before it ({status})"
            )));
        }
        // What came before the signal is not this reload's answer.
        notify.receive();
        notify.reload_begins();
        let done_before = notify.reloads_done;
        let sent_at = Instant::now();
        // To the main process if the server named one (`MAINPID=`), as systemd does.
        let to_main = notify.signal_main(signal).transpose();
        if to_main.map_err(|e| fail(ErrorKind::Signal, e))?.is_none() {
            process
                .signal(signal)
                .map_err(|e| fail(ErrorKind::Signal, e))?;
        }
        if signal.is_catchable() && !notify.has_main() {
            process
                .signal(Signal::CONT)
                .map_err(|e| fail(ErrorKind::Signal, e))?;
        }
        let deadline = later(sent_at, timeout);
        loop {
            notify.receive();
            if notify.reloads_done > done_before {
                return Ok(sent_at.elapsed());
            }
            if let Some(miss) = notify.watchdog_missed() {
                return Err(not_done(format!("reload: {miss}")));
            }
            if let Some(status) = process.check_exit().map_err(|e| fail(ErrorKind::Wait, e))? {
                return Err(not_done(format!(
                    "reload: the server exited during the reload ({status}){}",
                    heard(notify.reloading())
                )));
            }
            if Instant::now() >= deadline {
                return Err(fail(
                    ErrorKind::Ready,
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "reload: no READY=1 after RELOADING=1 within {timeout:?} of {signal}{}",
                            heard(notify.reloading())
                        ),
                    ),
                ));
            }
            process
                .wait_with(&[notify.fd()], deadline, interrupt)
                .map_err(|e| Error::from_wait(ErrorKind::Ready, program.as_deref(), e))?;
        }
    }
}

#[cfg(target_os = "linux")]
fn heard(reloading: bool) -> &'static str {
    if reloading {
        " (RELOADING=1 came)"
    } else {
        " (no RELOADING=1 either)"
    }
}
