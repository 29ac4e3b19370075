//! The child's stdio pipes that the caller's `Command` asked for, kept for the caller.
//!
//! `Command::spawn` hands our ends of `Stdio::piped()` pipes back in the std `Child`. Dropping
//! that `Child` inside `spawn()` closed them, and a server that then wrote a line of log died
//! of `SIGPIPE`. So they are moved into the [`ChildHandle`](crate::ChildHandle) and reachable
//! through the same borrows and takes as std's `Child` fields (`handle/stdio.rs`). With
//! [`SocketMode::Stdio`](crate::SocketMode) the child's fds 0 and 1 are the socket, so only
//! `stderr` can be piped.
//!
//! With the `tokio` feature, stdin and stdout can also be handed out as async halves
//! (`childguard::tokio`): the handle then keeps a share of each, so that the close still
//! closes stdin (through the [`SharedStdin`](crate::spawn::shared_stdin::SharedStdin) slot) and
//! keeps stdout open until the child is reaped, whoever holds the halves.

use std::process::{Child, ChildStderr, ChildStdin, ChildStdout};

/// Our ends of the pipes the `Command` asked for (`None`: not piped, or taken).
#[derive(Debug, Default)]
pub(crate) struct Pipes {
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) stdout: Option<ChildStdout>,
    pub(crate) stderr: Option<ChildStderr>,
    /// stdin handed out as an async writer half: the close closes it through this share.
    #[cfg(feature = "tokio")]
    pub(crate) stdin_shared: Option<std::sync::Arc<crate::spawn::shared_stdin::SharedStdin>>,
    /// stdout handed out as an async reader half: this share keeps the read end open until
    /// the handle's close is over, so the server never meets `SIGPIPE` on a write during its
    /// shutdown, even if the half was dropped.
    #[cfg(feature = "tokio")]
    pub(crate) stdout_kept: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
}

impl Pipes {
    /// Moves the pipe ends out of a freshly spawned `child` (which is then only a pid).
    pub(crate) fn take_from(child: &mut Child) -> Pipes {
        Pipes {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            #[cfg(feature = "tokio")]
            stdin_shared: None,
            #[cfg(feature = "tokio")]
            stdout_kept: None,
        }
    }

    /// Our ends of the pipes our own spawn made (`spawn/clone3.rs`).
    #[cfg(target_os = "linux")]
    pub(crate) fn from_fds(
        stdin: Option<std::os::fd::OwnedFd>,
        stdout: Option<std::os::fd::OwnedFd>,
        stderr: Option<std::os::fd::OwnedFd>,
    ) -> Pipes {
        Pipes {
            stdin: stdin.map(ChildStdin::from),
            stdout: stdout.map(ChildStdout::from),
            stderr: stderr.map(ChildStderr::from),
            #[cfg(feature = "tokio")]
            stdin_shared: None,
            #[cfg(feature = "tokio")]
            stdout_kept: None,
        }
    }

    /// Closes our end of the child's stdin, handed out as an async half or not: EOF for the
    /// server (the close's step 2, and `output`). `why` is what a writer half is told next.
    pub(crate) fn close_stdin(&mut self, why: &'static str) {
        drop(self.stdin.take());
        #[cfg(feature = "tokio")]
        if let Some(shared) = self.stdin_shared.take() {
            shared.close(why);
        }
        #[cfg(not(feature = "tokio"))]
        let _ = why;
    }
}
