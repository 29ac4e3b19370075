//! Which pid namespaces have no process left, for the stale sweep ([`super::stale`]): a cgroup
//! named in another pid namespace (`-ns<inode>` not ours) belongs to a supervisor whose pid
//! means nothing here, but once its namespace has no process at all — its init was killed,
//! and the kernel then kills every other process in it — nobody in it can ever use the cgroup
//! again.
//!
//! How: the inode of each process's `/proc/PID/ns/pid` (`pid:[INODE]`), read once per sweep,
//! and only when a name carries a namespace that is not ours: one `readlink` per process, the
//! scan stopping as soon as every namespace asked about was seen.
//!
//! When we cannot know, every namespace is taken as alive (nothing is removed):
//! - `/proc` does not list the whole machine: its pid 1 is not in the initial pid namespace
//!   (we run in a container, whose `/proc` does not list the processes of a sibling
//!   container at all);
//! - `/proc/1/ns/pid` cannot be read: we are not root (nor `CAP_SYS_PTRACE`), so the links of
//!   other users' processes would be refused (`EACCES`), or hidden entirely (`hidepid=`);
//! - any process's link cannot be read for another reason than its exit (`ENOENT`, `ESRCH`):
//!   its namespace might be the one asked about.

use std::collections::BTreeSet;
use std::io;

use super::name::pid_namespace_of;

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
    let init = pid_namespace_of("1")?;
    if init != INITIAL_PID_NAMESPACE {
        return Err(io::Error::other(format!(
            "/proc lists pid namespace {init}, not the initial one"
        )));
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
        match pid_namespace_of(pid) {
            Ok(ns) if wanted.contains(&ns) => {
                seen.insert(ns);
                if seen.len() == wanted.len() {
                    break;
                }
            }
            Ok(_) => {}
            // Exited since the listing: it is in no namespace any more.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(seen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::containment::name::own_pid_namespace;

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
}
