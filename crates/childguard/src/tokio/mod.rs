//! The tokio face (feature `tokio`): close and kill without blocking an executor thread.
//!
//! ```no_run
//! use std::process::Command;
//! use std::time::Duration;
//! use childguard::{ChildHandle, Signal, SocketMode};
//!
//! # async fn demo() -> childguard::Result<()> {
//! let mut handle = ChildHandle::builder(Command::new("nbdkit"))
//!     .socket(SocketMode::Stdio)
//!     .ladder("HUP:1s,TERM:2s,KILL:5s".parse().unwrap())
//!     .spawn()?;
//! // … talk over handle.socket() …
//! if handle.kill_async(Signal::TERM, Duration::from_millis(200)).await?.is_none() {
//!     // still alive after 200 ms: the close carries on from the TERM rung
//! }
//! let report = handle.close_async().await?;   // same timeline and report as close()
//! println!("{report}");
//! # Ok(()) }
//! ```
//!
//! # What it adds to [`ChildHandle`](crate::ChildHandle)
//!
//! - [`close_async`](crate::ChildHandle::close_async): the close path of
//!   [`close`](crate::ChildHandle::close) — shutdown, close, ladder, reap — with the same
//!   [`CloseReport`](crate::CloseReport). Every wait is a tokio timer raced against the
//!   readiness of the child's pidfd (an [`AsyncFd`](::tokio::io::unix::AsyncFd) over a
//!   duplicate of it), or, on the portable mechanism, against a `SIGCHLD` wake-up of the task.
//!   No call blocks the runtime thread.
//! - [`spawn_async`](crate::Builder::spawn_async): `spawn()`, with activation's accept and the
//!   [`ready`](crate::Builder::ready) wait, on tokio's blocking pool.
//! - [`kill_async`](crate::ChildHandle::kill_async) and
//!   [`wait_timeout_async`](crate::ChildHandle::wait_timeout_async): `kill` and `wait_timeout`
//!   with the same non-blocking wait.
//! - [`async_stdin`](crate::ChildHandle::async_stdin) and
//!   [`async_stdout`](crate::ChildHandle::async_stdout): the server's piped stdin and stdout as
//!   [`AsyncStdin`] / [`AsyncStdout`] halves to move into tasks (an MCP or LSP client's
//!   transport), while the close keeps the process: it still closes stdin (EOF; a waiting
//!   writer is woken with `BrokenPipe`) and keeps stdout open through the ladder.
//! - A `ChildHandle` *dropped* inside a runtime (no explicit close) closes as with
//!   [`Reap::Background`](crate::Reap::Background): the drop sends the first due rung and
//!   returns; the shared [`reaper`](crate::reaper) thread climbs the rest and reaps. An
//!   explicit `Builder::reap(Reap::Blocking)` is kept on a multi-thread runtime (a plain
//!   blocking close in `spawn_blocking`, `block_in_place` on a worker); see
//!   [`Reap::Blocking`](crate::Reap::Blocking).
//!
//! The names end in `_async` on purpose: an extension trait with a `close(self)` returning a
//! future would lose to the inherent, blocking [`ChildHandle::close`](crate::ChildHandle::close) in method resolution, so
//! `handle.close().await` would not even compile, and a reader could not tell which one runs.
//!
//! # Cancel safety
//!
//! Dropping a `close_async` future (a `timeout`, a `select!` branch, an aborted task) at any
//! await point hands the child, with its ladder where it stood, to the shared reaper thread:
//! the remaining rungs are sent on time and the child is reaped. The report is lost, the child
//! is not. Dropping a `kill_async` future only gives up the wait: the signal was sent and is
//! remembered by the next close, as with `kill`.
//!
//! # Runtimes
//!
//! Current-thread and multi-thread runtimes alike, with both the IO and the time driver
//! enabled (`Builder::enable_all`, as `#[tokio::main]` does): like tokio's own sockets and
//! timers, `close_async` panics in a runtime built without them. The one call that may block
//! is the last resort of a failed reaper start (no thread or fd left): the child is then
//! waited for in place, as in the blocking close.
//!
//! # Coexistence
//!
//! Nothing here reaps anything but our own children (`waitid` on the pidfd or the pid), so
//! `tokio::process` children and a host's own `SIGCHLD` handlers (tokio's, signal-hook's) keep
//! working: our `SIGCHLD` listener is chained through signal-hook, and is used only by the
//! portable mechanism.

mod close;
mod spawn;
mod stdio;
mod supervise;
mod wait;

pub use stdio::{AsyncStdin, AsyncStdout};
