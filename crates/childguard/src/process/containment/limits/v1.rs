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
//!
//! By fd, as the v2 cgroup ([`crate::process::containment::at`]): the parent opened once
//! (`O_DIRECTORY | O_NOFOLLOW`), `mkdirat` in it, the new directory opened with `openat`, its
//! files written and read relative to that fd, the removal by `unlinkat` in the parent.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rustix::fs::{AtFlags, Mode, OFlags};

use super::files::{self, Counts, Version, Write};
use super::hierarchy::Controller;
use crate::process::containment::explain::explain;
use crate::process::containment::{at, judge, notes, trim};

/// One v1 cgroup made for a child.
#[derive(Debug)]
pub(crate) struct V1Cgroup {
    /// Its path, for messages and the report.
    dir: PathBuf,
    name: OsString,
    /// The parent directory (our own cgroup in that hierarchy), for the removal.
    parent: OwnedFd,
    /// The cgroup's directory: its files are read relative to it.
    fd: OwnedFd,
    controller: Controller,
    /// `cgroup.procs`, write-only and close-on-exec: the child writes `0` to it before exec.
    procs: OwnedFd,
    removed: bool,
}

impl V1Cgroup {
    /// Makes `parent/name` (mode 0755), writes `writes` into it, opens its `cgroup.procs`:
    /// the parent opened once, every later step relative to an fd. On error nothing is left
    /// behind, and the error names the file and the value.
    pub(crate) fn create(
        parent: &Path,
        name: &str,
        controller: Controller,
        writes: &[Write],
    ) -> io::Result<V1Cgroup> {
        let parent_fd =
            at::open_dir(parent).map_err(|e| explain(parent, "the cgroup v1 parent", e.into()))?;
        sweep_once(parent_fd.as_fd(), parent);
        let dir = parent.join(name);
        rustix::fs::mkdirat(&parent_fd, name, Mode::from_raw_mode(0o755))
            .map_err(|e| explain(parent, "making a cgroup v1 directory in it", e.into()))?;
        let made = (|| {
            let fd = at::open_dir_at(parent_fd.as_fd(), OsStr::new(name))
                .map_err(|e| explain(&dir, "opening", e.into()))?;
            for w in writes {
                write_cgroup_file((fd.as_fd(), &dir), w.file, &w.value)?;
            }
            let procs = at::open_file_at(fd.as_fd(), "cgroup.procs", OFlags::WRONLY)
                .map_err(|e| explain(&dir.join("cgroup.procs"), "opening for writing", e.into()))?;
            Ok((fd, procs))
        })();
        match made {
            Ok((fd, procs)) => Ok(V1Cgroup {
                dir,
                name: name.into(),
                parent: parent_fd,
                fd,
                controller,
                procs,
                removed: false,
            }),
            Err(e) => {
                let _ = rustix::fs::unlinkat(&parent_fd, name, AtFlags::REMOVEDIR);
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
            at::read_at(self.fd.as_fd(), f).ok()
        })
    }

    /// Removes the directory (and any the server made inside it), once its processes are
    /// gone; the error names the directory that stayed.
    pub(crate) fn remove(&mut self) -> io::Result<()> {
        if !self.removed {
            trim::remove_tree(self.parent.as_fd(), &self.name, &self.dir)?;
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

/// Writes `value` to the file `file` of the cgroup `dir` (open, and its path for messages): a
/// v1 limit here; a v2 limit, or `+memory` to a parent's `cgroup.subtree_control`, in
/// `apply`. The file is opened relative to the fd, `O_NOFOLLOW`. The error names the file, the
/// value and what the errno means there.
pub(crate) fn write_cgroup_file(
    (fd, dir): (BorrowedFd<'_>, &Path),
    file: &str,
    value: &str,
) -> io::Result<()> {
    at::write_at(fd, file, value.as_bytes())
        .map_err(|e| explain(&dir.join(file), &format!("writing {value:?}"), e.into()))
}

/// The v1 parents swept by this process (each once).
static SWEPT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// On first use of a v1 `parent` in this process (open as `parent_fd`): removes the
/// `childguard-*` cgroups in it whose supervisor is dead (judged by [`judge::stale_names`], as
/// the v2 sweep judges), if they are empty — listed and removed relative to `parent_fd`. What
/// was done goes to the next close report's notes.
pub(crate) fn sweep_once(parent_fd: BorrowedFd<'_>, parent: &Path) {
    let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
    if swept.iter().any(|p| p == parent) {
        return;
    }
    swept.push(parent.to_path_buf());
    let mut notes = Vec::new();
    for (name, who) in judge::stale_names(parent_fd) {
        let dir = parent.join(&name);
        notes.push(match trim::remove_tree(parent_fd, &name, &dir) {
            Ok(()) => format!("removed stale cgroup v1 {} of {who}", dir.display()),
            Err(e) => format!("stale cgroup v1 {} of {who} left: {e}", dir.display()),
        });
    }
    notes::put_back(notes);
}
