//! Our end of a piped stdin shared between the handle and an async writer half (feature
//! `tokio`; the half is `childguard::tokio::AsyncStdin`).
//!
//! The close must close the pipe's write end — that EOF is the first step of an MCP or LSP
//! close — even when a task holds the writer and is in the middle of a write. Two things
//! could go wrong, and the slot below is there to prevent both:
//!
//! - **fd reuse.** Closing an fd number that another thread is about to `write(2)` to lets the
//!   kernel hand that number to the next `open` or `socket` anywhere in the process: the writer
//!   then writes MCP frames into a stranger's file. Here the write end lives in one slot behind
//!   a lock; a write takes the lock around one non-blocking `write(2)` (and the readiness check
//!   before it, which never waits), and the close takes the fd out of the slot under the same
//!   lock. So a write sees the fd open for its whole syscall, or sees it gone: never a number
//!   that was closed meanwhile.
//! - **a writer hanging forever.** A writer waiting for room in a full pipe (the server does
//!   not read) waits on tokio's readiness of the fd, outside the lock. Dropping the fd's
//!   `AsyncFd` deregisters it, but does not wake a task waiting on it: so the slot keeps the
//!   writer's own waker and the close wakes it. The writer then finds the slot empty and gets
//!   `BrokenPipe`.
//!
//! The fd is registered with tokio at the first write (lazily: a handle can hand the half out
//! before any runtime exists), and made non-blocking then.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;

use crate::sys;

/// The shared write end. The handle holds one `Arc`, the writer half the other.
#[derive(Debug)]
pub(crate) struct SharedStdin {
    slot: Mutex<Slot>,
}

#[derive(Debug)]
struct Slot {
    end: End,
    /// The last task that found the pipe full (or polled at all): woken by the close.
    waker: Option<Waker>,
}

#[derive(Debug)]
enum End {
    /// Not yet used by a task: a plain blocking fd, as `spawn()` made it.
    Plain(OwnedFd),
    /// Registered with the runtime of the first write, non-blocking.
    Registered(AsyncFd<Arc<OwnedFd>>),
    /// Closed: by the close of the handle, the half's shutdown or its drop.
    Closed(&'static str),
}

impl SharedStdin {
    /// Takes over `stdin` (our end of the child's stdin pipe).
    pub(crate) fn new(stdin: OwnedFd) -> Arc<SharedStdin> {
        Arc::new(SharedStdin {
            slot: Mutex::new(Slot {
                end: End::Plain(stdin),
                waker: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        // A panic while the lock was held (in a waker's clone, say) left a consistent slot:
        // every change to it is one assignment.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes from `buf` without blocking: `Pending` (the waker kept, for the fd's readiness and
    /// for the close) while the pipe is full; `BrokenPipe` once the end is closed.
    pub(crate) fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let mut slot = self.lock();
        match &slot.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => slot.waker = Some(cx.waker().clone()),
        }
        if let End::Plain(_) = slot.end {
            let End::Plain(fd) = std::mem::replace(&mut slot.end, End::Closed("")) else {
                unreachable!("matched just above")
            };
            match register(fd) {
                Ok(registered) => slot.end = End::Registered(registered),
                Err(e) => {
                    slot.end = End::Closed("registering it with the tokio runtime failed");
                    return Poll::Ready(Err(e));
                }
            }
        }
        let fd = match &slot.end {
            End::Registered(fd) => fd,
            End::Closed(why) => return Poll::Ready(Err(closed(why))),
            End::Plain(_) => unreachable!("registered just above"),
        };
        loop {
            // Never waits: `Pending` returns at once, and the lock goes with the guard.
            let mut ready = match fd.poll_write_ready(cx) {
                Poll::Ready(Ok(ready)) => ready,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            // The one syscall under the lock: the fd is open until it returns.
            let written =
                ready.try_io(|fd| rustix::io::write(fd.get_ref(), buf).map_err(io::Error::from));
            match written {
                Ok(result) => return Poll::Ready(result),
                // EAGAIN: the readiness is cleared; poll it again (it registers the waker).
                Err(_would_block) => continue,
            }
        }
    }

    /// Closes the write end (EOF for the server once no other copy is open) and wakes a writer
    /// waiting for room. `why` is what a later write is told. Idempotent.
    pub(crate) fn close(&self, why: &'static str) {
        let (end, waker) = {
            let mut slot = self.lock();
            if let End::Closed(_) = slot.end {
                return;
            }
            (
                std::mem::replace(&mut slot.end, End::Closed(why)),
                slot.waker.take(),
            )
        };
        // Out of the slot: no write can reach the fd any more. Dropping the AsyncFd deregisters
        // it and closes the fd (the Arc inside it is the only one).
        drop(end);
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Whether the write end is still open.
    pub(crate) fn is_open(&self) -> bool {
        !matches!(self.lock().end, End::Closed(_))
    }
}

/// Makes `fd` non-blocking and registers it for writability with the current runtime.
fn register(fd: OwnedFd) -> io::Result<AsyncFd<Arc<OwnedFd>>> {
    rustix::io::ioctl_fionbio(&fd, true)?;
    sys::async_fd(Arc::new(fd), Interest::WRITABLE)
}

fn closed(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        format!("the server's stdin is closed: {why}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    /// Counts its wake-ups.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The close wakes a writer waiting on a full pipe (tokio would not: the AsyncFd is
    /// dropped, not made ready), and the writer then gets `BrokenPipe`; the read end sees EOF.
    #[test]
    fn close_wakes_a_writer_waiting_on_a_full_pipe() {
        let rt = ::tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = rt.enter();
        let (read, write) = rustix::pipe::pipe().unwrap();
        // Nobody reads: fill the pipe first (non-blocking writes until EAGAIN).
        rustix::io::ioctl_fionbio(&write, true).unwrap();
        let chunk = [7u8; 4096];
        let mut written = 0usize;
        loop {
            match rustix::io::write(&write, &chunk) {
                Ok(n) => written += n,
                Err(rustix::io::Errno::AGAIN) => break,
                Err(e) => panic!("filling the pipe: {e}"),
            }
            assert!(
                written <= 16 << 20,
                "the pipe never filled ({written} bytes)"
            );
        }
        let shared = SharedStdin::new(write);
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        // The write waits for room: `Pending`, no thread blocked.
        assert!(shared.poll_write(&mut cx, &chunk).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        shared.close("closed by the test");
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "the close did not wake the writer"
        );
        match shared.poll_write(&mut cx, &chunk) {
            Poll::Ready(Err(e)) => {
                assert_eq!(e.kind(), io::ErrorKind::BrokenPipe, "{e}");
                assert!(e.to_string().contains("closed by the test"), "{e}");
            }
            other => panic!("a write after the close: {other:?}"),
        }
        assert!(!shared.is_open());
        // Our end is really closed: the reader drains what was written, then reads EOF.
        let mut buf = vec![0u8; 1 << 16];
        let mut drained = 0;
        loop {
            let n = rustix::io::read(&read, &mut buf[..]).unwrap();
            if n == 0 {
                break;
            }
            drained += n;
        }
        assert_eq!(drained, written);
    }

    /// A close before any write closes the plain fd (no runtime needed).
    #[test]
    fn close_before_any_write_gives_eof() {
        let (read, write) = rustix::pipe::pipe().unwrap();
        let shared = SharedStdin::new(write);
        shared.close("closed");
        shared.close("twice is fine");
        let mut buf = [0u8; 8];
        assert_eq!(rustix::io::read(&read, &mut buf[..]).unwrap(), 0);
    }
}
