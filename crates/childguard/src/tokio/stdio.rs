//! The server's piped stdin and stdout as tokio halves: [`AsyncStdin`] ([`AsyncWrite`]) and
//! [`AsyncStdout`] ([`AsyncRead`]), to move into tasks while the handle keeps the close.

use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

use crate::spawn::shared_stdin::SharedStdin;
use crate::sys;
use crate::ChildHandle;

/// Async stdio, for protocols spoken over the server's stdin and stdout (MCP, LSP).
///
/// # What happens at each moment
///
/// - **Hand-out.** [`async_stdin`](ChildHandle::async_stdin) and
///   [`async_stdout`](ChildHandle::async_stdout) take the pipe ends the `Command` piped
///   (`Stdio::piped()`), as [`take_stdin`](ChildHandle::take_stdin) does: after it,
///   [`stdin`](ChildHandle::stdin) is `None`. Unlike a take, the handle keeps a share of each,
///   so that its close still does what it does to the pipes. The halves are `Send + 'static`:
///   move them into tasks. Nothing is registered with tokio yet; that happens at the first
///   read or write, in the runtime that polls it (keep each half on one runtime).
/// - **Writing.** A write is one non-blocking `write(2)`; while the pipe is full (the server
///   does not read) the task waits for room, without blocking its thread.
/// - **Reading.** The same, with `read(2)`; `Ok(0)` (EOF) once every copy of the write end
///   of stdout is closed: the server and every descendant that inherited it have exited (or
///   closed it).
/// - **The close** ([`close`](ChildHandle::close), [`close_async`](ChildHandle::close_async),
///   the drop), step 2: our end of stdin is closed *even though the writer half exists*: the
///   server reads EOF, which is the first step of an MCP or LSP close. A write under way
///   finishes first (it is one non-blocking syscall); a writer waiting for room is woken and
///   gets [`BrokenPipe`](io::ErrorKind::BrokenPipe), as does every later write. The fd is
///   never closed under a writer's feet (its number could be reused by another open).
/// - **Through the ladder** the read end of stdout stays open, held by the handle's share,
///   even if the reader half was dropped: the server never gets `SIGPIPE` for a line of
///   shutdown log. A server that writes while nobody reads fills the pipe (64 KiB) and
///   blocks, and gets the next rungs, as any hung server does. The handle's share goes after
///   the reap; the reader half, if you kept it, then reads what is left, then EOF.
/// - **Shutting down or dropping the writer half** closes stdin (EOF for the server) at once,
///   without closing the handle. Dropping the reader half closes nothing the server writes to
///   while the handle lives (the handle's share keeps it open).
impl ChildHandle {
    /// Our end of the server's stdin as an [`AsyncWrite`] half (see above). `None` if the
    /// `Command` did not pipe stdin, or it was taken or handed out before.
    pub fn async_stdin(&mut self) -> Option<AsyncStdin> {
        let pipes = self.pipes_mut();
        let stdin = pipes.stdin.take()?;
        let shared = SharedStdin::new(OwnedFd::from(stdin));
        pipes.stdin_shared = Some(Arc::clone(&shared));
        Some(AsyncStdin { shared })
    }

    /// Our end of the server's stdout as an [`AsyncRead`] half (see above). `None` if the
    /// `Command` did not pipe stdout (or [`Capture`](crate::Capture) took it), or it was taken
    /// or handed out before.
    pub fn async_stdout(&mut self) -> Option<AsyncStdout> {
        let pipes = self.pipes_mut();
        let stdout = Arc::new(OwnedFd::from(pipes.stdout.take()?));
        pipes.stdout_kept = Some(Arc::clone(&stdout));
        Some(AsyncStdout {
            end: ReadEnd::Plain(stdout),
        })
    }
}

/// The server's stdin, writable from any task ([`ChildHandle::async_stdin`]). The handle's
/// close closes it even while this half lives: writes then fail with `BrokenPipe`.
/// [`poll_shutdown`](AsyncWrite::poll_shutdown) (`AsyncWriteExt::shutdown`) or drop closes it too: EOF for the
/// server.
#[derive(Debug)]
pub struct AsyncStdin {
    shared: Arc<SharedStdin>,
}

impl AsyncStdin {
    /// Whether our end of the server's stdin is still open (neither the handle's close nor a
    /// shutdown closed it).
    pub fn is_open(&self) -> bool {
        self.shared.is_open()
    }
}

impl AsyncWrite for AsyncStdin {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.shared.poll_write(cx, buf)
    }

    /// Nothing is buffered here: every write went to the pipe.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Closes our end of stdin: EOF for the server.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shared.close("the writer half was shut down");
        Poll::Ready(Ok(()))
    }
}

impl Drop for AsyncStdin {
    fn drop(&mut self) {
        self.shared.close("the writer half was dropped");
    }
}

/// The server's stdout, readable from any task ([`ChildHandle::async_stdout`]).
#[derive(Debug)]
pub struct AsyncStdout {
    end: ReadEnd,
}

#[derive(Debug)]
enum ReadEnd {
    /// Not yet read: registered at the first read, in the runtime that polls it.
    Plain(Arc<OwnedFd>),
    Registered(AsyncFd<Arc<OwnedFd>>),
    /// Registering with tokio failed: the error was returned; later reads fail too.
    Failed,
}

impl AsyncRead for AsyncStdout {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let ReadEnd::Plain(fd) = &self.end {
            let fd = Arc::clone(fd);
            self.end = ReadEnd::Failed;
            let registered = rustix::io::ioctl_fionbio(&*fd, true)
                .map_err(io::Error::from)
                .and_then(|()| sys::async_fd(fd, Interest::READABLE));
            match registered {
                Ok(fd) => self.end = ReadEnd::Registered(fd),
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        let ReadEnd::Registered(fd) = &self.end else {
            return Poll::Ready(Err(io::Error::other(
                "the server's stdout could not be registered with the tokio runtime",
            )));
        };
        loop {
            let mut ready = match fd.poll_read_ready(cx) {
                Poll::Ready(Ok(ready)) => ready,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            let unfilled = buf.initialize_unfilled();
            let read = ready.try_io(|fd| {
                rustix::io::read(fd.get_ref(), &mut *unfilled).map_err(io::Error::from)
            });
            match read {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_static<T: Send + 'static>() {}

    #[test]
    fn halves_are_send_and_static() {
        assert_send_static::<AsyncStdin>();
        assert_send_static::<AsyncStdout>();
    }
}
