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
//! Never touched: our own pid's directories; names recorded in another pid namespace (its pid
//! means nothing here); names that do not parse; and everything outside the parent we use.
//!
//! Race left (pid namespaces, old names only): an old-style name made by a supervisor in
//! another pid namespace sharing this parent is judged by a pid of *ours*; if no process of
//! ours has it, a live supervisor's cgroup is taken. New names carry the namespace.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::create::{put_back, Cgroup};
use super::name::{own_pid_namespace, proc_stat, PREFIX};

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
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new(); // the mkdir that follows reports what is wrong with the parent
    };
    let mut stale = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name.to_str().and_then(parse_name) else {
            continue;
        };
        if !entry.file_type().is_ok_and(|t| t.is_dir()) || !owner.is_dead() {
            continue;
        }
        stale.push((name, owner.pid));
    }
    let mut notes = Vec::new();
    let mut opened = Vec::new();
    for (name, pid) in stale {
        let dir = parent.join(&name);
        let path = format!("{}/{}", hierarchy.trim_end_matches('/'), lossy(&name));
        match Cgroup::open_stale(&dir, path) {
            Ok(cgroup) => {
                let killed = super::kill::kill_all(&cgroup);
                opened.push((cgroup, pid, killed));
            }
            // Race: its guardian, or another process's sweep, removed it first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => notes.push(format!(
                "stale cgroup {} of dead supervisor {pid} left: {e}",
                dir.display()
            )),
        }
    }
    let deadline = Instant::now() + EMPTY_WAIT;
    for (mut cgroup, pid, killed) in opened {
        let dir = cgroup.dir().display().to_string();
        let emptied = wait_empty(&cgroup, deadline);
        let removed = emptied.and_then(|()| cgroup.remove());
        notes.push(match (killed, removed) {
            (Ok(n), Ok(())) => format!(
                "removed stale cgroup {dir} of dead supervisor {pid} (killed {n} process(es) in it)"
            ),
            (Err(e), Ok(())) => {
                format!("removed stale cgroup {dir} of dead supervisor {pid} (kill: {e})")
            }
            (_, Err(e)) => format!("stale cgroup {dir} of dead supervisor {pid} left: {e}"),
        });
    }
    notes
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
    /// See the module docs: `false` whenever in doubt.
    fn is_dead(&self) -> bool {
        if self.pid == std::process::id() {
            return false;
        }
        if let Some(ns) = self.namespace {
            if own_pid_namespace() != Some(ns) {
                return false;
            }
        }
        match proc_stat(&self.pid.to_string()) {
            None => !Path::new(&format!("/proc/{}", self.pid)).exists(),
            Some((state, start)) => {
                state == 'Z' || state == 'X' || self.start.is_some_and(|s| s != start)
            }
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
        assert!(!owner.is_dead());
        // Another process with our start time but a different pid is judged by its pid.
        let reused = Owner {
            pid: 1,
            start: Some(u64::MAX),
            namespace: owner.namespace,
        };
        assert!(reused.is_dead(), "pid 1 with a start time it does not have");
        let other_ns = Owner {
            namespace: Some(1),
            ..reused
        };
        assert!(!other_ns.is_dead(), "another pid namespace: never judged");
    }

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        let stat = "77 (a) b) c) S 1 77 77 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 9 9";
        assert_eq!(parse_stat(stat), Some(('S', 12345)));
        assert_eq!(parse_stat("77 (x) S 1"), None);
    }
}
