//! [`ChildHandle::stdio_server`]: a [`Builder`] set up for a stdio server (MCP, LSP) behind
//! any launcher — the channel and capture of `spawn/stdio_server.rs`, the MCP close, the
//! whole tree contained.

use std::process::Command;

use crate::close::ladder::Ladder;
use crate::handle::builder::{Builder, SocketMode};
use crate::handle::ChildHandle;
use crate::process::containment::Containment;
use crate::spawn::stdio_server::{self, StdioChannel};

impl ChildHandle {
    /// A [`Builder`] for a server that speaks over its stdin and stdout — an MCP server, a
    /// language server — started directly or through a launcher (`npx -y pkg`, `uvx pkg`,
    /// `sh -c "…"`, `docker run -i`). Every setting can still be changed on the builder.
    ///
    /// What it sets, and why:
    /// - **The channel**: pipes on stdin and stdout ([`StdioChannel::Pipes`]; a socketpair with
    ///   [`Builder::stdio_channel`]). Write with [`ChildHandle::stdin`], read with
    ///   [`ChildHandle::stdout`] (on tokio, the async halves). Keep stdin in the handle (a
    ///   borrow, not [`take_stdin`](ChildHandle::take_stdin)): the close closes it.
    /// - **stderr passed through and captured**: each line the server writes to its stderr is
    ///   written to ours as it comes (`[program pid] line`, as rmcp's `TokioChildProcess` and
    ///   the MCP SDKs let a server's stderr through), and kept in the bounded tail
    ///   ([`Capture::stderr`](crate::Capture::stderr) with
    ///   [`passthrough`](crate::Capture::passthrough)): the close report and a failed spawn's
    ///   error end with the server's last words. `.stderr_passthrough(false)` keeps them in
    ///   the tail only.
    /// - **The MCP close** ([`Ladder::mcp`], `EOF:2s,TERM:2s,KILL:5s`), as the MCP
    ///   specification prescribes for stdio: at the close our end of its stdin is closed (EOF);
    ///   a server that exits on it ends the close there, without a signal; after 2 s `SIGTERM`,
    ///   after 2 s more `SIGKILL`. Rungs whose signal the server ignores are skipped, as always.
    /// - **The whole tree**: the launcher and everything it starts in a cgroup of its own
    ///   ([`Containment::BestEffort`]), so the `KILL` reaches a `setsid` worker too and the close
    ///   ends when the cgroup is empty; where no cgroup can be made, a process group of its own
    ///   instead, and the report says which
    ///   ([`CloseReport::cgroup`](crate::CloseReport::cgroup) or
    ///   [`containment_fallback`](crate::CloseReport::containment_fallback)). The catchable rungs
    ///   go to the launcher's process group (`process_group`), and when the launcher exits
    ///   first, the rung that ended it goes on to the rest at once: no grace is waited for a
    ///   launcher gone (`docs/design.md`).
    /// - **Gone with us** ([`Builder::exit_with_parent`]): if this process dies, even by
    ///   `SIGKILL`, the kernel kills the launcher and the guardian kills the cgroup, so a crashed
    ///   host leaves no server behind (uncontained: the launcher only; Linux only).
    ///
    /// ```no_run
    /// use std::io::{BufRead, BufReader, Write};
    /// use std::process::Command;
    /// use childguard::ChildHandle;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut cmd = Command::new("npx");
    /// cmd.args(["-y", "@modelcontextprotocol/server-everything"]);
    /// let mut server = ChildHandle::stdio_server(cmd).spawn()?;
    /// writeln!(server.stdin().unwrap(), r#"{{"jsonrpc":"2.0","id":1,"method":"ping"}}"#)?;
    /// let mut line = String::new();
    /// BufReader::new(server.stdout().unwrap()).read_line(&mut line)?;
    /// let report = server.close()?; // EOF → 2 s → TERM → 2 s → KILL, on the whole tree
    /// println!("{report}");
    /// # Ok(()) }
    /// ```
    pub fn stdio_server(mut command: Command) -> Builder {
        stdio_server::set_channel(&mut command, StdioChannel::Pipes);
        ChildHandle::builder(command)
            .ladder(Ladder::mcp())
            .capture(stdio_server::stderr_capture(true))
            .contain(Containment::BestEffort)
            .process_group(true)
            // Linux only (PR_SET_PDEATHSIG); elsewhere `exit_with_parent` would fail the spawn.
            .exit_with_parent(cfg!(target_os = "linux"))
    }
}

impl Builder {
    /// The message channel of a stdio server (see [`ChildHandle::stdio_server`]): pipes (the
    /// default there) or a socketpair.
    pub fn stdio_channel(mut self, channel: StdioChannel) -> Builder {
        match channel {
            StdioChannel::Socketpair => self.socket = SocketMode::Stdio,
            _ => {
                stdio_server::set_channel(&mut self.command, channel);
                if self.socket == SocketMode::Stdio {
                    self.socket = SocketMode::None;
                }
            }
        }
        self
    }

    /// Captures the server's stderr into the tail and also writes each line to our own stderr
    /// as it comes (`on`, the default of [`ChildHandle::stdio_server`]), or keeps it in the
    /// tail only (`false`; see [`Capture::passthrough`](crate::Capture::passthrough)).
    pub fn stderr_passthrough(self, on: bool) -> Builder {
        self.capture(stdio_server::stderr_capture(on))
    }
}
