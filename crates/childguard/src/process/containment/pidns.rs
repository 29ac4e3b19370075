//! Which pid namespaces have no process left, for the stale sweep ([`super::stale`]): a cgroup
//! named in another pid namespace (`-ns<inode>` not ours) belongs to a supervisor whose pid
//! means nothing here, but once its namespace has no process at all — its init was killed,
//! and the kernel then kills every other process in it — nobody in it can ever use the cgroup
//! again.
//!
//! How: the inode of each process's `/proc/PID/ns/pid` (`pid:[INODE]`), read once per sweep,
//! and only when a name carries a namespace that is not ours: one `readlink` per process, the
//! scan stopping as soon as every namespace asked about was seen. A link we may not read
//! (another user's process when we are not root; here, even as root, pid 1 of a sandbox that
//! an LSM shields) is answered by the process's `NSpid:` line in `/proc/PID/status`, which
//! anyone may read: a single pid there means the process is in `/proc`'s own namespace, the
//! initial one, so in none we are asking about.
//!
//! When we cannot know, every namespace is taken as alive (nothing is removed):
//! - we are not in the initial pid namespace (inode `PROC_PID_INIT_INO`, 0xEFFFFFFC, fixed by
//!   the kernel since Linux 3.8), the only one whose `/proc` lists every process of the
//!   machine: in a container, the processes of a sibling container are not listed at all
//!   (our `/proc/self` resolving shows that `/proc` is of our namespace or an ancestor, and the
//!   initial one has none);
//! - `/proc` is mounted with `hidepid=` (other users' processes are hidden or closed to us);
//! - a process's link cannot be read, and its `NSpid:` says it is in another namespace
//!   (which may be the one asked about), or cannot be read either — for any reason but the
//!   process's exit (`ENOENT`, `ESRCH`).

use std::collections::BTreeSet;
use std::io;

use super::mount::mounts;
use super::name::{own_pid_namespace, pid_namespace_of};

/// The inode of the initial pid namespace (`PROC_PID_INIT_INO`, 0xEFFFFFFC, fixed by the
/// kernel since Linux 3.8): the one whose `/proc` lists every process of the machine.
const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// The namespaces among `wanted` that no process is in; empty when in doubt (module docs).
pub(crate) fn gone(wanted: &BTreeSet<u64>) -> BTreeSet<u64> {
    if wanted.is_empty() {
        return BTreeSet::new();
    }
    match scan(wanted) {
        Ok(seen) => wanted.difference(&seen).copied().collect(),
        Err(_) => BTreeSet::new(),
    }
}

/// The namespaces among `wanted` that some process is in (all of them may stop the scan).
/// An error: we cannot know (module docs).
fn scan(wanted: &BTreeSet<u64>) -> io::Result<BTreeSet<u64>> {
    if own_pid_namespace() != Some(INITIAL_PID_NAMESPACE) {
        return Err(io::Error::other(
            "not in the initial pid namespace: /proc does not list every process",
        ));
    }
    let mountinfo = crate::base::kernel_text::read("/proc/self/mountinfo")?;
    if hides_processes(&mountinfo) {
        return Err(io::Error::other("/proc is mounted with hidepid="));
    }
    let mut seen = BTreeSet::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let ns = match pid_namespace_of(pid) {
            Ok(ns) => ns,
            Err(e) if exited(&e) => continue,
            Err(e) => match nspid_levels(pid) {
                Ok(1) => continue, // in the initial namespace
                Err(e) if exited(&e) => continue,
                _ => return Err(e),
            },
        };
        if wanted.contains(&ns) {
            seen.insert(ns);
            if seen.len() == wanted.len() {
                break;
            }
        }
    }
    Ok(seen)
}

/// The error of a process that exited since `/proc` was listed.
fn exited(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// How many pid namespaces process `pid` is seen in, from `/proc`'s down to its own (the
/// fields of the `NSpid:` line of `/proc/PID/status`, Linux 4.1).
fn nspid_levels(pid: &str) -> io::Result<usize> {
    let status = crate::base::kernel_text::read(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|pids| pids.split_whitespace().count())
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/proc/{pid}/status has no NSpid: line"),
            )
        })
}

/// Whether the `/proc` we read (the last mount on `/proc`) hides processes: `hidepid=` other
/// than `0`/`off`. No `/proc` mount found: it might.
fn hides_processes(mountinfo: &str) -> bool {
    let Some(proc) = mounts(mountinfo)
        .filter(|m| m.fstype == "proc" && m.mount_point() == "/proc")
        .last()
    else {
        return true;
    };
    proc.super_options
        .split(',')
        .filter_map(|o| o.strip_prefix("hidepid="))
        .any(|v| v != "0" && v != "off")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_namespace_is_never_gone_and_nothing_is_scanned_for_nothing() {
        let ours = own_pid_namespace().expect("our /proc/self/ns/pid");
        // Inode 1 is never a namespace's (nsfs inodes start at 0xF0000000): gone, when this
        // process can know (root in the initial pid namespace), else nothing is.
        let asked = BTreeSet::from([ours, 1]);
        let gone = gone(&asked);
        assert!(!gone.contains(&ours), "{gone:?}");
        match scan(&asked) {
            Ok(_) => assert_eq!(gone, BTreeSet::from([1])),
            Err(_) => assert!(gone.is_empty(), "{gone:?}"),
        }
        assert!(super::gone(&BTreeSet::new()).is_empty());
    }

    #[test]
    fn hidepid_is_found_on_the_proc_mount_that_covers_the_others() {
        let plain = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n";
        assert!(!hides_processes(plain));
        for opt in [
            "hidepid=invisible",
            "hidepid=2",
            "hidepid=noaccess",
            "hidepid=1",
        ] {
            let hidden = format!("{plain}90 1 0:50 / /proc rw - proc proc rw,{opt},gid=4\n");
            assert!(hides_processes(&hidden), "{opt}");
        }
        let off = "22 1 0:21 / /proc rw - proc proc rw,hidepid=off\n";
        assert!(!hides_processes(off));
        let elsewhere = "22 1 0:21 / /mnt/proc rw - proc proc rw\n";
        assert!(hides_processes(elsewhere), "no /proc mount: it might hide");
    }

    #[test]
    fn every_process_is_seen_in_one_namespace_or_more() {
        assert_eq!(
            nspid_levels("self").unwrap(),
            1,
            "the tests run in the initial one"
        );
        assert!(exited(&nspid_levels("999999999").unwrap_err()));
    }
}
