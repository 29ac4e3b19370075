//! Observing the leader's exit: the non-blocking check (pidfd or `SIGCHLD`, a tracer holding
//! the zombie), whether everything waited for is gone, and the reap.

use std::io;
use std::process::ExitStatus;
#[cfg(target_os = "linux")]
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::sigchld;
use super::{Life, Mechanism, Process};

impl Process {
    /// Non-blocking: has the leader exited? A group leader is left a zombie (`WNOWAIT`), so
    /// that its group id stays ours while we may still signal the group; a child that leads no
    /// group is reaped by the same `waitid` that sees it exited, as `try_wait` would: nothing
    /// uses its pid after that, and a close makes one system call fewer.
    pub(crate) fn check_exit(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.is_running() {
            let reap = !self.leads_group;
            let observed = match &self.mechanism {
                #[cfg(target_os = "linux")]
                Mechanism::Pidfd(fd) => {
                    if self.held_by_tracer {
                        // Read first: a SIGCHLD after this read wakes our next wait.
                        self.sigchld_seen = crate::core::sigchld::notifier()?.generation();
                    }
                    let observed = fd.observe_exit(reap);
                    let readable = self.readable_seen.swap(false, Ordering::Relaxed);
                    if matches!(observed, Ok(None)) && readable && !self.held_by_tracer {
                        // Race (a traced child): the pidfd turns readable when the child
                        // exits, but a tracer is told first, and until it waits for the zombie
                        // (or detaches, or exits) our waitid finds nothing. Polling the pidfd
                        // again would return at once: a busy loop until the deadline. The
                        // tracer's wait sends us — the real parent — SIGCHLD, so wait for that
                        // from now on. The generation is read before the second look, so a
                        // SIGCHLD that comes between that look and our sleep is not missed.
                        self.held_by_tracer = true;
                        self.sigchld_seen = crate::core::sigchld::notifier()?.generation();
                        fd.observe_exit(reap)
                    } else {
                        observed
                    }
                }
                Mechanism::Sigchld(_) => {
                    // Read the generation first: a SIGCHLD after this read wakes our next wait.
                    self.sigchld_seen = crate::core::sigchld::notifier()?.generation();
                    sigchld::observe_exit(self.pid, reap)
                }
            };
            // Under a tree init, the server's status it sent stands for the tree init's own.
            let observed =
                observed.map(|s| s.map(|own| self.recorded_server_status().unwrap_or(own)));
            match observed {
                Ok(Some(status)) if reap => self.mark_exited(Life::Reaped(status)),
                Ok(Some(status)) => self.mark_exited(Life::Exited(status)),
                Ok(None) => {}
                // Reaped by somebody else (a `waitpid(-1)` of the host's, `childguard init`'s
                // own reaping): a tree init sent the server's status before it exited.
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
                    match self.recorded_server_status() {
                        Some(status) => self.mark_exited(Life::Reaped(status)),
                        None => self.mark_exited(Life::Lost),
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(self.status())
    }

    fn mark_exited(&mut self, life: Life) {
        match life {
            Life::Exited(status) => crate::base::trace::exited(self.pid, Some(status)),
            Life::Reaped(status) => {
                crate::base::trace::exited(self.pid, Some(status));
                crate::base::trace::reaped(self.pid);
            }
            Life::Lost => crate::base::trace::exited(self.pid, None),
            Life::Running => {}
        }
        self.life = life;
        self.exited_at.get_or_insert_with(Instant::now);
    }

    /// Is everything we must wait for gone: the leader exited and, when it leads a group, no
    /// other member of the group is left?
    pub(crate) fn is_gone(&mut self) -> io::Result<bool> {
        self.check_exit()?;
        if self.is_running() {
            self.quiet_cgroup_bell()?;
            return Ok(false);
        }
        #[cfg(target_os = "linux")]
        if let Some(gone) = self.container_gone()? {
            return Ok(gone);
        }
        #[cfg(target_os = "linux")]
        if self.cgroup.is_some() {
            // Contained: over when the cgroup is empty, wherever its members went.
            return Ok(!self.cgroup_populated()?);
        }
        if !self.leads_group || !self.holds_group_id() {
            return Ok(true);
        }
        // A listing that fails is not an error: the members we know are still watched, and
        // `survivors_unlisted` tells the report that others may exist.
        self.survivors.refresh(self.pid);
        Ok(self.survivors.is_empty())
    }
    /// Empties a contained child's cgroup bell while the leader runs. The bell rings at every
    /// change of `cgroup.events` (the child joining the cgroup made it `populated 1`) and stays
    /// readable until emptied, which only `cgroup_populated` did, and only once the
    /// leader had exited. Until then every wait on it returned at once: the blocking close and the
    /// reaper spun a CPU through the EOF wait and each grace, slowing the very server they
    /// waited for. While the
    /// leader runs the cgroup cannot be empty and the leader's exit wakes its pidfd, so nothing
    /// of the bell is needed now; a change after this rings it again (no lost wake-up).
    fn quiet_cgroup_bell(&self) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some((cgroup, _)) = &self.cgroup {
            cgroup.watch().clear()?;
        }
        Ok(())
    }

    /// Reaps the exited leader (frees its pid), if [`Process::check_exit`] left it a zombie.
    /// Call only after it exited.
    pub(crate) fn reap(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Life::Exited(status) = self.life {
            let reaped = match &self.mechanism {
                #[cfg(target_os = "linux")]
                Mechanism::Pidfd(fd) => fd.observe_exit(true),
                Mechanism::Sigchld(_) => sigchld::observe_exit(self.pid, true),
            };
            self.life = match reaped {
                Ok(_) => {
                    crate::base::trace::reaped(self.pid);
                    Life::Reaped(status)
                }
                Err(e) if e.raw_os_error() == Some(libc::ECHILD) => Life::Lost,
                Err(e) => return Err(e),
            };
        }
        // A cgroup that cannot be removed (the server made cgroups inside it) is not an error
        // of the reap: the report shows it as not removed.
        let _ = self.remove_cgroup_if_empty();
        Ok(self.status())
    }
    /// Removes a contained child's cgroup once it is empty (after the leader exited).
    fn remove_cgroup_if_empty(&mut self) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        if let Some((cgroup, _)) = &mut self.cgroup {
            if !cgroup.is_removed() && !cgroup.watch().read()?.populated {
                cgroup.remove()?;
            }
        }
        Ok(())
    }
}
