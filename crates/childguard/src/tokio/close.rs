//! `close_async`, `kill_async`, `wait_timeout_async`, and the guard that makes the close
//! cancel-safe.

use std::io;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use super::wait::wait_change;
use crate::base::signal::Signal;
use crate::close::climb::Climb;
use crate::close::report::CloseReport;
use crate::error::{Error, ErrorKind, Result};
use crate::handle::close::{Closing, CAPTURE_SYNC_MAX};
use crate::handle::no_child;
use crate::process::Process;
use crate::reaper::{self, Job};
use crate::ChildHandle;

/// The child is gone: the capture read to its end and every line passed on to `on_line`
/// before the close returns (issue 34 item 2), as the blocking close does, but on a blocking
/// thread (`spawn_blocking`), never on the runtime's. If that thread cannot run (the runtime
/// shutting down), the tail is taken as it stands.
async fn settle_capture(closing: &mut Closing) {
    let Some(capture) = closing.take_capture() else {
        return;
    };
    let deadline = Instant::now() + CAPTURE_SYNC_MAX;
    let settled = ::tokio::task::spawn_blocking(move || {
        let note = capture.settle(deadline);
        (capture, note)
    });
    if let Ok((capture, note)) = settled.await {
        closing.capture_settled(capture, note);
    }
}

impl ChildHandle {
    /// [`close`](ChildHandle::close) for async code: shutdown → close → ladder → reap, with the
    /// same timeline and the same [`CloseReport`], waiting on tokio timers and pidfd readiness
    /// instead of blocking the thread (see [`childguard::tokio`](crate::tokio)).
    ///
    /// Cancel-safe: if the future is dropped before it completes, the child is handed, with its
    /// ladder where it stood, to the shared [`reaper`](crate::reaper), which sends the
    /// remaining rungs on time and reaps it.
    pub async fn close_async(self) -> Result<CloseReport> {
        let span = crate::base::trace::close_span_for_future(self.program(), self.id());
        crate::base::trace::instrument(span, self.close_async_inner()).await
    }

    async fn close_async_inner(mut self) -> Result<CloseReport> {
        let mut closing = self.begin_close();
        drop(self); // closed: its Drop does nothing more
        let Some(child) = closing.child.take() else {
            return closing.finish(None, Ok(true));
        };
        let mut climbing = HandOffOnDrop(Some(child));
        let climbed = match closing.earlier_exit.take() {
            Some(e) => Err(e),
            None => climbing.climb().await,
        };
        if climbed.as_ref().is_ok_and(|gone| *gone) {
            settle_capture(&mut closing).await;
        }
        closing.finish(climbing.0.take(), climbed)
    }

    /// [`kill`](ChildHandle::kill) for async code: sends `signal` once (to the group with
    /// `process_group`), then waits up to `grace` for the exit without blocking the thread.
    /// `Ok(None)`: still alive. Dropping the future only abandons the wait; the signal counts
    /// as a rung already taken for the next close, as with `kill`.
    pub async fn kill_async(
        &mut self,
        signal: Signal,
        grace: Duration,
    ) -> Result<Option<ExitStatus>> {
        match self.send_kill(signal)? {
            Err(status) => Ok(Some(status)),
            Ok(sent_at) => {
                self.wait_until_async(crate::core::wait::later(sent_at, grace))
                    .await
            }
        }
    }

    /// [`wait_timeout`](ChildHandle::wait_timeout) for async code: waits up to `timeout` for
    /// the exit, woken by the pidfd (or `SIGCHLD`) the moment it happens. `Ok(None)`: still
    /// running. Reaps like [`try_wait`](ChildHandle::try_wait).
    pub async fn wait_timeout_async(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        self.wait_until_async(crate::core::wait::later(Instant::now(), timeout))
            .await
    }

    async fn wait_until_async(&mut self, deadline: Instant) -> Result<Option<ExitStatus>> {
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            let process = self.process().ok_or_else(no_child)?;
            wait_change(process, None, deadline)
                .await
                .map_err(|e| Error::new(ErrorKind::Wait, self.program(), e))?;
        }
    }
}

/// The child and its climb while `close_async` awaits. Dropped while still holding them (the
/// future was cancelled), it hands them to the reaper.
#[derive(Debug)]
struct HandOffOnDrop(Option<(Process, Climb)>);

impl HandOffOnDrop {
    /// [`Climb::run_blocking`] without blocking: returns whether the child (and its group) is
    /// gone, `false` once the ladder is used up. Each wait also watches the climb's notify
    /// socket, which the next step reads (`EXTEND_TIMEOUT_USEC=`, `STOPPING=1`).
    async fn climb(&mut self) -> io::Result<bool> {
        loop {
            let Some((process, climb)) = self.0.as_mut() else {
                return Ok(true);
            };
            if process.is_gone()? {
                return Ok(true);
            }
            if !climb.advance(process, Instant::now())? {
                return Ok(false);
            }
            let deadline = climb.deadline();
            wait_change(process, climb.notify_fd(), deadline).await?;
        }
    }
}

impl Drop for HandOffOnDrop {
    fn drop(&mut self) {
        let Some((process, climb)) = self.0.take() else {
            return;
        };
        let job = Job {
            process,
            climb: Some(climb),
            on_done: None,
        };
        // If no reaper thread can be started, the job is parked and handed over at the next
        // hand-off or `drain()` (never waited for here: this may be a runtime thread).
        let _parked_if_err = reaper::hand_off(job);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn futures_are_send() {
        // Spawnable on a multi-thread runtime: checked on a handle without a child.
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut handle = ChildHandle::from_socket(a);
        {
            let kill = handle.kill_async(Signal::TERM, Duration::ZERO);
            assert_send(&kill);
        }
        let close = handle.close_async();
        assert_send(&close);
        drop(close);
    }

    #[test]
    fn socket_only_close_async_on_both_flavours() {
        for multi in [false, true] {
            let rt = if multi {
                ::tokio::runtime::Builder::new_multi_thread()
            } else {
                ::tokio::runtime::Builder::new_current_thread()
            }
            .enable_all()
            .build()
            .unwrap();
            let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
            let report = rt
                .block_on(ChildHandle::from_socket(a).close_async())
                .unwrap();
            assert_eq!(report.ended_by, crate::Ending::NoChild);
            assert!(report.shutdown.is_some() && report.signals.is_empty());
        }
    }
}
