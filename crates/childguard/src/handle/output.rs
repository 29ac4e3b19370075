//! [`ChildHandle::output`]: std's `wait_with_output` with a bound.
//!
//! One thread, no helper threads: `poll(2)` on both pipes and the child's pidfd at once, so a
//! child filling one pipe while we wait on the other never deadlocks (the classic
//! `wait_with_output` trap std avoids with a second thread), and its exit wakes us at once.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use crate::close::close_control::CloseControl;
use crate::close::report::CloseReport;
use crate::core::wait::later;
use crate::core::wait::{Interrupt, Wait, Woke};
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
        let mut pipes = std::mem::take(self.pipes_mut());
        pipes.close_stdin("the handle's output() closed it");
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
            drain.wait(process, deadline, None).map_err(fail)?;
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
            (None, Some((process, climb))) => climb.run_blocking(
                process,
                &mut CloseControl::new().waiter(|process, _notify, until, interrupt| {
                    drain.wait(process, until, interrupt)
                }),
            ),
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
    /// Calls `f` with the open pipes' fds, in stream order (on the stack: no allocation).
    fn with_open<R>(&self, f: impl FnOnce(&[BorrowedFd<'_>]) -> R) -> R {
        match (self.streams[0].fd.as_ref(), self.streams[1].fd.as_ref()) {
            (Some(a), Some(b)) => f(&[a.as_fd(), b.as_fd()]),
            (Some(a), None) | (None, Some(a)) => f(&[a.as_fd()]),
            (None, None) => f(&[]),
        }
    }

    /// Waits until a pipe is readable, the child's state may have changed, or `deadline`
    /// (one [`Process::wait_with`]: on the portable path it reads the `SIGCHLD` generation
    /// between short polls of the pipes); reads what the pipes have. Returns by `deadline`
    /// (spurious returns allowed).
    fn wait(
        &mut self,
        process: &Process,
        deadline: Instant,
        interrupt: Option<&Interrupt>,
    ) -> io::Result<()> {
        let woke = self.with_open(|pipes| process.wait_with(pipes, deadline, interrupt))?;
        self.read_woken(woke).map(drop)
    }

    /// Reads until both pipes are at EOF or have nothing to read, or `deadline` passes.
    fn read_what_is_there(&mut self, deadline: Instant) -> io::Result<()> {
        while self.with_open(|pipes| !pipes.is_empty()) && Instant::now() < deadline {
            let woke = self.with_open(|pipes| Wait::until(Instant::now()).fds(pipes).run())?;
            if !self.read_woken(woke)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// One read of each pipe the wait found readable (or hung up); the open pipes are the
    /// first fds of the wait, in stream order. Returns whether a pipe was.
    fn read_woken(&mut self, woke: Woke) -> io::Result<bool> {
        let Woke::Readable(readable) = woke else {
            return Ok(false);
        };
        let mut index = 0;
        let mut any = false;
        for stream in &mut self.streams {
            if stream.fd.is_some() {
                if readable.contains(index) {
                    stream.read_once()?;
                    any = true;
                }
                index += 1;
            }
        }
        Ok(any)
    }
}
