//! The server's process tree, snapshotted right before a close, and what is left of it a
//! fixed time after the close returned.
//!
//! The snapshot walks the root's descendants through the kernel's `children` files
//! (`childguard_cli::procs`, the one reader the CLI, the tests and the bench share) and adds
//! the pids the stubborn fixture wrote to its pidfile (its `setsid` worker, should it have been
//! re-parented already). Each process is kept with its start time (`/proc/PID/stat` field 22),
//! so a recycled pid is never counted, and with a pidfd, so the clean-up kills the very process
//! seen, never a newcomer with its number. "Alive" means: the same start time, and a state
//! other than `Z` (zombie) or `X` (dead): PID 1 here reaps orphans late.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

use crate::Result;

/// One process of the tree.
#[derive(Debug)]
struct Member {
    pid: u32,
    start: u64,
    /// `None` if the process went between the walk and `pidfd_open` (then it is not alive).
    pidfd: Option<OwnedFd>,
}

/// The processes of a server's tree at one moment.
#[derive(Debug)]
pub struct Tree {
    members: Vec<Member>,
}

impl Tree {
    /// `root` (if `with_root`), every descendant of `root` now, and `extra` pids (the stubborn
    /// fixture's pidfile), each alive and once.
    pub fn snapshot(root: u32, with_root: bool, extra: &[u32]) -> Tree {
        let mut pids = Vec::new();
        if with_root {
            pids.push(root);
        }
        pids.extend(childguard_cli::procs::descendants_of(root));
        pids.extend(extra.iter().copied());
        pids.sort_unstable();
        pids.dedup();
        let members = pids
            .into_iter()
            .filter_map(|pid| {
                let (state, start) = stat(pid)?;
                if is_dead_state(state) {
                    return None;
                }
                let pidfd = Pid::from_raw(i32::try_from(pid).ok()?)
                    .and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
                Some(Member { pid, start, pidfd })
            })
            .collect();
        Tree { members }
    }

    /// How many processes the snapshot holds.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// The members still alive (not zombies), by pid.
    pub fn alive(&self) -> Vec<u32> {
        self.members
            .iter()
            .filter(|m| m.is_alive())
            .map(|m| m.pid)
            .collect()
    }

    /// `SIGKILL`s the members still alive (through their pidfds) and waits until none is,
    /// so that nothing of one repetition runs into the next.
    pub fn kill_rest(&self) -> Result<()> {
        for member in self.members.iter().filter(|m| m.is_alive()) {
            if let Some(fd) = &member.pidfd {
                let _ = pidfd_send_signal(fd, Signal::KILL);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let alive = self.alive();
            if alive.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("stdio: {alive:?} still alive 10 s after SIGKILL").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Member {
    fn is_alive(&self) -> bool {
        stat(self.pid).is_some_and(|(state, start)| start == self.start && !is_dead_state(state))
    }
}

fn is_dead_state(state: char) -> bool {
    state == 'Z' || state == 'X'
}

/// `(state, start time in clock ticks since boot)` from `/proc/PID/stat`; `None` if gone.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After "PID (COMM) ": field 3 (state) is the first, field 22 (starttime) the 20th.
    let mut fields = text.get(text.rfind(')')? + 2..)?.split(' ');
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Kills whatever runs under `root` now (not `root`): the clean-up of a repetition that
/// failed half-way, before its snapshot was taken.
pub fn kill_descendants(root: u32) {
    let _ = Tree::snapshot(root, false, &[]).kill_rest();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_child_is_alive_then_left_then_killed() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let me = child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        let tree = loop {
            let tree = Tree::snapshot(me, true, &[]);
            if tree.len() == 2 || Instant::now() > deadline {
                break tree;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(tree.len(), 2, "sh and its sleep");
        assert_eq!(tree.alive().len(), 2);
        tree.kill_rest().unwrap();
        assert!(tree.alive().is_empty());
        // sh is our zombie until reaped: not alive.
        child.wait().unwrap();
    }
}
