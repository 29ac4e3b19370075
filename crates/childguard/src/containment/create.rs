//! Making the child's cgroup, and removing it.
//!
//! The new cgroup is a leaf made for one child: no controller is ever enabled in it or by us
//! (`cgroup.kill`, `cgroup.events`, `cgroup.freeze` and `cgroup.procs` are core files, present
//! without any controller). That is why the cgroup v2 "no internal processes" rule does not
//! stop us even when our own cgroup has processes (ourselves): the rule forbids processes in a
//! cgroup that *distributes controllers* to its children, and ours distributes none. A parent
//! that does (its `cgroup.subtree_control` is not empty) is fine too, since the child lands in
//! the leaf. What can still refuse us — a parent that is not cgroup v2, not writable (not
//! delegated to this user), a threaded subtree, `cgroup.max.descendants` — is an error naming
//! the path and the reason, and leaves no directory behind.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};

use super::events::Watch;
use super::guardian::Guardian;
use super::mount;

/// A cgroup made for one child, with the files its close uses opened up front.
#[derive(Debug)]
pub(crate) struct Cgroup {
    dir: PathBuf,
    /// Our path in the hierarchy, as `/proc/PID/cgroup` names it (`0::` + this).
    hierarchy_path: String,
    /// `cgroup.procs`, write-only and close-on-exec: the child writes `0` to it before exec.
    procs: OwnedFd,
    watch: Watch,
    removed: bool,
    /// With `exit_with_parent`: kills the cgroup if this process dies first.
    guardian: Option<Guardian>,
}

/// Counter for unique names within this process (the pid makes them unique across processes).
static NEXT: AtomicU64 = AtomicU64::new(0);

impl Cgroup {
    /// Makes a new cgroup `childguard-<pid>-<n>` (mode 0755) under `parent`, or under the
    /// cgroup this process runs in. On error nothing is left behind.
    pub(crate) fn create(parent: Option<&Path>) -> io::Result<Cgroup> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
        let (root, mount_point) = mount::cgroup2_mount(&mountinfo).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no cgroup2 file system is mounted (none in /proc/self/mountinfo)",
            )
        })?;
        let parent = match parent {
            Some(p) => p.to_path_buf(),
            None => mount::own_cgroup_dir()?,
        };
        check_is_cgroup2(&parent)?;
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
        let parent_hierarchy = format!(
            "{}/{}",
            root.trim_end_matches('/'),
            relative.to_string_lossy()
        );
        let pid = std::process::id();
        loop {
            let name = format!("childguard-{pid}-{}", NEXT.fetch_add(1, Ordering::Relaxed));
            let dir = parent.join(&name);
            match rustix::fs::mkdir(&dir, Mode::from_raw_mode(0o755)) {
                Ok(()) => {}
                // Left by an earlier process with our pid: take the next number.
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(explain(&parent, "making a cgroup in it", e.into())),
            }
            let hierarchy_path = format!("{}/{name}", parent_hierarchy.trim_end_matches('/'));
            return match Cgroup::open(&dir, hierarchy_path) {
                Ok(cgroup) => Ok(cgroup),
                Err(e) => {
                    let _ = rustix::fs::rmdir(&dir);
                    Err(e)
                }
            };
        }
    }

    fn open(dir: &Path, hierarchy_path: String) -> io::Result<Cgroup> {
        let procs_path = dir.join("cgroup.procs");
        let procs = rustix::fs::open(&procs_path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| explain(&procs_path, "opening for writing", e.into()))?;
        let watch = Watch::open(dir)?;
        Ok(Cgroup {
            dir: dir.to_path_buf(),
            hierarchy_path,
            procs,
            watch,
            removed: false,
            guardian: None,
        })
    }

    /// Starts a [`Guardian`] for this cgroup (before the child is spawned into it).
    pub(crate) fn guard(&mut self) -> io::Result<()> {
        self.guardian = Some(Guardian::start(&self.dir)?);
        Ok(())
    }

    /// The cgroup's directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path `/proc/PID/cgroup` shows (after `0::`) for a member.
    pub(crate) fn hierarchy_path(&self) -> &str {
        &self.hierarchy_path
    }

    /// `cgroup.procs`, for the child's placement before exec.
    pub(crate) fn procs_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.procs.as_fd()
    }

    /// `cgroup.events` and its watch.
    pub(crate) fn watch(&self) -> &Watch {
        &self.watch
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed
    }

    /// Removes the (empty) directory. `EBUSY` while it still has members.
    pub(crate) fn remove(&mut self) -> io::Result<()> {
        if self.removed {
            return Ok(());
        }
        rustix::fs::rmdir(&self.dir).map_err(|e| explain(&self.dir, "removing", e.into()))?;
        self.removed = true;
        // Nothing left to guard.
        if let Some(mut guardian) = self.guardian.take() {
            guardian.dismiss();
        }
        Ok(())
    }
}

