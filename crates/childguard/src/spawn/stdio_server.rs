//! Launching stdio servers (issue 31): MCP and LSP servers speak over their stdin and stdout,
//! log on stderr, and are started through launchers (`npx` → `npm exec` → `sh -c` → `node`,
//! `uvx`, `sh -c "…"`). What such a spawn sets up on the `Command`: the message channel, the
//! stderr capture. The entry point is [`ChildHandle::stdio_server`](crate::ChildHandle::stdio_server)
//! (`handle/stdio_server.rs`), which adds the MCP close and the containment.

use std::process::{Command, Stdio};

use crate::spawn::capture::Capture;

/// The message channel of a stdio server: what its fds 0 and 1 are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum StdioChannel {
    /// Two pipes (the default, what every MCP SDK gives a server): we write to its stdin
    /// ([`ChildHandle::stdin`](crate::ChildHandle::stdin), or the tokio face's async halves),
    /// read its stdout. The close's EOF is our end of the stdin pipe closed.
    #[default]
    Pipes,
    /// One `socketpair(2)` on fds 0 and 1 ([`SocketMode::Stdio`](crate::SocketMode::Stdio)):
    /// one fd for both directions ([`ChildHandle::socket`](crate::ChildHandle::socket)), and a
    /// close whose `shutdown(SHUT_RDWR)` wakes a server even when a worker it forked holds a
    /// copy of its end (a pipe's EOF comes only when every copy of the write end is closed).
    /// Node (libuv) hosts give their children socketpairs too.
    Socketpair,
}

/// Sets the `Command`'s stdin and stdout for `channel`: pipes, or nothing here (the socketpair
/// is made by the spawn's socket step, which sets fds 0 and 1 itself).
pub(crate) fn set_channel(command: &mut Command, channel: StdioChannel) {
    if channel == StdioChannel::Pipes {
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
    }
}

/// The capture of a stdio server: its stderr (the log; stdout is the channel) into the bounded
/// tail, which the close report and a failed spawn's error carry; `passthrough` also writes
/// each line to our own stderr as it comes.
pub(crate) fn stderr_capture(passthrough: bool) -> Capture {
    Capture::stderr().passthrough(passthrough)
}
