//! Applying the limits to a new child's cgroups before the child is spawned, and reading
//! what the kernel counted before they are removed.
//!
//! Per controller, where [`hierarchy::locate`] finds it:
//! - cgroup v2: enabled in the parent's `cgroup.subtree_control` if it is not yet (`+memory`;
//!   refused with `EBUSY` when the parent holds processes of its own and is not the root —
//!   cgroup v2's "no internal processes" rule — which the error says, with the way out: a
//!   `cgroup_parent` that holds no process), then the limit files of the child's cgroup;
//! - cgroup v1: a cgroup of the same name in that hierarchy ([`V1Cgroup`]), whose
//!   `cgroup.procs` the child joins before exec, besides its v2 one.
//!
//! Race avoided (a limit that comes late): every file is written before the fork, so the
//! child's first instruction already runs under the limits; the child joins the v1 cgroups
//! right after the v2 one, before it execs.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use super::files::{self, Counts, Version};
use super::hierarchy::{self, Controller, Place};
use super::v1::{self, V1Cgroup};
use super::{Limits, LimitsReport};
use crate::process::containment::explain::explain;

/// v1 hierarchies a child can join at most (memory, pids, cpu).
pub(crate) const MAX_V1: usize = 3;

/// The child's v2 cgroup and its parent, each open and at its path (for messages): every
/// file is written relative to the fd.
#[derive(Debug, Clone, Copy)]
pub(crate) struct V2<'a> {
    pub(crate) parent: (BorrowedFd<'a>, &'a Path),
    pub(crate) cgroup: (BorrowedFd<'a>, &'a Path),
}

/// The limits as applied to one child's cgroups.
#[derive(Debug)]
pub(crate) struct Applied {
    limits: Limits,
    v2_dir: PathBuf,
    v2: Vec<Controller>,
    v1: Vec<V1Cgroup>,
    /// Read just before the removal (the files go with the directories).
    snapshot: Option<LimitsReport>,
}

/// Applies `limits` to the child's new v2 cgroup (`v2.cgroup`, made under `v2.parent`, named
/// `name`), making its v1 cgroups where the controllers are on v1. `Err`: the controller,
/// file or value that could not be had, and why; what was made is removed.
pub(crate) fn apply(limits: &Limits, v2: V2<'_>, name: &str) -> io::Result<Applied> {
    let v2_dir = v2.cgroup.1;
    let mountinfo = crate::base::kernel_text::read("/proc/self/mountinfo")?;
    let proc_cgroup = crate::base::kernel_text::read("/proc/self/cgroup")?;
    let mut applied = Applied {
        limits: limits.clone(),
        v2_dir: v2_dir.to_path_buf(),
        v2: Vec::new(),
        v1: Vec::new(),
        snapshot: None,
    };
    for controller in files::controllers(limits) {
        let place = hierarchy::locate(controller, v2.parent, &mountinfo, &proc_cgroup)
            .map_err(|why| io::Error::new(io::ErrorKind::Unsupported, why))?;
        match place {
            Place::V2 { enabled } => {
                if !enabled {
                    enable(v2.parent, controller)?;
                }
                let writes = files::writes(limits, controller, Version::V2).map_err(refused)?;
                for w in writes {
                    v1::write_cgroup_file(v2.cgroup, w.file, &w.value)?;
                }
                applied.v2.push(controller);
            }
            Place::V1 { parent } => {
                let writes = files::writes(limits, controller, Version::V1).map_err(refused)?;
                let made = V1Cgroup::create(&parent, name, controller, &writes)?;
                applied.v1.push(made);
            }
        }
    }
    Ok(applied)
}

fn refused(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, why)
}

