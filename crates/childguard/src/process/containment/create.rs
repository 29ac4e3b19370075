//! Making the child's cgroup, and removing it.
//!
//! The new cgroup is a leaf made for one child: no controller is ever enabled in it, and none
//! in its parent unless [`super::limits`] need one there (`cgroup.kill`, `cgroup.events`,
//! `cgroup.freeze` and `cgroup.procs` are core files, present without any controller). That is why the cgroup v2 "no internal processes" rule does not
//! stop us even when our own cgroup has processes (ourselves): the rule forbids processes in a
//! cgroup that *distributes controllers* to its children, and ours distributes none. A parent
//! that does (its `cgroup.subtree_control` is not empty) is fine too, since the child lands in
//! the leaf. What can still refuse us — a parent that is not cgroup v2, not writable (not
//! delegated to this user), a threaded subtree, `cgroup.max.descendants` — is an error naming
//! the path and the reason, and leaves no directory behind.
//!
//! By fd ([`super::at`]): the parent is opened once (`O_DIRECTORY | O_NOFOLLOW`) and checked
//! to be cgroup v2 with `fstatfs`; the cgroup is made with `mkdirat` in it, opened with
//! `openat(O_NOFOLLOW)`, its files opened relative to that fd, and it is removed with
//! `unlinkat(parent, name, AT_REMOVEDIR)`. The paths are for messages and the report.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::at;
use super::events::Watch;
use super::explain::explain;
use super::guardian::Registration;
use super::limits::apply::{self, Applied};
use super::limits::{Limits, LimitsReport};
use super::mount;
use super::name::{own_tags, PREFIX};
use super::notes::{put_back, take_pending};

/// Where cgroups are made: a cgroup v2 directory, opened once ([`Cgroup::resolve_parent`]).
#[derive(Debug)]
pub(crate) struct Parent {
    /// Its path, for messages.
    path: PathBuf,
    /// Its path in the hierarchy, as `/proc/PID/cgroup` names it.
    hierarchy: String,
    fd: OwnedFd,
}

/// A cgroup made for one child, with the files its close uses opened up front.
#[derive(Debug)]
pub(crate) struct Cgroup {
    /// Its path (the parent's, then the name): for messages and the report only.
    dir: PathBuf,
    /// Its name in the parent.
    name: OsString,
    /// The parent directory, for the removal (`unlinkat`) and the limits.
    parent: OwnedFd,
    /// The cgroup's directory: every file of it is opened relative to this, and the child is
    /// born in it (`CLONE_INTO_CGROUP`).
    fd: OwnedFd,
    /// Our path in the hierarchy, as `/proc/PID/cgroup` names it (`0::` + this).
    hierarchy_path: String,
    watch: Watch,
    removed: bool,
    /// With `exit_with_parent`: its entry in this process's guardian, which kills the cgroup
    /// if this process dies first.
    guardian: Option<Registration>,
    /// For the close report: what earlier sweeps of stale cgroups left pending when this one was
    /// made (the sweeps run once a child is born: `containment::after_birth`).
    notes: Vec<String>,
    /// Why the last removal failed (the directory that stayed), for the close report.
    remove_error: Option<String>,
    /// Resource limits, with the cgroups made for them in v1 hierarchies.
    limits: Option<Applied>,
}

/// Counter for unique names within this process (the pid makes them unique across processes).
static NEXT: AtomicU64 = AtomicU64::new(0);

/// A cgroup parent must be root's or ours (issue 49): the owner of a delegated parent can move
/// our server out of the cgroup we make there, or rename it under the guardian. Root working
/// in another user's delegated subtree would give that user the server's containment.
fn trust_parent(path: &Path, fd: &OwnedFd) -> io::Result<()> {
    let owner = rustix::fs::fstat(fd)?.st_uid;
    let me = rustix::process::geteuid().as_raw();
    if owner == me || owner == 0 {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "cgroup parent {} is owned by uid {owner}, neither root nor us (uid {me}): that \
             user could move the server out of its cgroup; use a parent owned by root or by us",
            path.display()
        ),
    ))
}

impl Cgroup {
    /// Where a new cgroup goes: `parent`, or the cgroup this process runs in; opened
    /// (`O_DIRECTORY | O_NOFOLLOW`) and checked to be a cgroup v2 directory under the mount.
    /// Returns it with its path in the hierarchy (as `/proc/PID/cgroup` names it), for
    /// [`Cgroup::create_in`].
    pub(crate) fn resolve_parent(parent: Option<&Path>) -> io::Result<Parent> {
        Self::resolve_under_mount(parent).or_else(|_| {
            // The kept mount may be stale (this process changed mount namespace): once more
            // from a fresh read of mountinfo, whose answer stands.
            mount::forget_cgroup2();
            Self::resolve_under_mount(parent)
        })
    }

