//! Where cgroup v2 is: the `cgroup2` mount from `/proc/self/mountinfo`, and this process's
//! own cgroup from the `0::` line of `/proc/self/cgroup`.
//!
//! Never assumed: a pure-v2 host mounts the hierarchy at `/sys/fs/cgroup`, a hybrid one (v1
//! controllers beside it) at `/sys/fs/cgroup/unified`, and a container may mount it anywhere,
//! with a mount root other than `/` (a cgroup namespace).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The cgroup2 mount found last in `/proc/self/mountinfo`: (root within the hierarchy, mount
/// point). Kept because reading mountinfo is dear: the kernel formats every mount of the
/// namespace at each read (~30 µs here for 20 mounts, against ~9 µs for `/proc/self/cgroup`),
/// and a contained spawn read it twice.
static KEPT: Mutex<Option<(String, PathBuf)>> = Mutex::new(None);

/// The text of the read that found [`KEPT`], until the v1 sweep of the same first contained
/// spawn takes it ([`take_mountinfo`]): one read of mountinfo per process, not two.
static TEXT: Mutex<Option<String>> = Mutex::new(None);

/// The cgroup2 mount: (root within the hierarchy, mount point). Found in
/// `/proc/self/mountinfo` the first time and kept for the process; a caller that finds the
/// kept answer wrong (a directory under it is not cgroup v2, or its own cgroup is outside it:
/// the process moved to another mount namespace) calls [`forget_cgroup2`] and asks again.
pub(crate) fn cgroup2() -> io::Result<(String, PathBuf)> {
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(found) = kept.as_ref() {
        return Ok(found.clone());
    }
    let mountinfo = crate::base::kernel_text::read("/proc/self/mountinfo")?;
    let found = cgroup2_mount(&mountinfo).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "no cgroup2 file system is mounted (none in /proc/self/mountinfo)",
        )
    })?;
    *kept = Some(found.clone());
    *TEXT.lock().unwrap_or_else(PoisonError::into_inner) = Some(mountinfo);
    Ok(found)
}

/// `/proc/self/mountinfo`: the text [`cgroup2`] read last, if nobody took it yet (it is given
/// once, then dropped: a host with thousands of mounts has a large one), else a fresh read.
pub(crate) fn take_mountinfo() -> io::Result<String> {
    match TEXT.lock().unwrap_or_else(PoisonError::into_inner).take() {
        Some(text) => Ok(text),
        None => crate::base::kernel_text::read("/proc/self/mountinfo"),
    }
}

/// Drops the kept mount: the next [`cgroup2`] reads `/proc/self/mountinfo` again.
pub(crate) fn forget_cgroup2() {
    *KEPT.lock().unwrap_or_else(PoisonError::into_inner) = None;
    *TEXT.lock().unwrap_or_else(PoisonError::into_inner) = None;
}

/// Plants a kept mount (tests of a stale one), returning the one it replaced.
#[cfg(test)]
pub(crate) fn plant_cgroup2(mount: Option<(String, PathBuf)>) -> Option<(String, PathBuf)> {
    std::mem::replace(&mut *KEPT.lock().unwrap(), mount)
}

/// Tests that read [`own_cgroup_dir`] hold this for reading; a test that plants a stale
/// mount, for writing.
#[cfg(test)]
pub(crate) static TEST_LOCK: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// The directory of this process's own cgroup v2: the mount point plus our path in the
/// hierarchy (relative to the mount's root).
pub(crate) fn own_cgroup_dir() -> io::Result<PathBuf> {
    let (root, mount_point) = cgroup2()?;
    let cgroup = crate::base::kernel_text::read("/proc/self/cgroup")?;
    let ours = unified_path(&cgroup).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "this process is in no cgroup v2 (no `0::` line in /proc/self/cgroup)",
        )
    })?;
    dir_in_mount(&mount_point, &root, ours)
}

/// The first `cgroup2` mount in a mountinfo text: (root within the hierarchy, mount point).
pub(crate) fn cgroup2_mount(mountinfo: &str) -> Option<(String, PathBuf)> {
    mounts(mountinfo)
        .find(|m| m.fstype == "cgroup2")
        .map(|m| (m.root().into_owned(), PathBuf::from(&*m.mount_point())))
}

/// One line of `/proc/self/mountinfo`, the fields we use (paths as written: see
/// [`Mount::root`] and [`Mount::mount_point`] for them unescaped).
pub(crate) struct Mount<'a> {
    root: &'a str,
    mount_point: &'a str,
    pub(crate) fstype: &'a str,
    /// The file system's own options (`rw,hidepid=invisible`), after the source.
    pub(crate) super_options: &'a str,
}

/// The mounts of a mountinfo text, in its order (a later mount on a path covers an earlier).
pub(crate) fn mounts(mountinfo: &str) -> impl Iterator<Item = Mount<'_>> {
    mountinfo.lines().filter_map(|line| {
        // id parent major:minor root mount-point options [optional…] - fstype source super
        let (before, after) = line.split_once(" - ")?;
        let mut fields = before.split(' ');
        let root = fields.nth(3)?;
        let mount_point = fields.next()?;
        let mut after = after.split(' ');
        let fstype = after.next()?;
        let super_options = after.nth(1).unwrap_or("");
        Some(Mount {
            root,
            mount_point,
            fstype,
            super_options,
        })
    })
}

