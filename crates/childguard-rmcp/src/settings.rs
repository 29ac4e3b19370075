//! How an MCP stdio server is spawned: every builder setting of the adapter, in this one place
//! (so that it can move to the library's own stdio-server constructor, being added beside it,
//! without touching the transport).

use std::process::{Command, Stdio};

use childguard::{Builder, Capture, ChildHandle, Containment, Ladder};

/// The MCP close, as the MCP specification's stdio transport describes it: close the server's
/// stdin and wait for it to exit (2 s), then `SIGTERM` (2 s), then `SIGKILL` (5 s, the bound
/// for a process in uninterruptible sleep to go).
pub const MCP_LADDER: &str = "EOF:2s,TERM:2s,KILL:5s";

/// The [`Builder`] of an MCP stdio server run by `command`: what
/// [`ChildTransport::spawn`](crate::ChildTransport::spawn) uses. Change what you need and hand
/// the spawned handle to [`ChildTransport::new`](crate::ChildTransport::new).
///
/// - stdin and stdout piped: the JSON-RPC channel (whatever `command` said about them);
/// - stderr captured ([`Capture::stderr`]): read as it comes by the library's event loop, so a
///   chatty server never blocks on its log; its tail is in
///   [`ChildHandle::output_tail`] and in the [`CloseReport`](childguard::CloseReport);
/// - [`Containment::BestEffort`]: the whole tree in a cgroup of its own when cgroup v2 is
///   writable (launchers like `npx` → `npm exec` → `sh` → `node`, `uvx`, and workers that
///   `setsid` are all ended by the close), else its process group;
/// - the ladder [`MCP_LADDER`].
pub fn stdio_server(mut command: Command) -> Builder {
    command.stdin(Stdio::piped()).stdout(Stdio::piped());
    ChildHandle::builder(command)
        .capture(Capture::stderr())
        .contain(Containment::BestEffort)
        .ladder(mcp_ladder())
}

/// [`MCP_LADDER`], parsed.
pub fn mcp_ladder() -> Ladder {
    MCP_LADDER
        .parse()
        .expect("MCP_LADDER is a valid ladder (checked by a unit test)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_mcp_ladder_parses_and_is_bounded() {
        let ladder = mcp_ladder();
        assert_eq!(ladder.total_grace(), Duration::from_secs(9));
        assert_eq!(ladder.to_string(), MCP_LADDER);
    }
}
