//! The subreaper backend: the tree init is a plain child of ours with
//! `prctl(PR_SET_CHILD_SUBREAPER)` (Linux ≥ 3.4, no privilege), so every orphan of the server's
//! tree — a `setsid`'d worker, a double-forked daemon — is re-parented to it instead of to PID
//! 1, and stays where it can be found (`/proc/thread-self/children`) and killed. tini's `-s`
//! and container shims use the same call.
//!
//! What it cannot do: if the tree init itself is `SIGKILL`ed, its children re-parent to the
//! next subreaper or PID 1 and the tree escapes (a PID namespace has no such hole: the kernel
//! kills it when its init dies). childguard `SIGKILL`ed is not that case: the tree init
//! watches our pidfd (`exit_with_parent`) and ends the tree itself.
//!
//! The tree's end, here in the tree init (async-signal-safe, no allocation): `SIGKILL` every
//! child, reap one, read the children again — each death re-parents its own children to us —
//! until `waitpid` says there are none. A child cannot be recycled before we reap it, so the
//! pids read are ours to kill.

use std::os::fd::AsFd;

use rustix::process::Pid;

/// Calls `each` with the pid of every child of this (single-threaded) process, as
/// `/proc/thread-self/children` lists them; how many. Reads at most 4 KiB: a longer list
/// is taken on the next round of the caller's loop.
pub(super) fn children(mut each: impl FnMut(i32)) -> usize {
    use rustix::fs::{Mode, OFlags};
    let Ok(fd) = rustix::fs::open(
        c"/proc/thread-self/children",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return 0;
    };
    let mut buf = [0u8; 4096];
    let mut len = 0;
    while len < buf.len() {
        match rustix::io::read(fd.as_fd(), &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    let mut count = 0;
    let mut pid: i32 = 0;
    let mut digits = false;
    for &b in &buf[..len] {
        if b.is_ascii_digit() {
            pid = pid.saturating_mul(10).saturating_add(i32::from(b - b'0'));
            digits = true;
        } else {
            if digits {
                each(pid);
                count += 1;
            }
            pid = 0;
            digits = false;
        }
    }
    // A list cut at the buffer's end: its last pid may be partial, so it is left for the
    // next read.
    if digits && len < buf.len() {
        each(pid);
        count += 1;
    }
    count
}

/// A rung to every child of the tree init (`KillMode::ControlGroup`): the server and the
/// orphans re-parented to us. Their own children are reached through them.
pub(super) fn signal_children(signo: i32) {
    children(|pid| crate::sys::tree_init::kill_child(pid, signo));
}

/// Kills every process of the tree and reaps them all; the server's wait status, if the
/// server was reaped here.
pub(super) fn kill_tree(server: Pid) -> Option<i32> {
    let mut status = None;
    loop {
        children(|pid| crate::sys::tree_init::kill_child(pid, libc::SIGKILL));
        // `__WALL`: an orphan re-parented to us may have been born with an exit signal other
        // than SIGCHLD (a `clone` of its own), which a plain `waitpid(-1)` never sees — it
        // said ECHILD while such children were still ours, here.
        // One death blocks for; then every other one already there, before the next read.
        let mut nohang = false;
        loop {
            match crate::sys::tree_init::wait_any(nohang) {
                Ok(Some((pid, st))) => {
                    if pid == server.as_raw_nonzero().get() {
                        status = Some(st);
                    }
                    nohang = true;
                }
                Err(libc::EINTR) => {}
                Ok(None) => break,
                // ECHILD: nobody is left.
                Err(_) => return status,
            }
        }
    }
}
