//! # childguard-lsp
//!
//! The Language Server Protocol's close for a stdio language server that [childguard] owns:
//! `shutdown` (a request, its answer awaited a bounded time), `exit` (a notification), then the
//! handle's close — childguard's ladder, for a server that does not finish it, and for
//! everything the server started. The `Content-Length` framing is done here; the
//! [`LspCloseReport`] says what each step did and which one ended the server.
//!
//! ```no_run
//! use std::process::Command;
//! use std::time::Duration;
//! use childguard::ChildHandle;
//! use childguard_lsp::{Ended, LspClose};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut cmd = Command::new("pyright-langserver");
//! cmd.arg("--stdio");
//! // Piped stdin and stdout, stderr passed on and kept in the tail, the whole tree contained,
//! // the ladder EOF:2s,TERM:2s,KILL:5s, gone with us.
//! let mut server = ChildHandle::stdio_server(cmd).spawn()?;
//! // … `initialize` and the session, over server.stdin() and server.stdout() …
//! let how = LspClose { shutdown_timeout: Duration::from_secs(2), exit_grace: Duration::from_secs(2) };
//! let report = childguard_lsp::close(server, how)?;
//! assert_eq!(report.ended_by, Ended::Exit); // a well-behaved server: gone after `exit`
//! println!("{report}");
//! # Ok(()) }
//! ```
//!
//! With the `tokio` feature, [`close_async`] does the same without blocking a runtime thread.
//!
//! # What happens at each moment
//!
//! | when | what |
//! |---|---|
//! | 0 | the server looked at: if it has exited, nothing is sent ([`Ended::BeforeShutdown`]), on to the handle's close |
//! | 0 | `shutdown` written (id `"childguard-lsp/shutdown"`, a string: it cannot be one of your numeric ids) |
//! | until its answer, at most [`shutdown_timeout`](LspClose::shutdown_timeout) | the server's stdout read; what comes before the answer is dropped (below); every 50 ms, and at once on end of file, a look at whether the server exited |
//! | the answer (or the timeout, the exit, the end of file) | `exit` written — unless the server exited, or a write failed: then nothing more is written |
//! | right after | our end of its stdin closed: end of file, as vscode-languageclient's `connection.end()` does after `exit` |
//! | until its exit, at most [`exit_grace`](LspClose::exit_grace) | the wait for the server (the process spawned) to exit: gone, it ended by [`Ended::Exit`] |
//! | then | the handle's close, as it would run alone: its ladder from the top (the EOF wait, if the ladder has one, then each rung's signal and grace), the whole tree, the reap; its [`CloseReport`] is [`LspCloseReport::close`] |
//!
//! So the close is bounded by `shutdown_timeout + exit_grace +` the handle ladder's
//! [`total_grace`](childguard::Ladder::total_grace) (plus a few milliseconds): with the
//! defaults (2 s, 2 s) and [`ChildHandle::stdio_server`]'s ladder (`EOF:2s,TERM:2s,KILL:5s`),
//! a server stuck in `shutdown` that ignores `SIGTERM` is killed after 6 s, its tree with it. A
//! well-behaved server costs its own answer and exit: pyright 1.1.414 is gone 30–60 ms after the
//! close began on an idle machine. The ladder's EOF wait comes after the exit grace, for a
//! server that already has its end of file: it is more time for that server, and for
//! what a server that exited left running (a launcher's chain ending, a worker finishing).
//! For a close that signals as soon as the exit grace is over, give the handle a ladder
//! without an EOF wait (`"TERM:2s,KILL:5s"`).
//!
//! # What the close reads, and what it answers
//!
//! You may have spoken LSP over the pipes before: the close takes them as they are.
//! - **Messages before the answer** — notifications (diagnostics, `window/logMessage`,
//!   progress), answers to requests you sent before the close — are read and dropped, counted
//!   in [`LspCloseReport::dropped`]. The answer comes after everything the server wrote
//!   before it (one ordered stream), so the pipe is empty once it came: nothing the server
//!   says later (only its exit is left) can fill it.
//! - **A request of the server's** (`workspace/configuration`, `client/registerCapability`,
//!   `window/workDoneProgress/create` …) is answered at once with a `RequestCancelled`
//!   (`-32800`) error: JSON-RPC wants every request answered, a server may hold its shutdown
//!   until it is, and an error is the one answer every request allows (a `null` result would
//!   break a handler expecting an array). Counted in [`LspCloseReport::refused`].
//! - **A stream begun mid-message** (a reader of yours had read part of a frame) **or a stray
//!   line** on stdout: the bytes up to the next `Content-Length:` are skipped
//!   ([`LspCloseReport::skipped_bytes`]); a body that is not JSON is dropped
//!   ([`LspCloseReport::garbled`]).
//! - **What cannot be read past** — a `Content-Length` that is not a number, or over
//!   [`MAX_BODY`] (64 MiB, the most one message may make us buffer) — ends the `shutdown` step
//!   with [`Shutdown::Unreadable`] saying why; a server that closes its stdout,
//!   [`Shutdown::StdoutClosed`]; one that says nothing, [`Shutdown::TimedOut`]. Each goes on to
//!   `exit` and the ladder: nothing about the server's output can make the close panic, hang
//!   or skip the ladder.
//! - **After the answer** nothing more is read. Our end of the stdout stays open until the
//!   handle's close returns, so a server writing while it exits is not killed by `SIGPIPE`.
//!
//! Every write is non-blocking and bounded: a server that does not read its stdin, whose pipe
//! is full, gets [`Shutdown::NotSent`] (or [`Exit::NotSent`]) and the ladder, never a hung
//! client. After a write that failed, nothing more is written (half a frame may have gone).
//!
//! # The channel
//!
//! [`close`] and [`close_async`] speak over the handle's piped stdin and stdout (still in the
//! handle: lent with `stdin()`/`stdout()`, not taken), or its stdio socket
//! ([`childguard::StdioChannel::Socketpair`]). Pipes you took out of the handle go to
//! [`close_pipes`]; async halves you hold (`async_stdin`/`async_stdout`, or any reader and
//! writer), to [`close_async_halves`]. Without a channel, nothing is sent
//! ([`Shutdown::NotSent`]) and the handle's close runs at once.
//!
//! # Cancelled, dropped
//!
//! [`close_async`]'s future owns the handle. Dropped before it completes, it drops the handle,
//! whose `Drop` closes the server as the handle's close would (in a runtime: in the background,
//! by childguard's reaper, which climbs the ladder and reaps); once in the handle's
//! `close_async`, that close's own cancel-safety holds (the rest of the ladder to the reaper).
//! Either way the server and its tree end; only the report is lost.

