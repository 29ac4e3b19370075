//! A child held by a tree init (`containment/tree_init`): the process we supervise is the tree
//! init, the server is its child. What changes for [`Process`]: the pid users see, the status
//! reported (the server's, sent by the tree init), and whether a tree is held.

use std::io;
use std::process::ExitStatus;

use crate::base::signal::Signal;

#[cfg(target_os = "linux")]
use super::containment::{self, KillMode};
#[cfg(target_os = "linux")]
use super::Mechanism;
use super::Process;

impl Process {
    /// The server's pid: the child's, or under a tree init the server's that it forked (as
    /// this process sees it). What users are given ([`ChildHandle::id`](crate::ChildHandle::id)),
    /// and whose `/proc` entry tells how it handles a signal.
    pub(crate) fn server_pid(&self) -> u32 {
        #[cfg(target_os = "linux")]
        if let Some((tree, _)) = &self.tree {
            return tree.server_pid();
        }
        self.pid
    }

    /// Puts the child's tree in our hands: the process is its tree init
    /// (`containment/tree_init`), the rungs reach the tree as `mode` says.
    #[cfg(target_os = "linux")]
    pub(crate) fn contain_tree(&mut self, tree: containment::tree_init::Tree, mode: KillMode) {
        self.tree = Some((tree, mode));
    }

    /// Whether a tree init holds the child's tree (`containment/tree_init`).
    pub(crate) fn holds_tree(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.tree.is_some();
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// The server's status the tree init sent before it exited, if any: the status to report
    /// in place of the tree init's own, or of a status lost (reaped elsewhere).
    pub(super) fn recorded_server_status(&mut self) -> Option<ExitStatus> {
        #[cfg(target_os = "linux")]
        if let Some((tree, _)) = &mut self.tree {
            return tree.recorded_status();
        }
        None
    }

    /// `SIGKILL` under a tree init: the whole tree ends (the tree init ends it, or the kernel
    /// does). `None` for any other signal, or without a tree init.
    pub(super) fn kill_tree(&self, signal: Signal) -> Option<io::Result<(bool, Option<usize>)>> {
        #[cfg(target_os = "linux")]
        if let (Some((tree, _)), Mechanism::Pidfd(fd), true) =
            (&self.tree, &self.mechanism, signal == Signal::KILL)
        {
            if !self.is_running() {
                return Some(Ok((false, Some(0))));
            }
            return Some(match tree.kill(fd.as_fd()) {
                Ok(()) => Ok((true, None)),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok((false, Some(0))),
                Err(e) => Err(e),
            });
        }
        let _ = signal;
        None
    }

    /// Under a tree init, whether `signal` reaches the whole tree: `KILL`, or every rung with
    /// `KillMode::ControlGroup`. `None` without a tree init.
    pub(super) fn tree_reaches_all(&self, signal: Signal) -> Option<bool> {
        #[cfg(target_os = "linux")]
        if let Some((_, mode)) = &self.tree {
            return Some(signal == Signal::KILL || *mode == KillMode::ControlGroup);
        }
        let _ = signal;
        None
    }
}
