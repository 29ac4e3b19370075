//! The child's cgroup in a cgroup v1 hierarchy (hybrid hosts): made beside the v2 one with the
//! same name, under our own cgroup of that hierarchy; the limit files written before the
//! child is spawned; joined by the child before exec through `cgroup.procs`, opened here;
//! read for its counts and removed at the close, after the v2 cgroup (the same processes) is
//! empty.
//!
//! A v1 cgroup has no `cgroup.kill` and no `cgroup.events`: the v2 cgroup does the killing
//! and the waiting for every hierarchy. What a supervisor killed before its close left is
//! removed by the next process's sweep of the same parent ([`sweep_once`]), judged by the
//! name as the v2 sweep judges it; a stale v1 cgroup that still has members (its v2 twin
//! was not swept yet) is left for a later sweep, never killed on its own.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{Mode, OFlags};

use super::files::{self, Counts, Version, Write};
use super::hierarchy::Controller;
use crate::process::containment::explain::explain;
use crate::process::containment::{judge, notes, trim};

/// One v1 cgroup made for a child.
#[derive(Debug)]
pub(crate) struct V1Cgroup {
    dir: PathBuf,
    controller: Controller,
    /// `cgroup.procs`, write-only and close-on-exec: the child writes `0` to it before exec.
    procs: OwnedFd,
    removed: bool,
}

impl V1Cgroup {
    /// Makes `parent/name` (mode 0755), writes `writes` into it, opens its `cgroup.procs`.
    /// On error nothing is left behind, and the error names the file and the value.
    pub(crate) fn create(
        parent: &Path,
        name: &str,
        controller: Controller,
        writes: &[Write],
    ) -> io::Result<V1Cgroup> {
        sweep_once(parent);
        let dir = parent.join(name);
        rustix::fs::mkdir(&dir, Mode::from_raw_mode(0o755))
            .map_err(|e| explain(parent, "making a cgroup v1 directory in it", e.into()))?;
        let made = (|| {
            for w in writes {
                write_cgroup_file(&dir.join(w.file), &w.value)?;
            }
            let procs_path = dir.join("cgroup.procs");
            rustix::fs::open(&procs_path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| explain(&procs_path, "opening for writing", e.into()))
        })();
        match made {
            Ok(procs) => Ok(V1Cgroup {
                dir,
                controller,
                procs,
                removed: false,
            }),
            Err(e) => {
                let _ = rustix::fs::rmdir(&dir);
                Err(e)
            }
        }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn controller(&self) -> Controller {
        self.controller
    }

    /// `cgroup.procs`, for the child's placement before exec.
    pub(crate) fn procs_fd(&self) -> i32 {
        self.procs.as_raw_fd()
    }

    /// What the kernel counted here (OOM kills, peak usage, task limit hits).
    pub(crate) fn counts(&self) -> Counts {
        files::counts(self.controller, Version::V1, |f| {
            crate::base::kernel_text::read(self.dir.join(f)).ok()
        })
    }

    /// Removes the directory (and any the server made inside it), once its processes are
    /// gone; the error names the directory that stayed.
    pub(crate) fn remove(&mut self) -> io::Result<()> {
        if !self.removed {
            trim::remove_tree(&self.dir)?;
            self.removed = true;
        }
        Ok(())
    }
}

impl Drop for V1Cgroup {
    /// Last resort (a failed spawn): remove the directory if it is empty.
    fn drop(&mut self) {
        let _ = self.remove();
    }
}

/// Writes `value` to a cgroup file (a v1 limit here; a v2 limit, or `+memory` to a parent's
/// `cgroup.subtree_control`, in `apply`); the error names the file, the value and what the
/// errno means there.
pub(crate) fn write_cgroup_file(path: &Path, value: &str) -> io::Result<()> {
    let doing = format!("writing {value:?}");
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| explain(path, &doing, e.into()))?;
    match rustix::io::write(&fd, value.as_bytes()) {
        Ok(n) if n == value.len() => Ok(()),
        Ok(_) => Err(explain(
            path,
            &doing,
            io::Error::from_raw_os_error(libc::EIO),
        )),
        Err(e) => Err(explain(path, &doing, e.into())),
    }
}

/// The v1 parents swept by this process (each once).
static SWEPT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// On first use of a v1 `parent` in this process: removes the `childguard-*` cgroups in it
/// whose supervisor is dead (judged by [`judge::stale_names`], as the v2 sweep judges), if
/// they are empty. What was done goes to the next close report's notes.
pub(crate) fn sweep_once(parent: &Path) {
    let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
    if swept.iter().any(|p| p == parent) {
        return;
    }
    swept.push(parent.to_path_buf());
    let mut notes = Vec::new();
    for (name, who) in judge::stale_names(parent) {
        let dir = parent.join(&name);
        notes.push(match trim::remove_tree(&dir) {
            Ok(()) => format!("removed stale cgroup v1 {} of {who}", dir.display()),
            Err(e) => format!("stale cgroup v1 {} of {who} left: {e}", dir.display()),
        });
    }
    notes::put_back(notes);
}