/// `+controller` into the parent's `cgroup.subtree_control`.
fn enable((fd, parent): (BorrowedFd<'_>, &Path), controller: Controller) -> io::Result<()> {
    let path = parent.join("cgroup.subtree_control");
    let value = format!("+{}", controller.name());
    v1::write_cgroup_file((fd, parent), "cgroup.subtree_control", &value).map_err(|e| {
        if e.raw_os_error() == Some(libc::EBUSY) || e.to_string().contains("EBUSY") {
            io::Error::new(
                e.kind(),
                format!(
                    "{e}; {} holds processes of its own, and cgroup v2 enables a controller for \
                     its children only in a cgroup without any (the no-internal-processes \
                     rule): give a cgroup_parent that holds no process, such as a delegated \
                     subtree",
                    parent.display()
                ),
            )
        } else {
            explain(&path, &format!("enabling {}", controller.name()), e)
        }
    })
}

impl Applied {
    /// The `cgroup.procs` fds of the v1 cgroups, for the child's placement (`-1`: none).
    pub(crate) fn v1_procs(&self) -> [i32; MAX_V1] {
        let mut fds = [-1; MAX_V1];
        for (slot, cgroup) in fds.iter_mut().zip(&self.v1) {
            *slot = cgroup.procs_fd();
        }
        fds
    }

    /// The v1 cgroup joined through `v1_procs()[i]`, for a placement error.
    pub(crate) fn v1_dir(&self, i: usize) -> Option<&Path> {
        self.v1.get(i).map(V1Cgroup::dir)
    }

    /// Reads the counts now, for the report: called just before the cgroups are removed.
    /// `v2`: the child's v2 cgroup, open.
    pub(crate) fn snapshot(&mut self, v2: BorrowedFd<'_>) {
        self.snapshot = Some(self.read(v2));
    }

    /// The report: the snapshot taken before the removal, or the files (of `v2`, the child's
    /// v2 cgroup, open) read now.
    pub(crate) fn report(&self, v2: BorrowedFd<'_>) -> LimitsReport {
        self.snapshot.clone().unwrap_or_else(|| self.read(v2))
    }

    fn read(&self, v2: BorrowedFd<'_>) -> LimitsReport {
        let mut counts = Counts::default();
        let mut hierarchies = Vec::new();
        for &c in &self.v2 {
            counts.merge(files::counts(c, Version::V2, |f| {
                crate::process::containment::at::read_at(v2, f).ok()
            }));
            hierarchies.push(format!("{}: cgroup v2 {}", c.name(), self.v2_dir.display()));
        }
        for cgroup in &self.v1 {
            counts.merge(cgroup.counts());
            let c = cgroup.controller().name();
            hierarchies.push(format!("{c}: cgroup v1 {}", cgroup.dir().display()));
        }
        let oom_kills = counts.oom_kills.unwrap_or(0);
        LimitsReport {
            limits: self.limits.clone(),
            result: (oom_kills > 0).then_some("oom-kill"),
            oom_kills,
            memory_high_events: self.limits.memory_high.and(counts.high_events),
            memory_peak: counts.peak,
            tasks_max_hits: self.limits.tasks_max.and(counts.tasks_max_hits),
            hierarchies,
        }
    }

    /// Removes the v1 cgroups (their processes are gone once the v2 cgroup is empty); the
    /// error names the first that stayed.
    pub(crate) fn remove_v1(&mut self) -> io::Result<()> {
        let mut first = Ok(());
        for cgroup in &mut self.v1 {
            if let (Err(e), Ok(())) = (cgroup.remove(), &first) {
                first = Err(e);
            }
        }
        first
    }
}

/// Once per process, at its first contained spawn (once the child is born: see
/// [`crate::process::containment::after_birth`]): the sweep of stale v1 cgroups in our own
/// cgroup of each v1 hierarchy that has a controller we limit — so that the v1 cgroups of a
/// supervisor that was SIGKILLed are collected even by a later run that sets no limit.
pub(crate) fn sweep_v1_hierarchies() {
    // Once per process: each contained spawn would otherwise read two /proc files for it.
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(sweep_v1_now);
}

fn sweep_v1_now() {
    // The text the cgroup2 mount was found in, at this same first spawn: not read twice.
    let (Ok(mountinfo), Ok(proc_cgroup)) = (
        crate::process::containment::mount::take_mountinfo(),
        crate::base::kernel_text::read("/proc/self/cgroup"),
    ) else {
        return;
    };
    for c in [Controller::Memory, Controller::Pids, Controller::Cpu] {
        if let Some(dir) = hierarchy::v1_dir(c.name(), &mountinfo, &proc_cgroup) {
            // A hierarchy that cannot be opened has nothing for us to sweep.
            if let Ok(fd) = crate::process::containment::at::open_dir(&dir) {
                v1::sweep_once(fd.as_fd(), &dir);
            }
        }
    }
}
