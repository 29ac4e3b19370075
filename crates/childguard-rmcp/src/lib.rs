//! # childguard-rmcp
//!
//! An [rmcp](https://docs.rs/rmcp) client transport over a stdio MCP server that
//! [childguard] owns: [`ChildTransport`]. rmcp speaks JSON-RPC over the server's stdin and
//! stdout; childguard keeps the process tree, and when the transport is closed (or dropped)
//! it closes the server the MCP way — stdin's EOF, 2 s, `SIGTERM`, 2 s, `SIGKILL` — on the
//! whole tree (a cgroup of its own when possible, else its process group), and reaps it. The
//! [`CloseReport`] says how it ended; [`Closed`] hands it to you after rmcp's service is done.
//!
//! ```no_run
//! use tokio::process::Command; // or std::process::Command
//! use childguard_rmcp::ChildTransport;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut cmd = Command::new("npx");
//! cmd.args(["-y", "@modelcontextprotocol/server-everything"]);
//! let transport = ChildTransport::spawn(cmd)?;    // piped stdio, stderr passed on and kept
//! let closed = transport.closed();                // the close report, later
//! let client = transport.serve(()).await?;        // initialize; an error names its stderr
//! let tools = client.list_tools(Default::default()).await?;
//! println!("{} tools", tools.tools.len());
//! client.cancel().await?;                         // rmcp closes the transport: our ladder
//! println!("{}", closed.report().await.expect("closed"));
//! # Ok(()) }
//! ```
//!
//! # Your `Cargo.toml`
//!
//! ```toml
//! [dependencies]
//! childguard-rmcp = "0.1"
//! # rmcp 3.x, at least 3.11 (the one this crate builds against, so that both name the same
//! # `Transport` trait); "client" for the client side: `ServiceExt::serve`, `RunningService`,
//! # `ClientHandler` (`()` is one). Nothing else of rmcp is needed for the transport —
//! # this crate turns on "transport-async-rw" itself; rmcp's "transport-child-process" only
//! # if you also use its `TokioChildProcess` or `ConfigureCommandExt`.
//! rmcp = { version = "3.11", default-features = false, features = ["client"] }
//! # A runtime: `#[tokio::main]` needs "macros" and "rt-multi-thread".
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! # What happens at each moment
//!
//! - **Spawn** ([`ChildTransport::spawn`], [`settings::stdio_server`]; the command a
//!   `std::process::Command` or a `tokio::process::Command`, as rmcp's `TokioChildProcess`
//!   takes): the server starts with stdin and stdout piped, contained, with the ladder
//!   [`MCP_LADDER`] and `exit_with_parent` (if this process dies, even by `SIGKILL`, the
//!   kernel kills the launcher and childguard's guardian the cgroup). Its stderr is passed on
//!   to ours line by line as it comes (`[npx 12345] npm error code E404`: as rmcp's
//!   `TokioChildProcess`, whose server inherits our stderr, and the MCP SDKs show it — ours
//!   with the server's name and pid in front) *and* kept in a bounded tail that the close
//!   report carries. Its stdin and stdout become the async halves of [`childguard::tokio`],
//!   which rmcp's newline-delimited JSON-RPC framing (`AsyncRwTransport`) reads and writes.
//! - **Start-up** ([`ChildTransport::serve`], or rmcp's own `().serve(transport)`):
//!   `initialize`. A server that exits first — npm's `E404` through `npx`, a missing module —
//!   makes rmcp say `connection closed: initialize response`; `serve`'s [`StartError`] adds
//!   how the server ended and its last stderr lines (with rmcp's own `serve` they are on your
//!   stderr, and in [`Closed::report`]).
//! - **Serving**: rmcp's service task owns the transport; requests, responses, notifications
//!   and cancellations go over the pipes. The child is not watched meanwhile: a server that
//!   dies ends rmcp's read with EOF, and rmcp then closes the transport.
//! - **Close** (rmcp calls [`Transport::close`] when its service ends: `cancel()`, `close()`,
//!   the peer's EOF, the `RunningService` dropped): the handle's blocking
//!   [`close`](childguard::ChildHandle::close) runs on a thread of its own (`cg-rmcp-close`),
//!   which rmcp's close awaits. It closes the server's stdin even if a send is under way or
//!   waiting for room in a full pipe (that send fails with `BrokenPipe` and rmcp's loop moves
//!   on), keeps stdout open through the ladder (no `SIGPIPE` for a server logging its
//!   shutdown), waits 2 s for the server to exit on EOF, then signals the tree, and reaps.
//!   Nothing of the tree is left when it returns: with a cgroup, the close ends with the
//!   cgroup empty, `setsid` workers included.
//! - **After**: [`Closed::report`] gives the [`CloseReport`] (how it ended, which signals went
//!   out, the stderr tail). A close that failed still has its report
//!   ([`childguard::Error::close_report`]).
//!
//! # Dropped, and the runtime's end
//!
//! Every close of the transport — rmcp's, or the transport's own drop — runs on a thread that
//! no tokio runtime owns, so the ladder is climbed to its end whatever becomes of the runtime,
//! and [`Closed`] gets the report:
//!
//! | case | what ends the server |
//! |---|---|
//! | the client (`RunningService`) or the transport dropped in a running runtime | the close thread: stdin closed (EOF), the 2 s EOF grace, then `TERM`, `KILL`; the report in [`Closed`] |
//! | dropped, then the runtime shut down at once (its tasks dropped, rmcp's among them), the process going on | the same: the thread started by the close or by the transport's drop (rmcp's task, dropped by the shutdown, drops the transport) is not the runtime's, and climbs on; the report in [`Closed`] |
//! | dropped outside any runtime | the blocking close, in the drop: it returns when the server is gone, the report in [`Closed`] |
//! | dropped, then the **process exits** (`main` returns at once, `std::process::exit`) | nothing of ours can climb any more: the process's end is the host's death. With `exit_with_parent` (the default) the kernel sends `SIGKILL` to the launcher and childguard's guardian writes `cgroup.kill`: the whole tree goes within milliseconds — no EOF grace, no report |
//!
//! So to keep the MCP close's EOF grace (a server exits on its own in a few hundred
//! milliseconds) and its report at the end of `main`, wait for the close before returning:
//! `client.cancel().await` (rmcp awaits our close), or `closed.report().await` after dropping
//! the client. rmcp's `TokioChildProcess`, for comparison, `SIGKILL`s its direct child on
//! drop (from a task, which the runtime's shutdown may drop), and leaves what the launcher
//! started.

