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
//! use std::process::Command;
//! use rmcp::ServiceExt;
//! use childguard_rmcp::ChildTransport;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut cmd = Command::new("npx");
//! cmd.args(["-y", "@modelcontextprotocol/server-everything"]);
//! let transport = ChildTransport::spawn(cmd)?;   // piped stdio, stderr captured, contained
//! let closed = transport.closed();                // the close report, later
//! let client = ().serve(transport).await?;        // initialize
//! let tools = client.list_tools(Default::default()).await?;
//! println!("{} tools", tools.tools.len());
//! client.cancel().await?;                         // rmcp closes the transport: our ladder
//! println!("{}", closed.report().await.expect("closed"));
//! # Ok(()) }
//! ```
//!
//! # What happens at each moment
//!
//! - **Spawn** ([`ChildTransport::spawn`], [`settings::stdio_server`]): the server starts with
//!   stdin and stdout piped, stderr captured (its tail goes into the report), contained, with
//!   the ladder [`MCP_LADDER`]. Its stdin and stdout become the async halves of
//!   [`childguard::tokio`], which rmcp's newline-delimited JSON-RPC framing
//!   (`AsyncRwTransport`) reads and writes.
//! - **Serving**: rmcp's service task owns the transport; requests, responses, notifications
//!   and cancellations go over the pipes. The child is not watched meanwhile: a server that
//!   dies ends rmcp's read with EOF, and rmcp then closes the transport.
//! - **Close** (rmcp calls [`Transport::close`] when its service ends: `cancel()`, `close()`,
//!   the peer's EOF, the `RunningService` dropped): the handle's
//!   [`close_async`](childguard::ChildHandle::close_async) runs. It closes the server's stdin
//!   even if a send is under way or waiting for room in a full pipe (that send fails with
//!   `BrokenPipe` and rmcp's loop moves on), keeps stdout open through the ladder (no
//!   `SIGPIPE` for a server logging its shutdown), waits 2 s for the server to exit on EOF,
//!   then signals the tree, and reaps. Nothing of the tree is left when it returns: with a
//!   cgroup, the close ends with the cgroup empty, `setsid` workers included.
//! - **After**: [`Closed::report`] gives the [`CloseReport`] (how it ended, which signals went
//!   out, the stderr tail). A close that failed still has its report
//!   ([`childguard::Error::close_report`]).
//! - **Dropped without a close** (rmcp's task aborted, the transport never served): inside a
//!   tokio runtime the same `close_async` runs in a task of its own, and [`Closed`] gets its
//!   report; outside a runtime the blocking [`close`](childguard::ChildHandle::close) runs in
//!   the drop. If the runtime is shutting down and the task cannot run, the handle goes to
//!   childguard's background reaper, which climbs the ladder and reaps; the report is then
//!   lost ([`Closed::report`] gives `None`), the processes are not.

pub mod settings;

mod closed;

use std::future::Future;
use std::io;
use std::process::Command;

use childguard::tokio::{AsyncStdin, AsyncStdout};
use childguard::ChildHandle;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::Transport;
use rmcp::RoleClient;

pub use childguard::CloseReport;
pub use closed::Closed;
pub use settings::MCP_LADDER;

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
    /// Spawns `command` with [`settings::stdio_server`] (piped stdio, stderr captured,
    /// contained, [`MCP_LADDER`]) and makes the transport over it. `spawn()` forks and returns
    /// (no readiness wait: MCP's `initialize` is the handshake); use
    /// [`spawn_async`](ChildTransport::spawn_async) to keep even the fork off a runtime thread.
    pub fn spawn(command: Command) -> childguard::Result<ChildTransport> {
        let handle = settings::stdio_server(command).spawn()?;
        Ok(ChildTransport::new(handle).expect("stdio_server pipes stdin and stdout"))
    }

    /// [`spawn`](ChildTransport::spawn) on tokio's blocking pool.
    pub async fn spawn_async(command: Command) -> childguard::Result<ChildTransport> {
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

    /// The close: the handle's `close_async` (EOF, TERM, KILL on the tree, reap), its
    /// outcome published to [`Closed`]. Does nothing the second time.
    async fn close_child(&mut self) -> io::Result<()> {
        let Some(handle) = self.handle.take() else {
            return Ok(());
        };
        let done = self.done.clone();
        // If this future is dropped mid-way, close_async hands the child to the reaper and
        // `done` is dropped unpublished: `Closed::report` then says `None`.
        let outcome = handle.close_async().await;
        let result = match &outcome {
            Ok(_) => Ok(()),
            Err(e) => Err(io::Error::new(e.io_kind(), e.to_string())),
        };
        done.publish(outcome);
        result
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
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        let done = self.done.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                // Never block a runtime thread: the close runs as a task. If the runtime is
                // shutting down, the task is dropped and close_async hands the child to the
                // reaper (or, never polled, the handle's own drop closes it in the background).
                drop(runtime.spawn(async move {
                    done.publish(handle.close_async().await);
                }));
            }
            Err(_) => done.publish(handle.close()),
        }
    }
}
