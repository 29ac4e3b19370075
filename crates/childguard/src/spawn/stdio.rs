//! The child's stdio pipes that the caller's `Command` asked for, kept for the caller.
//!
//! `Command::spawn` hands our ends of `Stdio::piped()` pipes back in the std `Child`. Dropping
//! that `Child` inside `spawn()` closed them, and a server that then wrote a line of log died
//! of `SIGPIPE`. So they are moved into the [`ChildHandle`](crate::ChildHandle) and reachable
//! through the same borrows and takes as std's `Child` fields (`handle/stdio.rs`). With
//! [`SocketMode::Stdio`](crate::SocketMode) the child's fds 0 and 1 are the socket, so only
//! `stderr` can be piped.

use std::process::{Child, ChildStderr, ChildStdin, ChildStdout};

/// Our ends of the pipes the `Command` asked for (`None`: not piped, or taken).
#[derive(Debug, Default)]
pub(crate) struct Pipes {
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) stdout: Option<ChildStdout>,
    pub(crate) stderr: Option<ChildStderr>,
}

impl Pipes {
    /// Moves the pipe ends out of a freshly spawned `child` (which is then only a pid).
    pub(crate) fn take_from(child: &mut Child) -> Pipes {
        Pipes {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
        }
    }
}