pub mod settings;

mod close;
mod closed;
mod start;

use std::future::Future;
use std::io;

use childguard::tokio::{AsyncStdin, AsyncStdout};
use childguard::ChildHandle;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::Transport;
use rmcp::RoleClient;

pub use childguard::CloseReport;
pub use closed::Closed;
pub use settings::MCP_LADDER;
pub use start::{StartError, START_ERROR_LINES};

/// An rmcp client [`Transport`] over a childguard-owned stdio MCP server (see the crate docs
/// for what happens when).
pub struct ChildTransport {
    rw: AsyncRwTransport<RoleClient, AsyncStdout, AsyncStdin>,
    handle: Option<ChildHandle>,
    pid: Option<u32>,
    done: closed::Publisher,
}

impl std::fmt::Debug for ChildTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildTransport")
            .field("handle", &self.handle)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// [`ChildTransport::new`] was given a handle whose stdin or stdout was not piped (or was
/// taken). The handle is given back, untouched but for what was not there.
#[derive(Debug)]
pub struct NotPiped {
    /// The handle, still owning its child: close it (or drop it, which closes it).
    pub handle: ChildHandle,
    missing: &'static str,
}

impl std::fmt::Display for NotPiped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ChildTransport::new: the server's {} is not available: its Command must pipe \
             stdin and stdout (Stdio::piped(), as settings::stdio_server does), and neither \
             may be taken or handed out before",
            self.missing
        )
    }
}

impl std::error::Error for NotPiped {}

