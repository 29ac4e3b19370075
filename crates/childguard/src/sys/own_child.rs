//! The child's side of our own spawn (`spawn/clone3.rs`): what runs between `clone3` and
//! `execve` in a child that shares our memory ([`super::clone3`]).
//!
//! The steps are std's, then our `pre_exec` hook's (`exec.rs`), in the same order: stdio onto
//! fds 0–2, `chdir`, the process group, the limits' v1 cgroups (the v2 one was joined at
//! birth), the signal mask and `SIGPIPE`, the parent-death signal with the parent re-checked,
//! every fd from 3 (or 4) marked close-on-exec, and `execve` (with `LISTEN_PID`/`WATCHDOG_PID`
//! written and the listener on fd 3, as the hook does). Each step is announced in
//! [`ChildPlan`] before it runs; a failure leaves its errno there and the child exits 127.
//! The parent reads both once `clone3` returned (`CLONE_VFORK`: after the exec or the exit),
//! so no pipe is needed to learn which step failed.
//!
//! Everything here keeps to the contract of [`super::clone3`]: raw system calls and glibc's
//! async-signal-safe wrappers of them, no allocation, no lock, no panic (no slice index that
//! could be out of bounds; errors are OS codes, never boxed).

use std::ffi::CString;

use super::exec::{mark_cloexec_from, parent_pid, set_parent_death_signal, write_raw, PidExec};
use super::start_signals::{check, last_errno, unblock_all};
use crate::base::signal::Signal;

/// How far the child got: each step is stored before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Step {
    /// Not started: the child never ran (or the spawn was not made).
    NotStarted,
    /// `dup2(2)` of the stdio fds onto 0, 1 and 2.
    Stdio,
    /// `chdir(2)` to the Command's `current_dir`.
    Chdir,
    /// `setpgid(2)`: the Command's `process_group`.
    ProcessGroup,
    /// Writing `0` to the v1 `cgroup.procs` of the limits' hierarchies.
    JoinV1Cgroups,
    /// `sigaction(2)` for `SIGPIPE` and `sigprocmask(2)`: the signals as std leaves them.
    Signals,
    /// `prctl(2)` `PR_SET_PDEATHSIG`.
    DeathSignal,
    /// `getppid(2)` after the death signal: the parent died before it was set.
    ParentGone,
    /// `execve(2)`: reached means exec'd unless an errno was left.
    Exec,
}

impl Step {
    /// The step's name in an error: the call that failed.
    pub(crate) fn call(self) -> &'static str {
        match self {
            Step::NotStarted => "clone3",
            Step::Stdio => "dup2 of the stdio fds",
            Step::Chdir => "chdir to the Command's current_dir",
            Step::ProcessGroup => "setpgid",
            Step::JoinV1Cgroups => "joining the v1 cgroups (cgroup.procs)",
            Step::Signals => "setting the signal mask and dispositions (and the foreground group)",
            Step::DeathSignal => "prctl(PR_SET_PDEATHSIG)",
            Step::ParentGone => "getppid (the parent died before the death signal was set)",
            Step::Exec => "execve",
        }
    }
}

/// What the child does, built before the spawn; the two last fields are the child's answer.
#[derive(Debug)]
pub(crate) struct ChildPlan {
    /// The fd to put on 0, 1 and 2 (`-1`: leave the inherited one).
    pub stdio: [i32; 3],
    pub cwd: Option<CString>,
    /// `setpgid(0, n)`: `Some(0)` leads a new group.
    pub process_group: Option<i32>,
    /// The v1 `cgroup.procs` to join (`-1`: none).
    pub v1_procs: [i32; 3],
    /// Start the program with `SIGPIPE` ignored, else at its default (as std does).
    pub ignore_sigpipe: bool,
    /// `PR_SET_PDEATHSIG` signal and the pid the child must still have as parent afterwards.
    pub death_signal: Option<(Signal, u32)>,
    /// The signal state and foreground group the program starts with, if set.
    pub start_signals: super::StartSignals,
    /// Every fd from this one up is marked close-on-exec: 3, or 4 with an activation listener.
    pub first_private_fd: i32,
    pub exec: PidExec,
    /// Written by the child: the step it reached.
    pub reached: Step,
    /// Written by the child: the errno of the step that failed (0: none).
    pub errno: i32,
}

