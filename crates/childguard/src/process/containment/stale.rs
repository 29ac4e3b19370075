//! Cgroups left by supervisors that died: found, killed and removed on first use of a parent.
//!
//! A supervisor that crashed without [`exit_with_parent`](crate::Builder::exit_with_parent)
//! (so without a guardian) leaves its `childguard-<pid>-…` cgroups behind, with whatever was
//! still running in them. Nobody else would ever collect them, so the first time a process
//! makes a cgroup under a given parent, once the child it made it for is born
//! ([`super::after_birth`]: the sweep overlaps that child's exec instead of delaying it), it
//! looks at that parent's `childguard-*` directories and takes those whose supervisor is dead: `cgroup.kill` (or the freeze fallback of
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

use std::ffi::OsStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::create::Cgroup;
use super::judge::stale_names;
use super::notes::put_back;

/// How long a sweep waits for the killed members of stale cgroups to exit (all together):
/// only a member stuck in the kernel (D state) makes it wait that long, once per parent.
const EMPTY_WAIT: Duration = Duration::from_secs(10);

/// The parents swept by this process (each once, whatever the outcome).
static SWEPT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// On first use of `parent` in this process: kills and removes the stale cgroups in it (see
/// the module docs). `parent_fd` is the parent directory, open: it is listed, and each stale
/// cgroup opened and removed, relative to it; `parent` is its path (for messages, and which
/// parents were swept). `hierarchy` is `parent`'s path as `/proc/PID/cgroup` names it. Never
/// fails: what could not be done is noted.
pub(crate) fn sweep_once(parent_fd: BorrowedFd<'_>, parent: &Path, hierarchy: &str) {
    let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
    if swept.iter().any(|p| p == parent) {
        return;
    }
    swept.push(parent.to_path_buf());
    // Held while sweeping: a second thread's first spawn under `parent` waits here, after its
    // own child's birth, so no spawn under `parent` returns before the sweep is done (and its
    // notes are pending for a close report). Our own cgroups are never taken: their names
    // carry our pid and start time.
    put_back(sweep(parent_fd, parent, hierarchy));
}

fn sweep(parent_fd: BorrowedFd<'_>, parent: &Path, hierarchy: &str) -> Vec<String> {
    let stale = stale_names(parent_fd);
    let mut notes = Vec::new();
    let mut opened = Vec::new();
    for (name, who) in stale {
        let dir = parent.join(&name);
        let path = format!("{}/{}", hierarchy.trim_end_matches('/'), lossy(&name));
        match Cgroup::open_stale(parent_fd, &name, dir.clone(), path) {
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

#[cfg(test)]
mod tests {
    use crate::process::containment::name::parse_stat;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        let stat = "77 (a) b) c) S 1 77 77 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 9 9";
        assert_eq!(parse_stat(stat), Some(('S', 12345)));
        assert_eq!(parse_stat("77 (x) S 1"), None);
    }
}
