//! A child handed on unreaped: the [`Process`] a dropped handle leaves to the background
//! reaper (`close/reaper.rs`), with everything it holds moved into it.

use std::sync::atomic::AtomicBool;

use super::{Life, Mechanism, Process};

impl Process {
    /// For the drop of a process never reaped (`impl Drop for Process`, in `close/reaper.rs`):
    /// the child moved into a new `Process` for the background reaper, `None` if there is
    /// nothing to reap here (no pid held, or a copy inherited through fork()).
    pub(crate) fn take_orphan(&mut self) -> Option<Process> {
        // A copy inherited through fork() names the parent's child: only its fds let go.
        if !self.holds_pid() || self.is_inherited() {
            return None;
        }
        Some(Process {
            pid: self.pid,
            owner: self.owner,
            spawn_began: self.spawn_began,
            leads_group: self.leads_group,
            mechanism: std::mem::replace(&mut self.mechanism, Mechanism::Sigchld(None)),
            life: std::mem::replace(&mut self.life, Life::Lost),
            exited_at: self.exited_at,
            survivors: std::mem::take(&mut self.survivors),
            sigchld_seen: self.sigchld_seen,
            #[cfg(target_os = "linux")]
            cgroup: self.cgroup.take(),
            #[cfg(target_os = "linux")]
            tree: self.tree.take(),
            #[cfg(target_os = "linux")]
            container: self.container.take(),
            #[cfg(target_os = "linux")]
            descendants: self.descendants.take(),
            readable_seen: AtomicBool::new(false),
            held_by_tracer: self.held_by_tracer,
        })
    }
}
