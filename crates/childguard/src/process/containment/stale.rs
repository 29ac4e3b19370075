//! Cgroups left by supervisors that died: found, killed and removed on first use of a parent.
//!
//! A supervisor that crashed without [`exit_with_parent`](crate::Builder::exit_with_parent)
//! (so without a guardian) leaves its `childguard-<pid>-…` cgroups behind, with whatever was
//! still running in them. Nobody else would ever collect them, so the first time a process
//! makes a cgroup under a given parent, it looks at that parent's `childguard-*` directories
//! first and takes those whose supervisor is dead: `cgroup.kill` (or the freeze fallback of
//! [`super::kill`]), a bounded wait for `populated 0`, then the bottom-up removal of
//! [`super::trim`]. What was done is said in a note of the first close report of a contained
//! child ([`CloseReport::notes`](crate::CloseReport::notes)).
//!
//! Who is dead: the name records the supervisor's pid and, in names made since this sweep
//! exists, its start time (`/proc/PID/stat` field 22, clock ticks since boot) and its pid
//! namespace (`childguard-<pid>-<n>-t<start>-ns<inode>`). A supervisor is dead when no process
//! has its pid, the process that has it is a zombie, or its start time differs from the one
//! recorded (the pid was reused). Older names (`childguard-<pid>-<n>`) are judged by the pid
//! alone, so a reused pid keeps one alive (the safe side).
//!
//! A name recorded in another pid namespace is not judged by its pid (it means nothing here)
//! but by its namespace: the supervisor is dead once no process on the machine is in that
//! namespace any more ([`super::pidns`]) — as when `childguard init`, PID 1 of a container,
//! was SIGKILLed: the kernel kills every process of the namespace with it, and the cgroup it
//! made for CMD stays in the host's hierarchy. Such a cgroup is taken like any other stale
//! one (a member that is somehow still there — a process moved in from outside the
//! namespace — is killed). The scan costs a `readlink` of `/proc/PID/ns/pid` per process, so
//! it is done once per sweep, and only when a name carries a namespace that is not ours.
//! When it cannot know — a process whose namespace it may not read (another user's, when we
//! are not root: `EACCES`) and which is not in the initial namespace, or a `/proc` that does
//! not list the whole machine (we run in a container; `hidepid=`) — every namespace counts
//! as alive: nothing is removed on a doubt. So the cgroup a containerised `childguard init`
//! left is collected by the *host's* next contained spawn under that parent, never by a
//! sweep inside another container.
//!
//! Never touched: our own pid's directories; names that do not parse; and everything outside
//! the parent we use.
//!
//! Races, each on the safe side or closed:
//! - A pid namespace being made now: its cgroup is named by a process *in* it, so its first
//!   process (its init) exists before the name does, and lives as long as the namespace has
//!   processes. The names are all listed before `/proc` is scanned, and a process that exists
//!   for the whole scan is always listed by `/proc`, so a namespace alive when its name was
//!   read is seen. (A name listed *after* the scan could belong to a namespace born after it,
//!   which is why the judging waits for the whole listing.)
//! - A namespace that outlives its processes (a bind mount or an open fd of its `ns/pid`):
//!   no process can enter it again (`fork` into it fails once its init is gone), so its
//!   cgroup is rightly taken.
//! - Inode reuse: once a namespace is freed, a new one may get its inode; its cgroup then
//!   looks alive and stays (the safe side), until that new namespace is gone too.
//! - A zombie in the namespace keeps it alive until reaped (the safe side; the next process's
//!   sweep takes the cgroup).
//! - Old names and pid namespaces: an old-style name made by a supervisor in another pid
//!   namespace sharing this parent is judged by a pid of *ours*; if no process of ours has
//!   it, a live supervisor's cgroup is taken. New names carry the namespace.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::create::{put_back, Cgroup};
use super::name::{own_pid_namespace, proc_stat, PREFIX};
use super::pidns;

/// How long a sweep waits for the killed members of stale cgroups to exit (all together):
/// only a member stuck in the kernel (D state) makes it wait that long, once per parent.
const EMPTY_WAIT: Duration = Duration::from_secs(10);

/// The parents swept by this process (each once, whatever the outcome).
static SWEPT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// On first use of `parent` in this process: kills and removes the stale cgroups in it (see
/// the module docs). `hierarchy` is `parent`'s path as `/proc/PID/cgroup` names it. Never
/// fails: what could not be done is noted.
pub(crate) fn sweep_once(parent: &Path, hierarchy: &str) {
    let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
    if swept.iter().any(|p| p == parent) {
        return;
    }
    swept.push(parent.to_path_buf());
    // Held while sweeping: a second thread's first spawn under `parent` waits, so it never
    // makes its cgroup beside one that is being killed.
    put_back(sweep(parent, hierarchy));
}

fn sweep(parent: &Path, hierarchy: &str) -> Vec<String> {
    let stale = stale_names(parent);
    let mut notes = Vec::new();
    let mut opened = Vec::new();
    for (name, who) in stale {
        let dir = parent.join(&name);
        let path = format!("{}/{}", hierarchy.trim_end_matches('/'), lossy(&name));
        match Cgroup::open_stale(&dir, path) {
            Ok(cgroup) => {
                let killed = super::kill::kill_all(&cgroup);
                opened.push((cgroup, who, killed));
            }
            // Race: its guardian, or another process's sweep, removed it first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => notes.push(format!("stale cgroup {} of {who} left: {e}", dir.display())),
        }
    }
    let deadline = Instant::now() + EMPTY_WAIT;
    for (mut cgroup, who, killed) in opened {
        let dir = cgroup.dir().display().to_string();
        let emptied = wait_empty(&cgroup, deadline);
        let removed = emptied.and_then(|()| cgroup.remove());
        notes.push(match (killed, removed) {
            (Ok(n), Ok(())) => {
                format!("removed stale cgroup {dir} of {who} (killed {n} process(es) in it)")
            }
            (Err(e), Ok(())) => {
                format!("removed stale cgroup {dir} of {who} (kill: {e})")
            }
            (_, Err(e)) => format!("stale cgroup {dir} of {who} left: {e}"),
        });
    }
    notes
}

/// The `childguard-*` directories in `parent` whose supervisor is dead (see the module docs),
/// with who that was; also for the cgroup v1 hierarchies' sweep, which judges alike.
pub(crate) fn stale_names(parent: &Path) -> Vec<(OsString, String)> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new(); // the mkdir that follows reports what is wrong with the parent
    };
    // Every name first, then the judging (the races in the module docs).
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name.to_str().and_then(parse_name) else {
            continue;
        };
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.push((name, owner));
        }
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

/// Waits on the cgroup's `cgroup.events` watch until it is empty, at most until `deadline`.
fn wait_empty(cgroup: &Cgroup, deadline: Instant) -> io::Result<()> {
    loop {
        if !cgroup.watch().read()?.populated {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{}: still has processes {EMPTY_WAIT:?} after cgroup.kill",
                    cgroup.dir().display()
                ),
            ));
        }
        cgroup.watch().wait(deadline)?;
    }
}

fn lossy(name: &OsStr) -> String {
    name.to_string_lossy().into_owned()
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
    use crate::process::containment::name::{own_tags, parse_stat};

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

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        let stat = "77 (a) b) c) S 1 77 77 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 9 9";
        assert_eq!(parse_stat(stat), Some(('S', 12345)));
        assert_eq!(parse_stat("77 (x) S 1"), None);
    }
}
