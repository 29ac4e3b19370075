//! Reaping every zombie child of `init` except CMD, and finding the processes left at the stop.
//!
//! CMD belongs to the library: its [`ChildHandle`](childguard::ChildHandle) reaps it through
//! its pidfd, and that status is what `init` exits with. tini reaps with `waitpid(-1)`; here
//! that would race the library for CMD's status (a `waitpid(-1)` that happens to pick CMD
//! steals it, and the handle then reports "reaped by someone else"). So the other children are
//! reaped by pid: listed from `/proc/self/task/*/children` — every thread's file, since a
//! re-parented orphan is adopted by one of our threads, not necessarily the main one — and each
//! one that is not CMD gets `waitpid(pid, WNOHANG)`. Where the kernel has no `children` files
//! (`CONFIG_PROC_CHILDREN` off) `/proc/*/stat` is scanned for our pid as the parent.
//!
//! Races, and why they are harmless:
//! - a child listed, then reaped by nobody else: only we reap by pid, and a pid cannot be
//!   reused while its zombie is unreaped, so `waitpid(pid)` reaps exactly the process listed;
//! - a child born after the listing: its `SIGCHLD` wakes the main loop, which lists again;
//! - CMD's pid is known only once `spawn` returned: `init` reaps nothing before that (std
//!   itself `waitpid`s a child whose exec failed, and must find it).

use std::collections::BTreeSet;
use std::fs;

use rustix::process::{waitpid, Pid, WaitOptions};

/// Our children now (alive or zombie), from every thread's `children` file, else from a scan
/// of `/proc` — unless we have none at all, which one `waitid` tells (the usual case once CMD
/// is reaped: no file is read at the stop).
pub fn children() -> BTreeSet<u32> {
    if has_no_children() {
        return BTreeSet::new();
    }
    children_of_self().unwrap_or_else(|| scan_children(std::process::id()))
}

/// Whether this process has no child at all, running or not: `waitid(P_ALL, WNOHANG |
/// WNOWAIT)` fails with `ECHILD` (it looks at the children of every thread of ours, and reaps
/// nothing, so the library's claim on CMD's status is untouched). A child born just after is
/// the race the module comment names: its `SIGCHLD` wakes the main loop.
fn has_no_children() -> bool {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    let any_change = WaitIdOptions::EXITED | WaitIdOptions::STOPPED | WaitIdOptions::CONTINUED;
    matches!(
        waitid(
            WaitId::All,
            any_change | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT
        ),
        Err(rustix::io::Errno::CHILD)
    )
}