impl Drop for Cgroup {
    /// Last resort (a spawn that failed, a job given up): remove the directory if it is
    /// empty. A cgroup with members stays (rmdir fails with `EBUSY`); nothing is killed here.
    fn drop(&mut self) {
        let _ = self.remove();
        // A cgroup that could not be removed (members in D state): the guardian is dismissed
        // by its own drop, after this, without a kill.
    }
}

/// `statfs(2)`: is `dir` a directory of a cgroup2 file system?
fn check_is_cgroup2(dir: &Path) -> io::Result<()> {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let fs = rustix::fs::statfs(dir).map_err(|e| explain(dir, "the cgroup parent", e.into()))?;
    if fs.f_type as i64 != CGROUP2_SUPER_MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a cgroup v2 directory", dir.display()),
        ));
    }
    Ok(())
}

/// An error naming `path`, what we were doing, and what the errno means for cgroups.
pub(crate) fn explain(path: &Path, doing: &str, e: io::Error) -> io::Error {
    let why = match e.raw_os_error() {
        Some(libc::ENOENT) => "does not exist",
        Some(libc::EACCES) | Some(libc::EPERM) => {
            "permission denied: not writable by this user (is the subtree delegated to it?)"
        }
        Some(libc::EROFS) => "the cgroup file system is mounted read-only",
        Some(libc::EBUSY) => {
            "busy: cgroup v2's no-internal-processes rule (a cgroup that distributes \
             controllers to its children cannot take processes)"
        }
        Some(libc::EOPNOTSUPP) => "not supported here (a threaded cgroup subtree?)",
        Some(libc::EAGAIN) => "cgroup.max.descendants or cgroup.max.depth reached",
        Some(libc::ENOTDIR) => "not a directory",
        _ => "",
    };
    let message = if why.is_empty() {
        format!("{} ({doing}): {e}", path.display())
    } else {
        format!("{} ({doing}): {why} ({e})", path.display())
    };
    io::Error::new(e.kind(), message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cgroup_is_made_unique_0755_and_removed() {
        let a = Cgroup::create(None).expect("cgroup2 with a writable cgroup of ours (CI: root)");
        let mut b = Cgroup::create(None).unwrap();
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
    fn a_missing_parent_is_a_clear_error_and_nothing_is_made() {
        let own = mount::own_cgroup_dir().unwrap();
        let missing = own.join("childguard-no-such-parent");
        let e = Cgroup::create(Some(&missing)).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("childguard-no-such-parent"), "{text}");
        assert!(text.contains("does not exist"), "{text}");
        assert!(!missing.exists());
    }

    #[test]
    fn a_parent_outside_cgroup2_is_refused() {
        let tmp = std::env::temp_dir();
        let e = Cgroup::create(Some(&tmp)).unwrap_err();
        assert!(e.to_string().contains("not a cgroup v2 directory"), "{e}");
    }

    #[test]
    fn the_hierarchy_path_is_what_proc_shows_for_a_member() {
        let cgroup = Cgroup::create(None).unwrap();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let ours = mount::unified_path(&own).unwrap().trim_end_matches('/');
        let name = cgroup.dir().file_name().unwrap().to_str().unwrap();
        assert_eq!(cgroup.hierarchy_path(), format!("{ours}/{name}"));
    }
}
