//! The CPU placement of a release (step 2 of the timeline in [`super`]): the dying child on
//! the climbing thread's CPU, the helper thread on any other (the `exit_mm` race).

/// Puts the dying child and the helper thread on different CPUs (the `exit_mm` race, module
/// docs): pins the child to the CPU the calling thread runs on, and returns the CPUs the
/// helper may use (all of ours but that one). Does nothing where that is impossible: one CPU
/// (then there is no second CPU to share the teardown with anyway), a cpuset that keeps the
/// child off our CPU, a child of another user (`EPERM`). Each costs only the speed-up.
///
/// Race avoided (pid reuse): the child is named by pid, which is safe only because it is our
/// child and not yet reaped, and the caller is the only one that reaps it: until then no
/// other process can get its pid. The affinity set on the child is undone if the kill is
/// refused ([`Release::kill_refused`]); after the kill it dies with it.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn place_apart(pid: u32) -> (Option<ChildOnOurCpu>, Option<HelperCpus>) {
    use rustix::thread::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
    let here = sched_getcpu();
    let Ok(mut others) = sched_getaffinity(None) else {
        return (None, None);
    };
    others.unset(here);
    if others.count() == 0 {
        return (None, None);
    }
    let helper = Some(HelperCpus(others));
    let Ok(child) = crate::process::pid(pid) else {
        return (None, helper);
    };
    let Ok(was) = sched_getaffinity(Some(child)) else {
        return (None, helper);
    };
    let mut only_here = CpuSet::new();
    only_here.set(here);
    match sched_setaffinity(Some(child), &only_here) {
        Ok(()) => (Some(ChildOnOurCpu { child, was }), helper),
        Err(_) => (None, helper),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn place_apart(_pid: u32) -> (Option<ChildOnOurCpu>, Option<HelperCpus>) {
    (None, None)
}

/// The dying child confined to the climbing thread's CPU by [`place_apart`], and its affinity
/// before (not `close::target::Pinned`, a process named by a pidfd).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[derive(Debug)]
pub(super) struct ChildOnOurCpu {
    child: rustix::process::Pid,
    was: rustix::thread::CpuSet,
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl ChildOnOurCpu {
    pub(super) fn restore(self) {
        // Best effort: a child that cannot get its mask back keeps running on one CPU, which
        // is slower but correct.
        let _ = rustix::thread::sched_setaffinity(Some(self.child), &self.was);
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
#[derive(Debug)]
pub(super) enum ChildOnOurCpu {}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
impl ChildOnOurCpu {
    pub(super) fn restore(self) {
        match self {}
    }
}

/// The CPUs [`place_apart`] leaves to the helper thread.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) struct HelperCpus(rustix::thread::CpuSet);

#[cfg(any(target_os = "linux", target_os = "android"))]
impl HelperCpus {
    pub(super) fn apply_to_this_thread(self) {
        // Best effort, as for the child's pin.
        let _ = rustix::thread::sched_setaffinity(None, &self.0);
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) enum HelperCpus {}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
impl HelperCpus {
    pub(super) fn apply_to_this_thread(self) {
        match self {}
    }
}