/// `/proc/self/task/*/children`; `None` when the kernel has no such files.
fn children_of_self() -> Option<BTreeSet<u32>> {
    let mut found = BTreeSet::new();
    let mut any = false;
    for task in fs::read_dir("/proc/self/task").ok()?.flatten() {
        let Ok(text) = childguard::read_kernel_text(task.path().join("children")) else {
            continue;
        };
        any = true;
        found.extend(
            text.split_ascii_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    any.then_some(found)
}

/// Every process in `/proc` whose parent is `parent`.
fn scan_children(parent: u32) -> BTreeSet<u32> {
    all_pids()
        .into_iter()
        .filter(|&pid| stat(pid).is_some_and(|s| s.ppid == parent))
        .collect()
}

/// Every pid in `/proc` (this PID namespace's, with `--mount-proc` or in a container).
pub fn all_pids() -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The fields of `/proc/PID/stat` used here.
#[derive(Debug, Clone)]
pub struct Stat {
    /// The command name (`comm`, at most 15 bytes).
    pub comm: String,
    /// The state letter (`Z`: zombie).
    pub state: char,
    /// The parent pid.
    pub ppid: u32,
}

/// `/proc/PID/stat`, if the process exists.
pub fn stat(pid: u32) -> Option<Stat> {
    let text = childguard::read_kernel_text(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let mut rest = text.get(close + 2..)?.split(' ');
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some(Stat { comm, state, ppid })
}

/// Reaps every zombie child except `cmd` (`waitpid(pid, WNOHANG)` each); returns the pids
/// reaped. Children still running are left alone.
pub fn reap_others(cmd: Option<u32>) -> Vec<u32> {
    let mut reaped = Vec::new();
    // Children first, then the ready thread's: a probe forked after the first read is not in
    // it; one in it was forked before, so the second read lists it until its own handle reaps
    // it (see `ready::PROBE_THREAD`).
    let kids = children();
    let probes = probe_children();
    for pid in kids {
        if Some(pid) == cmd || probes.contains(&pid) {
            continue;
        }
        let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
            continue;
        };
        // Ok(None): still running. An error (ECHILD: not ours any more) is nothing to do.
        if let Ok(Some(_)) = waitpid(Some(raw), WaitOptions::NOHANG) {
            reaped.push(pid);
        }
    }
    reaped
}

/// The children of the `--ready` thread: its `exec:` probes, which their handles reap.
fn probe_children() -> BTreeSet<u32> {
    let tid = super::ready::PROBE_THREAD.load(std::sync::atomic::Ordering::SeqCst);
    if tid == 0 {
        return BTreeSet::new();
    }
    childguard::read_kernel_text(format!("/proc/self/task/{tid}/children"))
        .map(|text| {
            text.split_ascii_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Our descendants now, children first (a walk of the `children` files, else of `/proc`).
pub fn descendants() -> Vec<u32> {
    let me = std::process::id();
    // Asked once, and only when a child of ours is found: at an ordinary stop (CMD reaped,
    // nothing left) [`children`] answers from one `waitid` and no `/proc` file is read.
    let mut by_children = None;
    let mut found = Vec::new();
    let mut frontier = vec![me];
    let mut seen = BTreeSet::new();
    while let Some(parent) = frontier.pop() {
        let kids = if parent == me {
            children()
        } else if *by_children
            .get_or_insert_with(|| std::path::Path::new("/proc/thread-self/children").exists())
        {
            crate::procs::children_of(parent).into_iter().collect()
        } else {
            scan_children(parent)
        };
        for pid in kids {
            if seen.insert(pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::sync::{Mutex, MutexGuard};

    /// Held by every test here that has children. Race avoided: the tests of this binary run
    /// on threads of one process, and `reap_others` reaps every child of the process but the
    /// one excluded — another test's `true` too, which that test then lists no more and whose
    /// `wait` fails with `ECHILD` (seen once in a flake hunt).
    static CHILDREN: Mutex<()> = Mutex::new(());

    fn own_the_children() -> MutexGuard<'static, ()> {
        CHILDREN
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[test]
    fn reaps_a_zombie_child_but_not_the_excluded_one() {
        let _children = own_the_children();
        let mut kept = Command::new("true").spawn().unwrap();
        let other = Command::new("true").spawn().unwrap();
        let (kept_pid, other_pid) = (kept.id(), other.id());
        // Both become zombies; wait on the condition, not a clock.
        let zombie = |pid| stat(pid).is_some_and(|s| s.state == 'Z');
        let start = std::time::Instant::now();
        while !(zombie(kept_pid) && zombie(other_pid)) {
            assert!(start.elapsed().as_secs() < 30, "children never exited");
            std::thread::yield_now();
        }
        assert!(children().contains(&kept_pid));
        let reaped = reap_others(Some(kept_pid));
        assert!(reaped.contains(&other_pid), "{reaped:?}");
        assert!(!reaped.contains(&kept_pid));
        assert!(stat(other_pid).is_none_or(|s| s.ppid != std::process::id()));
        // The excluded one is still ours to reap.
        assert!(kept.wait().unwrap().success());
        std::mem::forget(other);
    }

    #[test]
    fn a_child_is_listed_until_reaped_and_none_after() {
        let _children = own_the_children();
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Running or a zombie, it is a child: listed, and `waitid` does not answer ECHILD.
        assert!(!has_no_children());
        assert!(children().contains(&pid));
        child.wait().unwrap();
        // Other tests of this binary may have children of their own meanwhile (ones that do
        // not reap others'): only ours is asserted gone.
        assert!(!children().contains(&pid));
    }

    #[test]
    fn stat_reads_our_own_line() {
        let me = stat(std::process::id()).unwrap();
        assert_ne!(me.state, 'Z');
        assert!(!me.comm.is_empty());
    }
}
