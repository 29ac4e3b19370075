//! [`ChildHandle::output`]: std's `wait_with_output` with a bound.
//!
//! One thread, no helper threads: `poll(2)` on both pipes and the child's pidfd at once, so a
//! child filling one pipe while we wait on the other never deadlocks (the classic
//! `wait_with_output` trap std avoids with a second thread), and its exit wakes us at once.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::close::report::CloseReport;
use crate::core::poll::later;
use crate::error::{Error, ErrorKind, Result};
use crate::handle::no_child;
use crate::process::Process;
use crate::ChildHandle;

/// What [`ChildHandle::output`] collected, and how the close went.
#[derive(Debug)]
#[non_exhaustive]
pub struct Output {
    /// Everything read from the child's stdout (empty if it was not piped or was taken).
    pub stdout: Vec<u8>,
    /// Everything read from the child's stderr (empty if it was not piped or was taken).
    pub stderr: Vec<u8>,
    /// The child was still running when the timeout ran out, and was closed with its ladder.
    pub timed_out: bool,
    /// The close: its signals, the exit status, its timeline.
    pub report: CloseReport,
}

impl Output {
    /// The exit status (`None` if the child outlived its ladder or was reaped by another).
    pub fn status(&self) -> Option<ExitStatus> {
        self.report.status
    }
}

/// On the portable mechanism (no pidfd), the child's exit is no fd we can poll alongside the
/// pipes: while it runs and a pipe is open, we look at it again at least this often.
const PORTABLE_EXIT_CHECK: Duration = Duration::from_millis(10);

impl ChildHandle {
    /// Reads the child's piped stdout and stderr until it exits or `timeout` passes, then
    /// closes the handle ([`close`](ChildHandle::close)'s path: shutdown, close, ladder, reap)
    /// and returns what was read with the [`CloseReport`].
    ///
    /// What happens, in order:
    /// 1. Our end of a piped stdin is closed (as std's `wait_with_output` does), so a child
    ///    reading it sees EOF.
    /// 2. Until the child exits, or `timeout` passes: both pipes are read as data arrives, in
    ///    one thread, by `poll(2)` on the pipes and the child's pidfd — a child that fills one
    ///    pipe while we would wait on the other never blocks.
    /// 3. Once it exited, what it wrote before exiting is in the pipes: read until EOF or until
    ///    they are empty (a descendant holding a pipe open does not keep us waiting beyond that).
    /// 4. If it is still running at `timeout`: the close climbs the ladder, and the pipes are
    ///    read meanwhile too, so a server logging its shutdown never blocks on a full pipe.
    ///
    /// Bounded: returns within `timeout` plus the ladder's
    /// [`total_grace`](crate::Ladder::total_grace) plus a few milliseconds. The output itself
    /// is not bounded (as with std): for a server that logs without end, prefer a capture.
    ///
    /// Pipes the `Command` did not ask for, or that were taken, give empty output.
    pub fn output(mut self, timeout: Duration) -> Result<Output> {
        let deadline = later(Instant::now(), timeout);
        let pipes = std::mem::take(self.pipes_mut());
        drop(pipes.stdin);
        let mut drain = Drain {
            streams: [
                Stream::new(pipes.stdout.map(OwnedFd::from)),
                Stream::new(pipes.stderr.map(OwnedFd::from)),
            ],
        };
        let program = self.program().map(str::to_owned);
        let fail = |e: io::Error| Error::new(ErrorKind::Wait, program.as_deref(), e);
        let exited = loop {
            if self.try_wait()?.is_some() {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            let process = self.process().ok_or_else(no_child)?;
            drain.wait(process, deadline).map_err(fail)?;
        };
        if exited {
            drain.read_what_is_there(deadline).map_err(fail)?;
        }
        let mut closing = self.begin_close();
        drop(self); // closed: its Drop does nothing more
        let mut child = closing.child.take();
        let climbed = match (closing.earlier_exit.take(), child.as_mut()) {
            (Some(e), _) => Err(e),
            (None, None) => Ok(true),
            // The drain watches the pipes and the pidfd, not the notify socket: what came on
            // it is read by the climb's next step, before any rung is sent (`Climb::hear`).
            (None, Some((process, climb))) => climb
                .run_blocking_with(process, |process, _notify, until| {
                    drain.wait(process, until)
                }),
        };
        let report = closing.finish(child, climbed)?;
        // The child is gone (or handed on): take what it left, bounded as step 3.
        drain
            .read_what_is_there(Instant::now() + Duration::from_millis(100))
            .map_err(fail)?;
        let [stdout, stderr] = drain.streams.map(|s| s.data);
        Ok(Output {
            stdout,
            stderr,
            timed_out: !exited,
            report,
        })
    }
}

/// One pipe being read to its end.
struct Stream {
    /// `None` once at EOF (or never piped).
    fd: Option<OwnedFd>,
    data: Vec<u8>,
}

impl Stream {
    fn new(fd: Option<OwnedFd>) -> Stream {
        Stream {
            fd,
            data: Vec::new(),
        }
    }

    /// One `read(2)` after `poll` said readable (so it does not block: we are the pipe's only
    /// reader). EOF closes our end.
    fn read_once(&mut self) -> io::Result<()> {
        let Some(fd) = self.fd.as_ref() else {
            return Ok(());
        };
        let mut chunk = [0u8; 64 * 1024];
        match rustix::io::read(fd, &mut chunk) {
            Ok(0) => self.fd = None,
            Ok(n) => self.data.extend_from_slice(&chunk[..n]),
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}

/// Both pipes, read as data arrives.
struct Drain {
    streams: [Stream; 2],
}

impl Drain {
    fn open(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.streams
            .iter()
            .filter_map(|s| s.fd.as_ref())
            .map(AsFd::as_fd)
    }

    /// Waits until a pipe is readable, the child's state may have changed, or `deadline`;
    /// reads what the pipes have. Returns by `deadline` (spurious returns allowed).
    fn wait(&mut self, process: &Process, deadline: Instant) -> io::Result<()> {
        if self.open().next().is_none() {
            return process.wait_until(deadline);
        }
        let mut left = deadline.saturating_duration_since(Instant::now());
        if process.is_running() && !process.uses_pidfd() {
            left = left.min(PORTABLE_EXIT_CHECK);
        }
        self.poll_and_read(&process.wait_fds(), left).map(drop)
    }

    /// Reads until both pipes are at EOF or have nothing to read, or `deadline` passes.
    fn read_what_is_there(&mut self, deadline: Instant) -> io::Result<()> {
        while self.open().next().is_some() && Instant::now() < deadline {
            if !self.poll_and_read(&[], Duration::ZERO)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// One `poll(2)` on the open pipes and `extra` fds for up to `timeout`, then one read of
    /// each pipe that is readable (or hung up). Returns whether a pipe was.
    fn poll_and_read(&mut self, extra: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<bool> {
        let ready = {
            let mut fds: Vec<PollFd<'_>> = self
                .open()
                .chain(extra.iter().copied())
                .map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN))
                .collect();
            let timeout = Timespec::try_from(timeout).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            });
            match poll(&mut fds, Some(&timeout)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            let mut ready = [false; 2];
            let mut polled = fds.iter();
            for (slot, stream) in ready.iter_mut().zip(&self.streams) {
                if stream.fd.is_some() {
                    *slot = polled.next().is_some_and(|fd| !fd.revents().is_empty());
                }
            }
            ready
        };
        for (stream, ready) in self.streams.iter_mut().zip(ready) {
            if ready {
                stream.read_once()?;
            }
        }
        Ok(ready.contains(&true))
    }
}