impl ChildPlan {
    pub(crate) fn new(exec: PidExec) -> ChildPlan {
        ChildPlan {
            stdio: [-1; 3],
            cwd: None,
            process_group: None,
            v1_procs: [-1; 3],
            ignore_sigpipe: false,
            death_signal: None,
            start_signals: super::StartSignals::default(),
            first_private_fd: 3,
            exec,
            reached: Step::NotStarted,
            errno: 0,
        }
    }
}

/// Spawns a child that runs `plan` and execs (see the module): its pid and pidfd once it
/// exec'd or exited — which one, and the step that failed, is left in `plan.reached` and
/// `plan.errno`. `cgroup`: the v2 cgroup's directory fd the child is born in.
pub(crate) fn spawn_child(
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    plan: &mut ChildPlan,
) -> std::io::Result<(u32, std::os::fd::OwnedFd)> {
    plan.reached = Step::NotStarted;
    plan.errno = 0;
    // SAFETY: `child_main` keeps to clone3_run's contract (this module), and `plan` is
    // borrowed for the whole call.
    unsafe { super::clone3::clone3_run(cgroup, child_main, std::ptr::from_mut(plan).cast()) }
}

/// [`spawn_child`] from the tree init (`process/containment/tree_init`), a fork-like copy of
/// the host that may not allocate nor touch a thread-local: the child's stack is mapped here
/// (`mmap`, async-signal-safe) and unmapped once `clone3` returned (the child exec'd or
/// exited). `ENOSYS` and the like come back as they are: the caller forks instead.
pub(crate) fn spawn_child_from_copy(
    plan: &mut ChildPlan,
) -> std::io::Result<(u32, std::os::fd::OwnedFd)> {
    const GUARD: usize = 4096;
    let len = super::clone3::STACK_SIZE + GUARD;
    let map = childguard_forksafe::map_anonymous(len, libc::MAP_STACK)
        .map_err(std::io::Error::from_raw_os_error)?;
    plan.reached = Step::NotStarted;
    plan.errno = 0;
    // SAFETY: the mapping is ours, `len` bytes, used by nothing else: its first page becomes
    // the guard (an overflow faults), the rest the child's stack. `child_main` keeps to
    // clone3_run's contract, and `plan` is borrowed for the whole call.
    let born = unsafe {
        libc::mprotect(map.as_ptr().cast(), GUARD, libc::PROT_NONE);
        super::clone3::clone3_run_on(
            map.as_ptr().add(GUARD).cast(),
            super::clone3::STACK_SIZE,
            None,
            child_main,
            std::ptr::from_mut(plan).cast(),
        )
    };
    // SAFETY: munmap(2) of the mapping made above; the child is done with it (CLONE_VFORK).
    unsafe { libc::munmap(map.as_ptr().cast(), len) };
    born
}

/// The child: runs the plan `arg` points to; returns only on failure, with 127 (the exit
/// status of a program that could not be run), the step and errno left in the plan.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `&mut ChildPlan` that `spawn/clone3.rs` passed to `clone3_run`,
    // valid until it returns; the parent does not touch it meanwhile (it sleeps: CLONE_VFORK).
    let plan = unsafe { &mut *arg.cast::<ChildPlan>() };
    let errno = match run(plan) {
        Err(errno) => errno,
        Ok(()) => libc::EIO,
    };
    // SAFETY: a plain store into the plan (see above), volatile so it is made before exit.
    unsafe { std::ptr::write_volatile(&mut plan.errno, errno) };
    127
}

/// The server of a tree init (`process/containment/tree_init`): a fork-like copy of it (no
/// shared memory, so no `CLONE_VFORK` answer in the plan) runs the plan; if a step fails it
/// writes the step and its errno (5 bytes) to `report`, a close-on-exec pipe the tree init
/// reads, and exits 127. An `execve` that works closes the pipe: the tree init reads EOF.
pub(crate) fn run_forked(plan: &mut ChildPlan, report: i32) -> ! {
    let errno = match run(plan) {
        Err(errno) => errno,
        Ok(()) => libc::EIO,
    };
    let e = errno.to_ne_bytes();
    let _ = write_raw(report, &[plan.reached as u8, e[0], e[1], e[2], e[3]]);
    childguard_forksafe::exit_now(127)
}

