//! A child contained by a cgroup of its own (`containment/`, the cgroup backend): what
//! [`Process`] answers of it — the cgroup, whether it still has members, its report and notes.

use std::io;

#[cfg(target_os = "linux")]
use super::containment;
#[cfg(target_os = "linux")]
use super::containment::create::Cgroup;
use super::containment::CgroupReport;
#[cfg(target_os = "linux")]
use super::containment::KillMode;
use super::Process;

impl Process {
    /// Puts the child's cgroup in our hands: from now on its close waits until the cgroup is
    /// empty, and the rungs reach its members as `mode` says.
    #[cfg(target_os = "linux")]
    pub(crate) fn contain(&mut self, cgroup: Cgroup, mode: KillMode) {
        self.cgroup = Some((cgroup, mode));
    }

    /// The child's cgroup, when contained.
    #[cfg(target_os = "linux")]
    pub(crate) fn cgroup(&self) -> Option<&Cgroup> {
        self.cgroup.as_ref().map(|(cgroup, _)| cgroup)
    }

    /// Whether the cgroup of a contained child still has members (never, uncontained).
    pub(crate) fn cgroup_populated(&self) -> io::Result<bool> {
        #[cfg(target_os = "linux")]
        if let Some((cgroup, _)) = &self.cgroup {
            return Ok(cgroup.watch().read()?.populated);
        }
        Ok(false)
    }

    /// Containment's part of the report: the cgroup, whether it is removed, who is left.
    pub(crate) fn cgroup_report(&self) -> Option<CgroupReport> {
        #[cfg(target_os = "linux")]
        if let Some((cgroup, mode)) = &self.cgroup {
            let members_left = if cgroup.is_removed() || !cgroup.populated() {
                0
            } else {
                containment::members::pids(cgroup).map_or(0, |p| p.len())
            };
            return Some(CgroupReport {
                path: cgroup.dir().to_path_buf(),
                kill_mode: *mode,
                removed: cgroup.is_removed(),
                members_left,
                limits: cgroup.limits_report(),
            });
        }
        None
    }

    /// Containment's notes for the close report (given once): stale cgroups of dead
    /// supervisors removed before this child's cgroup was made, and why the cgroup could not
    /// be removed, if it could not.
    pub(crate) fn take_cgroup_notes(&mut self) -> Vec<String> {
        #[cfg(target_os = "linux")]
        if let Some((cgroup, _)) = &mut self.cgroup {
            return cgroup.take_notes();
        }
        #[cfg(target_os = "linux")]
        return self.take_container_notes();
        #[cfg(not(target_os = "linux"))]
        Vec::new()
    }

    /// Whether, with the ladder used up and the leader exited, something is still to wait
    /// for: a contained child's cgroup that has members (D state). The reaper waits for it to
    /// empty and removes it; without containment the leader is released at once.
    pub(crate) fn waits_for_cgroup(&self) -> bool {
        self.cgroup_populated().unwrap_or(false)
    }
}