    fn resolve_under_mount(parent: Option<&Path>) -> io::Result<Parent> {
        let (root, mount_point) = mount::cgroup2()?;
        let parent = match parent {
            Some(p) => p.to_path_buf(),
            None => mount::own_cgroup_dir()?,
        };
        let fd = open_cgroup2(&parent)?;
        trust_parent(&parent, &fd)?;
        let relative = parent.strip_prefix(&mount_point).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: not under the cgroup2 mount at {}",
                    parent.display(),
                    mount_point.display()
                ),
            )
        })?;
        let hierarchy = format!(
            "{}/{}",
            root.trim_end_matches('/'),
            relative.to_string_lossy()
        );
        Ok(Parent {
            path: parent,
            hierarchy,
            fd,
        })
    }

    /// Makes a new cgroup `childguard-<pid>-<n>-t<start>-ns<pidns>` (mode 0755) under `parent`
    /// (from [`Cgroup::resolve_parent`]): `mkdirat` in the parent's fd, then `openat` of the
    /// new directory. On error nothing is left behind. The sweep of stale cgroups that comes
    /// first on a parent's first use is [`create_cgroup`](super::create_cgroup)'s.
    pub(crate) fn create_in(parent: Parent) -> io::Result<Cgroup> {
        let pid = std::process::id();
        let tags = own_tags();
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let name = OsString::from(format!("{}{pid}-{n}{tags}", PREFIX));
            match rustix::fs::mkdirat(&parent.fd, &name, Mode::from_raw_mode(0o755)) {
                Ok(()) => {}
                // Left by an earlier process with our pid: take the next number.
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(explain(&parent.path, "making a cgroup in it", e.into())),
            }
            let hierarchy_path = format!(
                "{}/{}",
                parent.hierarchy.trim_end_matches('/'),
                name.to_string_lossy()
            );
            let dir = parent.path.join(&name);
            let opened = match Cgroup::open(parent.fd.as_fd(), &name, &dir) {
                Ok(opened) => opened,
                Err(e) => {
                    let _ = rustix::fs::unlinkat(&parent.fd, &name, AtFlags::REMOVEDIR);
                    return Err(e);
                }
            };
            let mut cgroup = Cgroup::new(parent.fd, name, dir, hierarchy_path, opened);
            cgroup.notes = take_pending();
            return Ok(cgroup);
        }
    }

    /// Opens the cgroup `name` of the directory open as `parent` (`openat`, `O_NOFOLLOW`), and
    /// its `cgroup.events` relative to it.
    fn open(parent: BorrowedFd<'_>, name: &OsStr, dir: &Path) -> io::Result<(OwnedFd, Watch)> {
        let fd = at::open_dir_at(parent, name).map_err(|e| explain(dir, "opening", e.into()))?;
        let watch = Watch::open(fd.as_fd(), dir)?;
        Ok((fd, watch))
    }

    fn new(
        parent: OwnedFd,
        name: OsString,
        dir: PathBuf,
        hierarchy_path: String,
        (fd, watch): (OwnedFd, Watch),
    ) -> Cgroup {
        Cgroup {
            dir,
            name,
            parent,
            fd,
            hierarchy_path,
            watch,
            removed: false,
            guardian: None,
            notes: Vec::new(),
            remove_error: None,
            limits: None,
        }
    }

    /// Opens an existing cgroup `name` of the directory open as `parent` (a stale one, to kill
    /// and remove it); `dir` is its path, for messages.
    pub(crate) fn open_stale(
        parent: BorrowedFd<'_>,
        name: &OsStr,
        dir: PathBuf,
        hierarchy_path: String,
    ) -> io::Result<Cgroup> {
        let opened = Cgroup::open(parent, name, &dir)?;
        let parent = parent.try_clone_to_owned()?;
        Ok(Cgroup::new(
            parent,
            name.to_owned(),
            dir,
            hierarchy_path,
            opened,
        ))
    }

    /// Registers this cgroup with this process's guardian, starting it if needed (before the
    /// child is spawned into it: see [`super::guardian`]).
    pub(crate) fn guard(&mut self) -> io::Result<()> {
        self.guardian = Some(super::guardian::register(&self.dir)?);
        Ok(())
    }

    /// Applies resource limits before the child is spawned (see [`super::limits`]): files of
    /// this cgroup, and cgroups of the same name in the v1 hierarchies that hold the
    /// controllers on a hybrid host. `Err`: which limit could not be applied, and why.
    pub(crate) fn limit(&mut self, limits: &Limits) -> io::Result<()> {
        let parent = self.dir.parent().unwrap_or(Path::new("/"));
        let name = self.name.to_string_lossy();
        let v2 = apply::V2 {
            parent: (self.parent.as_fd(), parent),
            cgroup: (self.fd.as_fd(), &self.dir),
        };
        self.limits = Some(apply::apply(limits, v2, &name)?);
        Ok(())
    }

    /// The limits and what the kernel did under them, for the close report.
    pub(crate) fn limits_report(&self) -> Option<LimitsReport> {
        self.limits.as_ref().map(|l| l.report(self.fd.as_fd()))
    }

    /// The limits applied, if any.
    pub(crate) fn limits(&self) -> Option<&Applied> {
        self.limits.as_ref()
    }

    /// The cgroup's directory: its path, for messages and the report (every file of it is
    /// opened relative to [`Cgroup::fd`]).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cgroup's directory, open (`O_RDONLY | O_DIRECTORY | O_NOFOLLOW`).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Its parent directory, open as it was when the cgroup was made in it.
    pub(crate) fn parent_fd(&self) -> BorrowedFd<'_> {
        self.parent.as_fd()
    }

    /// The path `/proc/PID/cgroup` shows (after `0::`) for a member.
    pub(crate) fn hierarchy_path(&self) -> &str {
        &self.hierarchy_path
    }

    /// `cgroup.procs`, write-only and close-on-exec, for a child that joins the cgroup itself
    /// before exec (std's path: our own spawn places the child at birth and never opens it).
    pub(crate) fn open_procs(&self) -> io::Result<OwnedFd> {
        at::open_file_at(self.fd(), "cgroup.procs", OFlags::WRONLY).map_err(|e| {
            explain(
                &self.dir.join("cgroup.procs"),
                "opening for writing",
                e.into(),
            )
        })
    }

    /// `cgroup.events` and its watch.
    pub(crate) fn watch(&self) -> &Watch {
        &self.watch
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed
    }

    /// Whether anything is left in it or below, by `cgroup.events` (one small read, no
    /// `cgroup.procs` listing; an unreadable file answers yes, and the caller lists).
    pub(crate) fn populated(&self) -> bool {
        self.watch.read().map_or(true, |e| e.populated)
    }

    /// Removes the (empty) directory, and first every cgroup the server made inside it,
    /// deepest first ([`super::trim`]). `EBUSY` while it still has members; the error names
    /// the directory that stayed.
    pub(crate) fn remove(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        // Not while it has members: the walk would remove the empty cgroups of a live tree.
        let events = self.watch.read();
        if let (Some(limits), Ok(e)) = (&mut self.limits, &events) {
            if !e.populated {
                // What the kernel counted goes with the directories: read it first.
                limits.snapshot(self.fd.as_fd());
            }
        }
        let removed = match events {
            Ok(events) if events.populated => {
                let busy = io::Error::from_raw_os_error(libc::EBUSY);
                Err(io::Error::new(
                    busy.kind(),
                    format!(
                        "{} (removing): processes are still in it (EBUSY: {busy})",
                        self.dir.display()
                    ),
                ))
            }
            _ => super::trim::remove_tree(self.parent.as_fd(), &self.name, &self.dir),
        };
        if let Err(e) = removed {
            self.remove_error = Some(e.to_string());
            return Err(e);
        }
        self.removed = true;
        self.remove_error = None;
        // The v1 twins hold the same processes, all gone now that the v2 cgroup is empty.
        if let Some(Err(e)) = self.limits.as_mut().map(Applied::remove_v1) {
            self.notes.push(format!("a cgroup v1 directory stays: {e}"));
        }
        // Nothing left to guard. Never blocks, never raises SIGPIPE; a guardian found gone
        // is a note for the report, not an error.
        if let Some(note) = self.guardian.take().and_then(|g| g.dismiss()) {
            self.notes.push(note);
        }
        Ok(())
    }
}

