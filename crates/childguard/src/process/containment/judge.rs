//! Who is dead: the `childguard-*` cgroups of a parent judged by their names — the supervisor's
//! pid, its start time and its pid namespace (see [`super::stale`] for the rules and the races
//! they close). Used by the v2 sweep ([`super::stale`]) and the v1 one
//! ([`super::limits::v1`]) alike.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use rustix::fs::{Dir, FileType};

use super::name::{own_pid_namespace, proc_stat, PREFIX};
use super::pidns;

/// The `childguard-*` directories in the directory open as `parent` whose supervisor is dead
/// (see the module docs), with who that was; also for the cgroup v1 hierarchies' sweep, which
/// judges alike.
pub(crate) fn stale_names(parent: BorrowedFd<'_>) -> Vec<(OsString, String)> {
    let Ok(mut entries) = Dir::read_from(parent) else {
        return Vec::new(); // the mkdir that follows reports what is wrong with the parent
    };
    // Every name first, then the judging (the races in the module docs).
    let mut found = Vec::new();
    while let Some(Ok(entry)) = entries.read() {
        // Directories (cgroupfs says; `openat(O_DIRECTORY | O_NOFOLLOW)` sorts out an entry
        // of a file system that does not): never a symlink.
        if !matches!(entry.file_type(), FileType::Directory | FileType::Unknown) {
            continue;
        }
        let name = entry.file_name().to_bytes();
        let Some(owner) = std::str::from_utf8(name).ok().and_then(parse_name) else {
            continue;
        };
        found.push((OsString::from_vec(name.to_vec()), owner));
    }
    let ours = own_pid_namespace();
    let foreign: BTreeSet<u64> = found
        .iter()
        .filter_map(|(_, owner)| owner.namespace)
        .filter(|&ns| Some(ns) != ours)
        .collect();
    let gone = pidns::gone(&foreign);
    found
        .into_iter()
        .filter(|(_, owner)| owner.is_dead(&gone))
        .map(|(name, owner)| (name, owner.describe()))
        .collect()
}

/// Who made a cgroup, as its name says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    pid: u32,
    /// Start time, in clock ticks since boot (new names).
    start: Option<u64>,
    /// Pid namespace inode (new names).
    namespace: Option<u64>,
}

/// `childguard-<pid>-<n>` or `childguard-<pid>-<n>-t<start>[-ns<inode>]`; anything else is
/// not ours.
fn parse_name(name: &str) -> Option<Owner> {
    let mut parts = name.strip_prefix(PREFIX)?.split('-');
    let pid: u32 = parts.next()?.parse().ok()?;
    parts.next()?.parse::<u64>().ok()?;
    let mut owner = Owner {
        pid,
        start: None,
        namespace: None,
    };
    for tag in parts {
        if let Some(ns) = tag.strip_prefix("ns") {
            owner.namespace = Some(ns.parse().ok()?);
        } else if let Some(start) = tag.strip_prefix('t') {
            owner.start = Some(start.parse().ok()?);
        } else {
            return None;
        }
    }
    (pid > 0).then_some(owner)
}

impl Owner {
    /// See the module docs: `false` whenever in doubt. `gone`: the pid namespaces known to
    /// have no process left.
    fn is_dead(&self, gone: &BTreeSet<u64>) -> bool {
        if self.pid == std::process::id() {
            return false;
        }
        if let Some(ns) = self.namespace {
            if own_pid_namespace() != Some(ns) {
                return gone.contains(&ns);
            }
        }
        match proc_stat(&self.pid.to_string()) {
            None => !Path::new(&format!("/proc/{}", self.pid)).exists(),
            Some((state, start)) => {
                state == 'Z' || state == 'X' || self.start.is_some_and(|s| s != start)
            }
        }
    }

    /// Who the dead supervisor was, for the notes.
    fn describe(&self) -> String {
        match self.namespace {
            Some(ns) if own_pid_namespace() != Some(ns) => format!(
                "dead supervisor {} of pid namespace {ns} (no process left in it)",
                self.pid
            ),
            _ => format!("dead supervisor {}", self.pid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::containment::name::own_tags;

    #[test]
    fn names_old_and_new_parse_and_others_do_not() {
        let old = parse_name("childguard-42-7").unwrap();
        assert_eq!((old.pid, old.start, old.namespace), (42, None, None));
        let new = parse_name("childguard-42-7-t991-ns4026531836").unwrap();
        assert_eq!(
            (new.pid, new.start, new.namespace),
            (42, Some(991), Some(4026531836))
        );
        for other in [
            "childguard-42",
            "childguard-x-1",
            "childguard-0-1",
            "childguard-42-1-q9",
            "childguard-42-1-t",
            "cg-test-42-1",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn our_own_name_parses_back_to_us_and_we_are_alive() {
        let name = format!("{PREFIX}{}-0{}", std::process::id(), own_tags());
        let owner = parse_name(&name).unwrap();
        assert!(owner.start.is_some() && owner.namespace.is_some(), "{name}");
        let none = BTreeSet::new();
        assert!(!owner.is_dead(&none));
        // Another process with our start time but a different pid is judged by its pid.
        let reused = Owner {
            pid: 1,
            start: Some(u64::MAX),
            namespace: owner.namespace,
        };
        assert!(
            reused.is_dead(&none),
            "pid 1 with a start time it does not have"
        );
        // Another pid namespace: judged by the namespace alone, never by the pid.
        let other_ns = Owner {
            namespace: Some(1),
            ..reused
        };
        assert!(
            !other_ns.is_dead(&none),
            "a namespace not known gone is alive"
        );
        assert!(other_ns.is_dead(&BTreeSet::from([1])), "a gone namespace");
        let alive_pid = Owner {
            start: Some(proc_stat("1").unwrap().1),
            ..other_ns
        };
        assert!(
            alive_pid.is_dead(&BTreeSet::from([1])),
            "its pid means nothing here"
        );
        // Our own namespace is judged by pid, even if it were (wrongly) said gone.
        let live = Owner {
            start: Some(proc_stat("1").unwrap().1),
            ..reused
        };
        assert!(!live.is_dead(&BTreeSet::from([owner.namespace.unwrap()])));
    }
}