impl Mount<'_> {
    /// The root of the mount within its file system, unescaped.
    pub(crate) fn root(&self) -> std::borrow::Cow<'_, str> {
        unescape(self.root)
    }

    /// Where it is mounted, unescaped.
    pub(crate) fn mount_point(&self) -> std::borrow::Cow<'_, str> {
        unescape(self.mount_point)
    }
}

/// The path after `0::` in a `/proc/self/cgroup` text (the v2 hierarchy's line).
pub(crate) fn unified_path(cgroup: &str) -> Option<&str> {
    cgroup.lines().find_map(|l| l.strip_prefix("0::"))
}

/// The directory of cgroup `path` (as `/proc/self/cgroup` names it) under a mount of the
/// hierarchy's `root` at `mount_point`.
fn dir_in_mount(mount_point: &Path, root: &str, path: &str) -> io::Result<PathBuf> {
    let relative = if root == "/" {
        Some(path)
    } else {
        path.strip_prefix(root)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    let relative = relative.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "our cgroup {path} is outside the cgroup2 mount at {} (mount root {root})",
                mount_point.display()
            ),
        )
    })?;
    let relative = relative.trim_start_matches('/');
    if relative.split('/').any(|c| c == "..") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("our cgroup path {path} is not a plain path"),
        ));
    }
    Ok(if relative.is_empty() {
        mount_point.to_path_buf()
    } else {
        mount_point.join(relative)
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space, `\011`, `\012`, `\134`).
fn unescape(field: &str) -> std::borrow::Cow<'_, str> {
    if !field.contains('\\') {
        return std::borrow::Cow::Borrowed(field);
    }
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                let value = d.iter().fold(0u32, |v, b| v * 8 + u32::from(b - b'0'));
                out.push(value as u8);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    std::borrow::Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const PURE: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn finds_the_cgroup2_mount_on_hybrid_and_pure_hosts() {
        assert_eq!(
            cgroup2_mount(HYBRID),
            Some(("/".into(), PathBuf::from("/sys/fs/cgroup/unified")))
        );
        // Optional fields ("shared:4") before the separator do not confuse the parser.
        assert_eq!(
            cgroup2_mount(PURE),
            Some(("/".into(), PathBuf::from("/sys/fs/cgroup")))
        );
        assert_eq!(cgroup2_mount("31 23 0:28 / /x rw - tmpfs tmpfs rw\n"), None);
    }

    #[test]
    fn mount_points_with_spaces_are_unescaped() {
        let info = "41 31 0:38 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(info),
            Some(("/".into(), PathBuf::from("/mnt/cg two")))
        );
    }

    #[test]
    fn our_cgroup_is_the_0_line() {
        let text = "9:name=systemd:/\n4:memory:/a/b\n0::/user.slice/session-1.scope\n";
        assert_eq!(unified_path(text), Some("/user.slice/session-1.scope"));
        assert_eq!(unified_path("4:memory:/a\n"), None);
    }

    #[test]
    fn the_directory_joins_mount_and_path_minus_the_mount_root() {
        let mp = Path::new("/sys/fs/cgroup");
        assert_eq!(dir_in_mount(mp, "/", "/").unwrap(), mp);
        assert_eq!(
            dir_in_mount(mp, "/", "/a/b").unwrap(),
            PathBuf::from("/sys/fs/cgroup/a/b")
        );
        assert_eq!(
            dir_in_mount(mp, "/a", "/a/b").unwrap(),
            PathBuf::from("/sys/fs/cgroup/b")
        );
        assert!(dir_in_mount(mp, "/a", "/ab").is_err());
        assert!(dir_in_mount(mp, "/", "/a/../b").is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_machine_has_a_cgroup2_dir_of_ours() {
        let _planting = TEST_LOCK.read();
        let dir = own_cgroup_dir().expect("this host mounts cgroup2 (CI does)");
        assert!(dir.join("cgroup.procs").exists(), "{}", dir.display());
    }

    #[test]
    fn the_text_that_found_the_mount_is_given_once_then_read_afresh() {
        let _planting = TEST_LOCK.write();
        forget_cgroup2();
        let (_, point) = cgroup2().expect("this host mounts cgroup2 (CI does)");
        let first = take_mountinfo().unwrap();
        assert!(
            cgroup2_mount(&first).is_some_and(|(_, p)| p == point),
            "{first}"
        );
        // Given once: the kept copy is gone, and the next take is a read of its own.
        assert!(TEXT.lock().unwrap().is_none());
        let again = take_mountinfo().unwrap();
        assert!(
            cgroup2_mount(&again).is_some_and(|(_, p)| p == point),
            "{again}"
        );
        // A forgotten mount drops an untaken text too.
        forget_cgroup2();
        cgroup2().unwrap();
        assert!(TEXT.lock().unwrap().is_some());
        forget_cgroup2();
        assert!(TEXT.lock().unwrap().is_none());
    }

    #[test]
    fn paths_without_escapes_are_not_copied() {
        assert!(matches!(
            unescape("/sys/fs/cgroup"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(unescape("/a\\040b"), "/a b");
    }
}