pub mod report;

mod blocking;
mod frame;
mod session;
mod steps;
#[cfg(feature = "tokio")]
mod tokio;

use std::os::fd::OwnedFd;
use std::time::Duration;

use childguard::ChildHandle;
pub use childguard::CloseReport;

pub use frame::MAX_BODY;
pub use report::{Ended, Error, Exit, LspCloseReport, Shutdown};

/// How long each step of the LSP close may take (see the crate docs for the timeline).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LspClose {
    /// The longest wait for `shutdown`'s answer (from the start of the close; the writes of
    /// `shutdown` and of any answer to the server count in it). Default 2 s, as
    /// vscode-languageclient's `stop()`.
    pub shutdown_timeout: Duration,
    /// After `exit` and the end of file: the longest wait for the server to exit before the
    /// handle's close begins. Default 2 s, as vscode-languageclient's wait before its kill.
    pub exit_grace: Duration,
}

impl Default for LspClose {
    fn default() -> LspClose {
        LspClose {
            shutdown_timeout: Duration::from_secs(2),
            exit_grace: Duration::from_secs(2),
        }
    }
}

/// The LSP close over the handle's own stdin and stdout (or stdio socket), then the handle's
/// close; blocks for up to `shutdown_timeout + exit_grace +` the ladder's total grace.
///
/// # Errors
///
/// Only the handle's close fails (a refused signal, a failed wait: [`childguard::Error`]);
/// [`Error::report`] then has the report, with the close's. Whatever the server does on the
/// protocol is an outcome in the report, not an error.
pub fn close(mut handle: ChildHandle, how: LspClose) -> Result<LspCloseReport, Error> {
    let channel = blocking::Channel::from_handle(&mut handle);
    blocking::run(handle, channel, &how)
}

/// [`close`] over pipes you took out of the handle (`take_stdin`, `take_stdout`), or any
/// pair of fds carrying the session: `stdin` is closed after `exit` (the server's end of
/// file), `stdout` once the handle's close returned. Both are made non-blocking.
pub fn close_pipes(
    handle: ChildHandle,
    stdin: impl Into<OwnedFd>,
    stdout: impl Into<OwnedFd>,
    how: LspClose,
) -> Result<LspCloseReport, Error> {
    let channel = blocking::Channel::new(stdin.into(), stdout.into());
    blocking::run(handle, Ok(channel), &how)
}

/// [`close`] for async code: the same steps and report, each wait a tokio timer, then the
/// handle's [`close_async`](ChildHandle::close_async). The handle's stdin and stdout become
/// its async halves for it ([`ChildHandle::async_stdin`]). Cancel-safe as the crate docs say.
#[cfg(feature = "tokio")]
pub async fn close_async(handle: ChildHandle, how: LspClose) -> Result<LspCloseReport, Error> {
    tokio::run_own(handle, &how).await
}

/// [`close_async`] over halves you hold: `stdin` is shut down after `exit` (the server's end of
/// file; for childguard's [`AsyncStdin`](childguard::tokio::AsyncStdin), its close),
/// `stdout` dropped once the handle's close returned.
#[cfg(feature = "tokio")]
pub async fn close_async_halves<W, R>(
    handle: ChildHandle,
    stdin: W,
    stdout: R,
    how: LspClose,
) -> Result<LspCloseReport, Error>
where
    W: ::tokio::io::AsyncWrite + Unpin,
    R: ::tokio::io::AsyncRead + Unpin,
{
    tokio::run(handle, Ok((stdin, stdout)), &how).await
}
