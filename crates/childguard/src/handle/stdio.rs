//! `ChildHandle`'s stdio accessors, like std `Child`'s fields: the pipes the caller's
//! `Command` asked for ([`Pipes`](crate::spawn::stdio::Pipes)). Moved out of `spawn/stdio.rs`
//! by the layering (issue 21 item 5): methods of the handle belong to the handle layer.

use std::process::{ChildStderr, ChildStdin, ChildStdout};

use crate::ChildHandle;

/// Stdio, as std's [`Child`](std::process::Child) fields.
///
/// # What happens to the pipes
///
/// - After `spawn()`: each end the `Command` piped (`Stdio::piped()`) is held by the handle,
///   open, until you take it or the handle closes. Nothing reads them for you: a server whose
///   output nobody reads blocks once the pipe is full (64 KiB on Linux), as with std. Read
///   them, or use [`output`](ChildHandle::output).
/// - At the close, step 2 (with the socket): our end of **stdin** is closed, so a server
///   reading it sees EOF, as it sees EOF on the socket.
/// - **stdout and stderr** stay open through the ladder and are closed after the child is
///   reaped (or handed to the reaper), so a server logging its shutdown is not killed by
///   `SIGPIPE` half-way; a server blocked on a full pipe gets the next rungs, as any hung
///   server does.
/// - A taken end is yours: the handle never touches it again.
/// - With the `tokio` feature, `async_stdin`/`async_stdout` hand stdin and stdout out as
///   async halves instead (`childguard::tokio`): unlike a take, the close still closes stdin
///   under a live writer half, and still keeps stdout open through the ladder.
impl ChildHandle {
    /// Our end of the child's stdin, if the `Command` piped it and it was not taken.
    pub fn stdin(&mut self) -> Option<&mut ChildStdin> {
        self.pipes_mut().stdin.as_mut()
    }

    /// Our end of the child's stdout, if the `Command` piped it and it was not taken.
    pub fn stdout(&mut self) -> Option<&mut ChildStdout> {
        self.pipes_mut().stdout.as_mut()
    }

    /// Our end of the child's stderr, if the `Command` piped it and it was not taken.
    pub fn stderr(&mut self) -> Option<&mut ChildStderr> {
        self.pipes_mut().stderr.as_mut()
    }

    /// Takes our end of the child's stdin: the close no longer closes it, you do (drop it).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.pipes_mut().stdin.take()
    }

    /// Takes our end of the child's stdout, e.g. to read it from another thread.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.pipes_mut().stdout.take()
    }

    /// Takes our end of the child's stderr, e.g. to read it from another thread.
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.pipes_mut().stderr.take()
    }
}
