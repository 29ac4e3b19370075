//! Starting the helper (Linux): gather what it needs, clone it, wait until it reports ready.
//!
//! No `unsafe` here; every system call goes through [`crate::sys`].

use std::os::fd::AsRawFd;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::sys::{self, HelperArgs, HelperStack, STATE_EXITED, STATE_READY, STATE_STARTING};
use crate::{Error, Teardown};

/// The smallest helper stack we use, whatever `_SC_THREAD_STACK_MIN` says (16 KiB with glibc
/// on x86_64). The helper needs well under a page (a handful of small frames and raw system
/// calls, with every signal blocked so no signal frame is ever pushed); 64 KiB leaves room for
/// unoptimised builds and for C library calls that grow with the CPU's register state.
pub(crate) const MIN_STACK: usize = 64 * 1024;

/// How long `enable()` waits for the helper to finish its setup (it takes well under a
/// millisecond; the close loop of an old kernel may take a good fraction of a second).
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// After killing a helper that timed out: how long to wait for it to be gone before
/// reaping it.
const KILL_TIMEOUT: Duration = Duration::from_secs(2);

/// The helper of this process, once started. A forked child inherits a copy of this record and
/// ignores it, because its pid differs from the record's parent.
static STARTED: Mutex<Option<Teardown>> = Mutex::new(None);

/// [`crate::enable`]: the recorded helper if this process has one, else a new one. The lock is
/// held while starting, so concurrent first calls start one helper.
pub(crate) fn enable() -> Result<Teardown, Error> {
    let mut started = STARTED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(teardown) = *started {
        if teardown.parent == current_pid() {
            return Ok(teardown);
        }
    }
    let teardown = start()?;
    *started = Some(teardown);
    Ok(teardown)
}

/// Starts the helper for the calling process and waits until it is set up.
fn start() -> Result<Teardown, Error> {
    let parent = sys::getpid();
    let pidfd = sys::pidfd_open_self().map_err(|e| Error::sys("pidfd_open", e))?;
    let args = HelperArgs {
        parent_pid: parent,
        pidfd: pidfd.as_raw_fd(),
        death_signal: sys::on_main_thread(),
        close_limit: childguard_forksafe::close_loop_limit(),
        name: helper_name(parent as u32),
    };
    let stack = HelperStack::new(stack_size(sys::thread_stack_min()), sys::page_size(), args)
        .map_err(|e| Error::sys("mmap (helper stack)", e))?;
    let helper = sys::clone_helper(stack).map_err(|e| Error::sys("clone", e))?;
    // The helper has its own copy of the fd table, pidfd included; ours is not needed.
    drop(pidfd);
    wait_until_ready(helper)?;
    Ok(Teardown {
        helper: helper.pid,
        parent: parent as u32,
        block: helper.block,
    })
}

/// The helper this process has reaped after it was killed (`(helper, parent)`), so that it is
/// reaped once: after the reap its pid is free and may name someone else.
static REAPED: Mutex<Option<(u32, u32)>> = Mutex::new(None);

/// Whether the helper of `teardown` is still there, waiting (false in a forked child, which has
/// no helper).
///
/// A helper that is gone was killed (it leaves only after its parent, i.e. us): its exit
/// signal is 0, so nothing else reaps it and it would stay a zombie for the life of this
/// process. The first call that sees it gone reaps it.
pub(crate) fn is_alive(teardown: &Teardown) -> bool {
    if current_pid() != teardown.parent {
        return false;
    }
    if teardown.block.state() == STATE_READY {
        return true;
    }
    // Not READY after it was READY: the kernel cleared the word as the helper exited
    // (`CLONE_CHILD_CLEARTID`). Until we reap it, its pid is still ours.
    let mut reaped = REAPED.lock().unwrap_or_else(PoisonError::into_inner);
    let this = (teardown.helper, teardown.parent);
    if *reaped != Some(this) {
        // `ECHILD`: someone else waited for it with `__WALL`; either way it is gone.
        let _ = sys::reap(teardown.helper);
        *reaped = Some(this);
    }
    false
}

/// The calling process's pid.
fn current_pid() -> u32 {
    sys::getpid() as u32
}

/// Waits on the block's futex until the helper says `READY`, or has exited (then reports why),
/// or [`SETUP_TIMEOUT`] passes (then kills it).
fn wait_until_ready(helper: sys::Helper) -> Result<(), Error> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        match helper.block.state() {
            STATE_READY => return Ok(()),
            STATE_EXITED => {
                // Cleared by the kernel as the helper exited: it is (about to be) a zombie.
                let _ = sys::reap(helper.pid);
                return Err(match helper.block.failure() {
                    Some((step, source)) => Error::HelperSetup {
                        step: step.describe(),
                        source,
                    },
                    None => Error::HelperVanished,
                });
            }
            _ => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            give_up(helper);
            return Err(Error::Timeout(SETUP_TIMEOUT));
        }
        sys::wait_state_change(helper.block, STATE_STARTING, left);
    }
}

/// Kills a helper that did not report in time and reaps it once it is gone. If it does not go
/// (it cannot be in the middle of anything that blocks SIGKILL for long), it is left as our
/// child; its stack stays mapped either way.
fn give_up(helper: sys::Helper) {
    if sys::kill_helper(helper.pid).is_err() {
        return;
    }
    let deadline = Instant::now() + KILL_TIMEOUT;
    while helper.block.state() != STATE_EXITED {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        sys::wait_state_change(helper.block, helper.block.state(), left);
    }
    let _ = sys::reap(helper.pid);
}

/// The helper's stack size: `_SC_THREAD_STACK_MIN`, but at least [`MIN_STACK`]. (Rounded up to
/// whole pages, plus a guard page, by `HelperStack::new`.)
pub(crate) fn stack_size(thread_stack_min: Option<usize>) -> usize {
    thread_stack_min.unwrap_or(0).max(MIN_STACK)
}

/// `cleanup/<parent>` cut to the 15 bytes a task name holds, NUL-padded to 16.
pub(crate) fn helper_name(parent: u32) -> [u8; 16] {
    let text = format!("cleanup/{parent}");
    let len = text.len().min(15);
    let mut name = [0u8; 16];
    name[..len].copy_from_slice(&text.as_bytes()[..len]);
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(name: &[u8; 16]) -> &str {
        let end = name.iter().position(|&b| b == 0).unwrap();
        std::str::from_utf8(&name[..end]).unwrap()
    }

    #[test]
    fn names_fit_a_task_name() {
        assert_eq!(text(&helper_name(42)), "cleanup/42");
        // The default pid_max (4194304) has 7 digits: exactly 15 bytes.
        assert_eq!(text(&helper_name(4_194_304)), "cleanup/4194304");
        assert_eq!(text(&helper_name(u32::MAX)), "cleanup/4294967");
        assert_eq!(helper_name(u32::MAX)[15], 0);
    }

    #[test]
    fn stack_is_at_least_the_minimum() {
        assert_eq!(stack_size(None), MIN_STACK);
        assert_eq!(stack_size(Some(16 * 1024)), MIN_STACK);
        assert_eq!(stack_size(Some(1 << 20)), 1 << 20);
    }

    #[test]
    fn system_stack_minimum_is_known() {
        // Not required (we fall back to MIN_STACK), but glibc and musl both answer.
        let min = crate::sys::thread_stack_min();
        assert!(min.is_some_and(|n| n >= 2048), "{min:?}");
    }
}