impl Cgroup {
    /// Notes for the close report: what the sweeps of stale cgroups did before this cgroup was
    /// made, or since (the v2 and v1 sweeps run once a contained child is born) — given once —
    /// and why the cgroup could not be removed, if it could not.
    pub(crate) fn take_notes(&mut self) -> Vec<String> {
        let mut notes = std::mem::take(&mut self.notes);
        notes.extend(take_pending());
        if let (false, Some(e)) = (self.removed, &self.remove_error) {
            notes.push(format!("the cgroup stays: {e}"));
        }
        notes
    }
}

impl Drop for Cgroup {
    /// Last resort (a spawn that failed, a job given up): remove the directory if it is
    /// empty. A cgroup with members stays (rmdir fails with `EBUSY`); nothing is killed here.
    /// Sweep notes not reported yet go to the next cgroup made.
    fn drop(&mut self) {
        put_back(std::mem::take(&mut self.notes));
        let _ = self.remove();
        // A cgroup that could not be removed (members in D state): its registration is
        // dismissed by its own drop, after this, without a kill.
    }
}

/// Opens the directory `dir` (`O_DIRECTORY | O_NOFOLLOW`) and checks with `fstatfs(2)` that
/// it is a directory of a cgroup2 file system.
fn open_cgroup2(dir: &Path) -> io::Result<OwnedFd> {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let parent = |e: rustix::io::Errno| explain(dir, "the cgroup parent", e.into());
    let fd = at::open_dir(dir).map_err(parent)?;
    let fs = rustix::fs::fstatfs(&fd).map_err(parent)?;
    if fs.f_type as i64 != CGROUP2_SUPER_MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a cgroup v2 directory", dir.display()),
        ));
    }
    Ok(fd)
}