impl ChildTransport {
    /// Spawns `command` with [`settings::stdio_server`] (piped stdio, stderr passed on and
    /// kept, contained, [`MCP_LADDER`], gone with us) and makes the transport over it.
    /// `command`: a `std::process::Command` or a `tokio::process::Command` (as rmcp's
    /// `TokioChildProcess` takes; its `kill_on_drop` is not used — the close is ours).
    /// `spawn()` forks and returns (no readiness wait: MCP's `initialize` is the handshake);
    /// use [`spawn_async`](ChildTransport::spawn_async) to keep even the fork off a runtime
    /// thread. A program that cannot be started is an error naming it.
    pub fn spawn(
        command: impl Into<tokio::process::Command>,
    ) -> childguard::Result<ChildTransport> {
        let handle = settings::stdio_server(command).spawn()?;
        Ok(ChildTransport::new(handle).expect("stdio_server pipes stdin and stdout"))
    }

    /// [`spawn`](ChildTransport::spawn) on tokio's blocking pool.
    pub async fn spawn_async(
        command: impl Into<tokio::process::Command>,
    ) -> childguard::Result<ChildTransport> {
        let handle = settings::stdio_server(command).spawn_async().await?;
        Ok(ChildTransport::new(handle).expect("stdio_server pipes stdin and stdout"))
    }

    /// The transport over a handle you spawned yourself (e.g. with
    /// [`settings::stdio_server`], changed): its stdin and stdout must be piped and still
    /// there. The handle's ladder, containment and capture are used as they are.
    pub fn new(mut handle: ChildHandle) -> Result<ChildTransport, Box<NotPiped>> {
        let missing = match (handle.stdin().is_some(), handle.stdout().is_some()) {
            (true, true) => None,
            (false, true) => Some("stdin"),
            (true, false) => Some("stdout"),
            (false, false) => Some("stdin and stdout"),
        };
        if let Some(missing) = missing {
            return Err(Box::new(NotPiped { handle, missing }));
        }
        let (Some(stdin), Some(stdout)) = (handle.async_stdin(), handle.async_stdout()) else {
            unreachable!("both checked just above")
        };
        Ok(ChildTransport {
            rw: AsyncRwTransport::new_client(stdout, stdin),
            pid: handle.id(),
            handle: Some(handle),
            done: closed::Publisher::new(),
        })
    }

    /// Where the [`CloseReport`] will be, once the transport is closed (or dropped). Take it
    /// before handing the transport to rmcp, which consumes it.
    pub fn closed(&self) -> Closed {
        self.done.subscribe()
    }

    /// The server's pid (the launcher's, for `npx …`).
    pub fn id(&self) -> Option<u32> {
        self.pid
    }

    /// The handle, until the close takes it: its pid, its captured stderr
    /// ([`output_tail`](ChildHandle::output_tail)), its ladder.
    pub fn handle(&self) -> Option<&ChildHandle> {
        self.handle.as_ref()
    }

    /// The close: the handle's blocking close (EOF, TERM, KILL on the tree, reap) on the
    /// close thread, its outcome published to [`Closed`]; this awaits it. Dropped mid-way
    /// (the runtime shutting down), the thread climbs on and publishes. Does nothing the
    /// second time.
    async fn close_child(&mut self) -> io::Result<()> {
        let Some(handle) = self.handle.take() else {
            return Ok(());
        };
        let finished = close::start(handle, self.done.clone());
        let outcome = match finished.await {
            Ok(()) => self.done.subscribe().now(),
            Err(_) => None,
        };
        match outcome.as_deref() {
            Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(io::Error::new(e.io_kind(), e.to_string())),
            None => Err(io::Error::other(
                "the server's close ended without an outcome (its thread or task was lost); \
                 childguard's background reaper owns the child",
            )),
        }
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.rw.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.rw.receive()
    }

    /// Closes the server (see the crate docs): never waits on rmcp's writer lock, which a send
    /// blocked on a full pipe may hold; our close closes stdin under it instead.
    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.close_child()
    }
}

impl Drop for ChildTransport {
    /// Dropped without a close (see "Dropped, and the runtime's end" in the crate docs): in a
    /// tokio context the close runs on the close thread, never blocking a runtime thread and
    /// never dropped by a runtime's shutdown; outside one, the blocking close runs here.
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        let done = self.done.clone();
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(close::start(handle, done));
        } else {
            done.publish(handle.close());
        }
    }
}
