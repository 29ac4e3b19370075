//! Unit tests of the exit paths: who reaps, and when.

use super::waits::joined;
use super::*;
use std::os::fd::BorrowedFd;
use std::os::unix::process::CommandExt;

fn proc_state(pid: u32) -> Option<char> {
    group::stat(pid).map(|s| s.state)
}

#[test]
fn a_lone_child_is_reaped_by_the_check_that_sees_it_exit_a_group_leader_stays_a_zombie() {
    for portable in [false, true] {
        for leads_group in [false, true] {
            let case = format!("portable={portable} leads_group={leads_group}");
            let mut cmd = std::process::Command::new("true");
            if leads_group {
                cmd.process_group(0);
            }
            let spawn_began = Instant::now();
            let child = cmd.spawn().expect("spawning true");
            let pid = child.id();
            let mut process =
                Process::adopt(pid, None, spawn_began, leads_group, portable).expect(&case);
            let deadline = Instant::now() + Duration::from_secs(10);
            while process.check_exit().expect(&case).is_none() {
                assert!(Instant::now() < deadline, "{case}: `true` did not exit");
                process.wait_until(deadline, None).expect(&case);
            }
            let state = proc_state(pid);
            if leads_group {
                assert_eq!(state, Some('Z'), "{case}: the leader must stay a zombie");
                assert!(process.pidfd().is_some() || portable, "{case}");
            } else {
                assert_eq!(state, None, "{case}: seen exited but not reaped");
            }
            assert!(process.reap().expect(&case).is_some_and(|s| s.success()));
            assert_eq!(proc_state(pid), None, "{case}: not reaped after reap()");
            drop(child); // std's Child does not wait on drop: nothing reaps twice.
        }
    }
}

/// `joined` keeps the order (extra fds first: their indices are the caller's) for every
/// split, on the stack or not.
#[cfg(target_os = "linux")]
#[test]
fn joined_lists_a_then_b_whatever_their_lengths() {
    use std::os::fd::{AsFd, AsRawFd};
    let pairs: Vec<_> = (0..3)
        .map(|_| std::os::unix::net::UnixStream::pair().unwrap())
        .collect();
    let fds: Vec<BorrowedFd<'_>> = pairs
        .iter()
        .flat_map(|(a, b)| [a.as_fd(), b.as_fd()])
        .collect();
    let raw = |fds: &[BorrowedFd<'_>]| fds.iter().map(|f| f.as_raw_fd()).collect::<Vec<_>>();
    for total in 0..=fds.len() {
        for split in 0..=total {
            let (a, b) = fds[..total].split_at(split);
            assert_eq!(
                joined(a, b, raw),
                raw(&fds[..total]),
                "{split}+{}",
                total - split
            );
        }
    }
}