/// The error of a child that could not join the cgroup at `dir` (the errno its write to
/// `cgroup.procs` got, before exec).
pub(crate) fn explain_placement(dir: &Path, errno: i32) -> io::Error {
    let procs = dir.join("cgroup.procs");
    let e = io::Error::from_raw_os_error(errno);
    let name = match errno {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        _ => return explain(&procs, "placing the child in its cgroup", e),
    };
    // The cgroup was made and its cgroup.procs opened: what refuses is the migration itself.
    io::Error::new(
        e.kind(),
        format!(
            "{} (placing the child in its cgroup): permission denied ({name}: {e}): moving a \
             process needs write access to cgroup.procs of the nearest common ancestor of its \
             current cgroup and the new one, so a cgroup_parent outside this process's own \
             delegated subtree is refused; before Linux 5.16 the child's own credentials \
             (Command::uid/gid) count, not those of its supervisor",
            procs.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_is_made_unique_0755_and_removed() {
        let a = crate::process::containment::create_cgroup(None, &Default::default())
            .expect("cgroup2 with a writable cgroup of ours (CI: root)");
        let mut b = crate::process::containment::create_cgroup(None, &Default::default()).unwrap();
        assert_ne!(a.dir(), b.dir());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(a.dir()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755, "{}", a.dir().display());
        assert!(a.dir().join("cgroup.kill").exists());
        let dir = b.dir().to_path_buf();
        b.remove().unwrap();
        assert!(!dir.exists());
        let dir = a.dir().to_path_buf();
        drop(a);
        assert!(!dir.exists(), "drop of an empty cgroup removes it");
    }

    #[test]
    fn a_stale_kept_mount_is_found_out_and_read_again() {
        let _planting = mount::TEST_LOCK.write();
        let parent = Cgroup::resolve_parent(None).unwrap().path;
        let right = mount::cgroup2().unwrap();
        // As if this process had moved to a mount namespace where cgroup2 is elsewhere.
        let stale = ("/".to_string(), PathBuf::from("/nonexistent-cgroup2-mount"));
        mount::plant_cgroup2(Some(stale.clone()));
        let again = Cgroup::resolve_parent(None);
        let kept = mount::plant_cgroup2(Some(right.clone()));
        assert_eq!(
            again.unwrap().path,
            parent,
            "resolved from a fresh read of mountinfo"
        );
        assert_eq!(kept, Some(right), "the stale mount was replaced, not kept");
    }

    #[test]
    fn a_missing_parent_is_a_clear_error_and_nothing_is_made() {
        let own = {
            let _planting = mount::TEST_LOCK.read();
            mount::own_cgroup_dir().unwrap()
        };
        let missing = own.join("childguard-no-such-parent");
        let e = crate::process::containment::create_cgroup(Some(&missing), &Default::default())
            .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("childguard-no-such-parent"), "{text}");
        assert!(text.contains("does not exist"), "{text}");
        assert!(!missing.exists());
    }

    #[test]
    fn a_parent_outside_cgroup2_is_refused() {
        let tmp = std::env::temp_dir();
        let e = crate::process::containment::create_cgroup(Some(&tmp), &Default::default())
            .unwrap_err();
        assert!(e.to_string().contains("not a cgroup v2 directory"), "{e}");
    }

    #[test]
    fn the_hierarchy_path_is_what_proc_shows_for_a_member() {
        let cgroup = crate::process::containment::create_cgroup(None, &Default::default()).unwrap();
        let own = crate::base::kernel_text::read("/proc/self/cgroup").unwrap();
        let ours = mount::unified_path(&own).unwrap().trim_end_matches('/');
        let name = cgroup.dir().file_name().unwrap().to_str().unwrap();
        assert_eq!(cgroup.hierarchy_path(), format!("{ours}/{name}"));
    }
}
