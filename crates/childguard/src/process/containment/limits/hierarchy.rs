//! Where each controller is: in cgroup v2 (the child's own cgroup), or in a cgroup v1
//! hierarchy of its own (a hybrid host, such as this project's CI: `memory`, `pids` and `cpu`
//! mounted at `/sys/fs/cgroup/<name>`, only the core files in v2).
//!
//! As systemd's hybrid mode and runc decide it: a controller the v2 parent lists in
//! `cgroup.controllers` is a v2 one (it may have to be enabled in the parent's
//! `cgroup.subtree_control` first); otherwise the `cgroup` (v1) mount whose options name it,
//! found in `/proc/self/mountinfo`, with our cgroup in it from `/proc/self/cgroup`
//! (`N:memory:/path`). Never a path assumed.

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use crate::process::containment::mount;

/// A controller a limit needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    /// Its name in `cgroup.controllers`, mount options and `/proc/self/cgroup`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }
}

/// Where a controller is, for the cgroups made under one v2 parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Place {
    /// In cgroup v2: `enabled` when the parent's `cgroup.subtree_control` already has it (the
    /// new cgroup gets its files); else it is to be enabled there first.
    V2 { enabled: bool },
    /// In a cgroup v1 hierarchy: the directory of this process's cgroup in it, under which the
    /// child's v1 cgroup is made.
    V1 { parent: PathBuf },
}

/// Locates `controller` for children of the v2 cgroup `v2_parent` (open, and its path for
/// messages), from the texts of `/proc/self/mountinfo` and `/proc/self/cgroup`, reading the
/// parent's `cgroup.controllers` and `cgroup.subtree_control` (relative to its fd). `Err`: why
/// it is nowhere to be had.
pub(crate) fn locate(
    controller: Controller,
    (parent_fd, v2_parent): (BorrowedFd<'_>, &Path),
    mountinfo: &str,
    proc_cgroup: &str,
) -> Result<Place, String> {
    let name = controller.name();
    let read = |file: &str| read_or_empty(parent_fd, file);
    let available = read("cgroup.controllers");
    if available.split_whitespace().any(|c| c == name) {
        let enabled = read("cgroup.subtree_control")
            .split_whitespace()
            .any(|c| c == name);
        return Ok(Place::V2 { enabled });
    }
    match v1_dir(name, mountinfo, proc_cgroup) {
        Some(parent) => Ok(Place::V1 { parent }),
        None => Err(format!(
            "no {name} controller to be had: cgroup v2 does not offer it at {} (its \
             cgroup.controllers lists {:?}: the parent's owner must enable it in the cgroup \
             above, as systemd's Delegate=yes does), and no cgroup v1 hierarchy with it is \
             mounted (none in /proc/self/mountinfo)",
            v2_parent.display(),
            available.trim()
        )),
    }
}

fn read_or_empty(dir: BorrowedFd<'_>, file: &str) -> String {
    crate::process::containment::at::read_at(dir, file).unwrap_or_default()
}

/// The directory of our cgroup in the v1 hierarchy of controller `name`: the `cgroup` mount
/// whose options list it, joined with our path in it (`/proc/self/cgroup`, less the mount's
/// root).
pub(crate) fn v1_dir(name: &str, mountinfo: &str, proc_cgroup: &str) -> Option<PathBuf> {
    let m = mount::mounts(mountinfo)
        .find(|m| m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == name))?;
    let ours = proc_cgroup.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == name).then_some(path)
    })?;
    let root = m.root();
    let relative = if root == "/" {
        ours
    } else {
        ours.strip_prefix(&*root)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))?
    };
    let relative = relative.trim_start_matches('/');
    if relative.split('/').any(|c| c == "..") {
        return None;
    }
    let mount_point = PathBuf::from(&*m.mount_point());
    Some(if relative.is_empty() {
        mount_point
    } else {
        mount_point.join(relative)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::containment::at;
    use std::os::fd::AsFd;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 /box /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const CGROUP: &str = "\
9:name=systemd:/
8:pids:/box/run
4:memory:/process_api/abc
2:cpu,cpuacct:/
0::/
";

    #[test]
    fn v1_directories_come_from_the_mount_and_our_line() {
        assert_eq!(
            v1_dir("memory", HYBRID, CGROUP),
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/abc"))
        );
        // A comma-joined hierarchy, at its root.
        assert_eq!(
            v1_dir("cpu", HYBRID, CGROUP),
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"))
        );
        // A mount whose root is not the hierarchy's (a cgroup namespace, a bind mount).
        assert_eq!(
            v1_dir("pids", HYBRID, CGROUP),
            Some(PathBuf::from("/sys/fs/cgroup/pids/run"))
        );
        // `cpuacct` is not `cpu`; no `blkio` at all.
        assert_eq!(v1_dir("blkio", HYBRID, CGROUP), None);
        assert_eq!(v1_dir("cpuacct", HYBRID, "2:cpu:/\n"), None);
    }

    #[test]
    fn a_controller_nowhere_is_an_error_naming_both_places() {
        let dir = std::env::temp_dir();
        let fd = at::open_dir(&dir).unwrap();
        let e = locate(Controller::Memory, (fd.as_fd(), &dir), "", "").unwrap_err();
        assert!(e.contains("no memory controller"), "{e}");
        assert!(e.contains("cgroup.controllers"), "{e}");
        assert!(e.contains("mountinfo"), "{e}");
    }

    #[test]
    fn a_v2_controller_is_taken_before_a_v1_one() {
        let dir = std::env::temp_dir().join(format!("cg-locate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cgroup.controllers"), "cpu io memory pids\n").unwrap();
        std::fs::write(dir.join("cgroup.subtree_control"), "memory\n").unwrap();
        let fd = at::open_dir(&dir).unwrap();
        let at = |c| locate(c, (fd.as_fd(), &dir), HYBRID, CGROUP).unwrap();
        assert_eq!(at(Controller::Memory), Place::V2 { enabled: true });
        assert_eq!(at(Controller::Pids), Place::V2 { enabled: false });
        std::fs::write(dir.join("cgroup.controllers"), "io\n").unwrap();
        assert_eq!(
            at(Controller::Memory),
            Place::V1 {
                parent: PathBuf::from("/sys/fs/cgroup/memory/process_api/abc")
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
