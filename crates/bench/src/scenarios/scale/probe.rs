//! What `scale`'s contained rows count in `/proc` and the cgroup tree: this process's threads,
//! fds and inotify instances, the cgroups it made and has not removed, and its live children.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::Result;

/// Threads of this process (`/proc/self/task`).
pub fn threads() -> Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// Open fds of this process, not counting the one `read_dir` holds on `/proc/self/fd` while
/// it lists it.
pub fn fds() -> Result<usize> {
    Ok(fd_targets()?.len())
}

/// inotify instances of this process: fds whose `/proc/self/fd` link reads
/// `anon_inode:inotify`.
pub fn inotify_instances() -> Result<usize> {
    Ok(fd_targets()?
        .iter()
        .filter(|t| t.as_os_str() == "anon_inode:inotify")
        .count())
}

/// The link target of each open fd (the listing's own fd is gone by the time its link would be
/// read, and is skipped).
fn fd_targets() -> Result<Vec<PathBuf>> {
    let numbers: Vec<String> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    Ok(numbers
        .iter()
        .filter_map(|n| std::fs::read_link(format!("/proc/self/fd/{n}")).ok())
        .collect())
}

/// Where `spawn()` makes a contained child's cgroup when no `cgroup_parent` is given: the
/// cgroup v2 directory this process runs in, from the `cgroup2` line of `/proc/self/mountinfo`
/// and the `0::` line of `/proc/self/cgroup` (never a fixed path: hybrid hosts mount it at
/// `/sys/fs/cgroup/unified`).
pub fn containment_parent() -> Result<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mount = info
        .lines()
        .find_map(|l| {
            let (before, after) = l.split_once(" - ")?;
            (after.split(' ').next()? == "cgroup2").then(|| before.split(' ').nth(4))?
        })
        .ok_or("no cgroup2 mount in /proc/self/mountinfo (containment needs cgroup v2)")?;
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")?;
    let own = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no 0:: line in /proc/self/cgroup (not in a cgroup v2)")?;
    Ok(Path::new(mount).join(own.trim_start_matches('/')))
}

/// The `childguard-<our pid>-*` cgroup directories in `parent`: made by this process and not
/// removed (other processes' are not ours to count).
pub fn our_cgroups(parent: &Path) -> Result<usize> {
    let prefix = format!("childguard-{}-", std::process::id());
    Ok(std::fs::read_dir(parent)
        .map_err(|e| format!("listing {}: {e}", parent.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .count())
}

/// A pidfd pinning `pid`, so that "is it still alive?" is asked of this process and never of
/// a later one that reuses its number.
pub fn pin(pid: u32) -> Result<OwnedFd> {
    let raw = rustix::process::Pid::from_raw(pid as i32).ok_or("pid 0")?;
    Ok(rustix::process::pidfd_open(
        raw,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// Whether the process behind `pin` has exited (a pidfd polls readable from its exit on).
pub fn exited(pin: &OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        match poll(&mut [PollFd::new(pin, PollFlags::IN)], Some(&zero)) {
            Err(rustix::io::Errno::INTR) => continue,
            other => return matches!(other, Ok(n) if n > 0),
        }
    }
}

/// Live children of this process (in `/proc`, parent us, state not `Z`/`X`).
pub fn live_children() -> Result<Vec<u32>> {
    let me = std::process::id();
    Ok(std::fs::read_dir("/proc")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(
            |&pid| matches!(crate::scenarios::contain::stat_of(pid), Some((s, ppid)) if ppid == me && s != 'Z' && s != 'X'),
        )
        .collect())
}
