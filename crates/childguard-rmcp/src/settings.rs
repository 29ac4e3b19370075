//! How an MCP stdio server is spawned: the library's own stdio-server spawn
//! ([`ChildHandle::stdio_server`]), in this one place, so the transport never repeats a
//! builder setting.

use childguard::{Builder, ChildHandle, Ladder};

/// The MCP close, as the MCP specification's stdio transport describes it: close the server's
/// stdin and wait for it to exit (2 s), then `SIGTERM` (2 s), then `SIGKILL` (5 s, the bound
/// for a process in uninterruptible sleep to go) — [`Ladder::mcp`], `@mcp`.
pub const MCP_LADDER: &str = "EOF:2s,TERM:2s,KILL:5s";

/// The [`Builder`] of an MCP stdio server run by `command` (a `std::process::Command` or a
/// `tokio::process::Command`): what [`ChildTransport::spawn`](crate::ChildTransport::spawn)
/// uses — [`ChildHandle::stdio_server`]: stdin and stdout piped (the JSON-RPC channel),
/// stderr written to ours line by line and kept in the tail (in the
/// [`CloseReport`](childguard::CloseReport)), the whole tree in a cgroup of its own when one
/// can be made (else its process group), the MCP close [`MCP_LADDER`], and gone with us if
/// this process dies (`exit_with_parent`). Change what you need (`.stderr_passthrough(false)`:
/// the tail only) and hand the spawned handle to
/// [`ChildTransport::new`](crate::ChildTransport::new).
pub fn stdio_server(command: impl Into<tokio::process::Command>) -> Builder {
    ChildHandle::stdio_server(command.into().into_std())
}

/// [`MCP_LADDER`]: [`Ladder::mcp`].
pub fn mcp_ladder() -> Ladder {
    Ladder::mcp()
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