/// The step a [`run_forked`] report names (`NotStarted` for a byte it never writes).
pub(crate) fn step_from(byte: u8) -> Step {
    [
        Step::NotStarted,
        Step::Stdio,
        Step::Chdir,
        Step::ProcessGroup,
        Step::JoinV1Cgroups,
        Step::Signals,
        Step::DeathSignal,
        Step::ParentGone,
        Step::Exec,
    ]
    .into_iter()
    .find(|s| *s as u8 == byte)
    .unwrap_or(Step::NotStarted)
}

/// The steps; returns only if one failed (`Ok` only if `execve` returned without an errno).
fn run(plan: &mut ChildPlan) -> Result<(), i32> {
    let os = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    reach(plan, Step::Stdio);
    for (target, &fd) in (0..).zip(plan.stdio.iter()) {
        if fd >= 0 {
            put_on(fd, target)?;
        }
    }
    if plan.cwd.is_some() {
        reach(plan, Step::Chdir);
    }
    if let Some(cwd) = &plan.cwd {
        // SAFETY: chdir(2) with a NUL-terminated path owned by the plan.
        check(unsafe { libc::chdir(cwd.as_ptr()) })?;
    }
    if let Some(group) = plan.process_group {
        reach(plan, Step::ProcessGroup);
        // SAFETY: setpgid(2) of the calling process; no memory arguments.
        check(unsafe { libc::setpgid(0, group) })?;
    }
    reach(plan, Step::JoinV1Cgroups);
    for &fd in &plan.v1_procs {
        if fd >= 0 {
            write_raw(fd, b"0").map_err(os)?;
        }
    }
    reach(plan, Step::Signals);
    if plan.start_signals.is_set() {
        super::start_signals::apply(&plan.start_signals, plan.ignore_sigpipe)?;
    } else {
        reset_signals(plan.ignore_sigpipe)?;
    }
    if let Some((signal, parent)) = plan.death_signal {
        reach(plan, Step::DeathSignal);
        set_parent_death_signal(signal).map_err(os)?;
        // The parent may have died between clone3 and prctl; the signal would then never come.
        reach(plan, Step::ParentGone);
        if parent_pid() != parent {
            return Err(libc::ESRCH);
        }
    }
    mark_cloexec_from(plan.first_private_fd);
    reach(plan, Step::Exec);
    Err(os(plan.exec.exec()))
}

/// Stores the step about to run, so the parent can name it.
fn reach(plan: &mut ChildPlan, step: Step) {
    // SAFETY: a plain store into the plan, volatile so that it is made in this order.
    unsafe { std::ptr::write_volatile(&mut plan.reached, step) };
}

/// `dup2(2)` `fd` onto `target`, inheritable; if they are the same fd, clears its
/// close-on-exec flag instead (`dup2` onto itself would leave it set), as std does.
fn put_on(fd: i32, target: i32) -> Result<(), i32> {
    if fd == target {
        // SAFETY: F_SETFD on an fd number of ours; no memory arguments.
        return check(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) });
    }
    loop {
        // SAFETY: dup2(2) on fd numbers; it only changes this process's fd table.
        let rc = unsafe { libc::dup2(fd, target) };
        match check(rc) {
            Err(libc::EINTR) | Err(libc::EBUSY) => continue,
            other => return other,
        }
    }
}

/// `SIGPIPE` to its default (or ignored) and an empty signal mask: what a child of std's path
/// gets too (every caught signal is already back at its default: `CLONE_CLEAR_SIGHAND`).
fn reset_signals(ignore_sigpipe: bool) -> Result<(), i32> {
    let disposition = if ignore_sigpipe {
        libc::SIG_IGN
    } else {
        libc::SIG_DFL
    };
    // SAFETY: signal(2) with SIG_IGN or SIG_DFL installs no handler; it only changes this
    // process's disposition (the child's copy: no CLONE_SIGHAND).
    if unsafe { libc::signal(libc::SIGPIPE, disposition) } == libc::SIG_ERR {
        return Err(last_errno());
    }
    unblock_all()
}
