//! Memory release after a `SIGKILL` rung: whether a child is worth a `process_mrelease(2)`,
//! and the short-lived helper thread that sends the kill and makes the call, so that the
//! thread climbing the ladder never blocks in it.
//!
//! Timeline of a release (the climbing thread is a blocking close or the event loop's, for the reaper):
//! 1. Before the kill, [`plan`] sizes the child: cheap tests first (age, CPU clock), then
//!    `/proc/PID/statm` (≥ [`RELEASE_MIN_RESIDENT`]) and `/proc/meminfo` (transparent huge
//!    pages, see [`plan`]).
//! 2. [`Release::kill_and_release`] copies the pidfd and spawns a helper thread that owns the
//!    copy. The helper says it is running, then calls `process_mrelease` in a loop: the
//!    kernel answers `EINVAL` (~0.3 µs) while the child is not dying (bounded: [`SPIN_MAX`]). The climbing thread
//!    waits for that word at most [`HANDOFF`], then sends the rung's `SIGKILL` as for any
//!    rung (to the group too, with `process_group`). The kill marks the child as dying in
//!    the sender's own system call (`SIGNAL_GROUP_EXIT`), so the helper's next call, a
//!    fraction of a microsecond later, starts the release. Before that, [`place_apart`] puts
//!    the two on different CPUs: the child on the climbing thread's (which sleeps right after
//!    the kill), the helper on any other. Both then tear the address space down at once.
//! 3. The climbing thread waits on the child's pidfd until the rung's deadline, as for any
//!    rung: the close returns at the exit or the deadline, whichever comes first, however
//!    long `process_mrelease` takes (~300 ms at 8 GiB).
//! 4. The helper closes its copy of the pidfd, then reports the outcome. A blocking close
//!    collects it within the rung's remaining grace ([`Release::outcome`]); one still running
//!    then is reported [`MemoryRelease::Unfinished`] and the helper finishes alone.
//!
//! Race avoided (`exit_mm`): `process_mrelease` only works while the dying child still owns
//! its address space; once woken by `SIGKILL` the child detaches it within microseconds and
//! frees it alone (the call then fails with `ESRCH`). On this machine's virtual CPUs (the
//! `haltpoll` idle driver polls, so an idle CPU wakes in about a microsecond) a call made
//! *after* the kill lost that race in most closes of an 8 GiB child, whether the call was
//! queued to another thread or made by the thread that had just sent the kill (its return to
//! user mode is where the woken child preempts it). A call that is already spinning when the
//! kill lands needs no wake-up and no return to user mode: the kill is the only event. The
//! child must not wake on the helper's CPU either (it preempts the spinning helper between two
//! calls): [`place_apart`] pins it, for the microseconds it has left to live, to the CPU of the
//! climbing thread. Measured on an 8 GiB child: without the pin the release won 4 closes of 8,
//! with it 8 of 8 (`childguard-bench big`, docs/benchmarks.md). The race can still be lost (a
//! busy machine may preempt the helper): that costs the speed-up, never correctness, and the
//! report says `ESRCH`. The spin is bounded by [`SPIN_MAX`] and happens only for a child worth
//! releasing (see [`plan`]).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::close::report::MemoryRelease;
use crate::core::per_process::PerProcess;
use crate::process::Process;

mod cpus;
use cpus::{place_apart, ChildOnOurCpu};

/// The most helper threads in flight at once in the whole process (2). A `SIGKILL` rung that
/// finds them all busy goes without a release (the report says why): the release only speeds
/// the kill up, and this keeps the library's thread count from growing with the number of
/// children closed at once (see [`crate::MAX_BACKGROUND_THREADS`]). Two, not one: a helper
/// may stay in a slow `process_mrelease` for a while after its child is reaped.
pub(crate) const MAX_RELEASE_HELPERS: usize = 2;

/// Helpers of this process in flight (per process: a child made by `fork()` has none of its
/// parent's threads).
static HELPERS: PerProcess<std::sync::atomic::AtomicUsize> = PerProcess::new();

fn helpers() -> &'static std::sync::atomic::AtomicUsize {
    match HELPERS.get() {
        Some(h) => h,
        None => match HELPERS.publish(std::sync::atomic::AtomicUsize::new(0)) {
            Ok(h) | Err((_, h)) => h,
        },
    }
}

/// One of the [`MAX_RELEASE_HELPERS`] places, given back when dropped (by the helper thread as
/// it ends, or here if no thread could be started).
struct HelperPlace(&'static std::sync::atomic::AtomicUsize);

impl HelperPlace {
    fn take() -> Option<HelperPlace> {
        let count = helpers();
        let mut now = count.load(Ordering::SeqCst);
        loop {
            if now >= MAX_RELEASE_HELPERS {
                return None;
            }
            match count.compare_exchange(now, now + 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Some(HelperPlace(count)),
                Err(seen) => now = seen,
            }
        }
    }
}

impl Drop for HelperPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The resident size from which a `SIGKILL` rung asks for `process_mrelease` (64 MiB).
pub(crate) const RELEASE_MIN_RESIDENT: u64 = 64 << 20;

/// CPU time below which a child cannot hold [`RELEASE_MIN_RESIDENT`] of memory it faulted in
/// itself: 500 µs. Faulting in 64 MiB took 23–25 ms with 4 KiB pages and 3–141 ms with
/// transparent huge pages here (kernel zeroing, charged to the faulting child); at 50 GB/s, faster
/// than any core zeroes memory today, 500 µs covers 25 MiB. Exceptions, which only cost the
/// speed-up, never correctness: a kernel booted with `init_on_free=1` zeroes at free time
/// instead, and shared mappings are resident without zeroing (but `process_mrelease` does not
/// free those anyway).
pub(crate) const RELEASE_MIN_CPU: Duration = Duration::from_micros(500);

/// How long the climbing thread waits for the helper thread to be spinning before it sends
/// the rung's `SIGKILL` (1 ms; a fresh thread's first run took 30–120 µs here). Bounds the
/// stall of the event loop (the reaper's jobs, every captured pipe) per release, and how late a `SIGKILL` rung can be.
pub(crate) const HANDOFF: Duration = Duration::from_millis(1);

/// How long the helper spins on `process_mrelease` without giving its CPU away (1 ms: the
/// climbing thread sends the `SIGKILL` within microseconds of the helper's word on an idle
/// machine). After that it yields between calls, so that on a busy machine the climbing
/// thread (or anyone) gets the CPU, until [`SPIN_MAX`].
pub(crate) const SPIN_FAST: Duration = Duration::from_millis(1);

/// How long the helper waits for the `SIGKILL` at most (200 ms; a climbing thread that has
/// been told the helper spins sends it next, unless the machine is so busy that it gets no
/// CPU for that long). A refused kill stops the helper at once ([`Release::kill_refused`]);
/// a kill later than this finds no helper, and the report says so.
pub(crate) const SPIN_MAX: Duration = Duration::from_millis(200);

/// What a `SIGKILL` rung does about the child's memory.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Nothing (small child, no pidfd, not asked for): the report says nothing either.
    Nothing,
    /// Kill and release through a helper thread.
    Release,
    /// Worth considering but not done, for this reason (reported as `Skipped`).
    Skip(String),
}

/// Sizes the child before the kill (afterwards it drops its memory within microseconds).
///
/// Worth it from [`RELEASE_MIN_RESIDENT`] resident (from `/proc/PID/statm`): for a small child
/// the call costs more (~35 µs measured) than the teardown it would share. Reading `statm`
/// costs ~6 µs (procfs builds the child's `/proc/PID` entries on first use), a third of a
/// whole spawn + close's overhead over std's, so first cheaper tests. Resident memory of its
/// own is memory the child faulted in and the kernel zeroed on its CPU time; a child that has
/// used less than [`RELEASE_MIN_CPU`] cannot have reached [`RELEASE_MIN_RESIDENT`], and gets
/// no `statm` read. Its CPU clock (~0.3 µs, a system call) tells; before it, its age: a
/// process cannot have used more CPU time than it has existed times the CPUs there are, so a
/// child closed right after its spawn needs no call.
///
/// Transparent huge pages: the teardown of memory mapped by 2 MiB pages is ~20× cheaper
/// (8 GiB: ~25 ms against ~570 ms) and made of per-page frees that two CPUs do not share out:
/// `process_mrelease` and the child's own `exit_mmap` walk the same mappings from the same
/// start, and the close measured 1.0–1.4× the plain kill + `waitpid` (docs/benchmarks.md).
/// Linux counts huge pages only system-wide without walking the child's page tables
/// (`smaps_rollup` walks every page-table entry: 15–25 ms per GiB of 4 KiB pages here), so
/// when `/proc/meminfo` shows `AnonHugePages` of at least half the child's resident size —
/// the child *may* then be mostly huge pages — the call is skipped, and the report says why.
/// That can only cost the speed-up (a 4 KiB child next to other processes' huge pages), never
/// make the close slower than without the call.
pub(crate) fn plan(wanted: bool, process: &Process) -> Plan {
    if !wanted || process.pidfd().is_none() {
        return Plan::Nothing;
    }
    let most_cpu = possible_cpus().map(|cpus| process.max_age().saturating_mul(cpus));
    if most_cpu.is_some_and(|most| most < RELEASE_MIN_CPU) {
        return Plan::Nothing;
    }
    let cpu = crate::sys::process_cpu_time(process.pid());
    if cpu.is_ok_and(|used| used < RELEASE_MIN_CPU) {
        return Plan::Nothing;
    }
    let statm = crate::base::kernel_text::read(format!("/proc/{}/statm", process.pid()));
    let resident_pages = statm
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok());
    let page = rustix::param::page_size() as u64;
    let Some(resident) = resident_pages.map(|pages| pages * page) else {
        return Plan::Nothing;
    };
    if resident < RELEASE_MIN_RESIDENT {
        return Plan::Nothing;
    }
    if crate::failpoint::ignores_system_huge_pages() {
        return Plan::Release;
    }
    let meminfo = crate::base::kernel_text::read("/proc/meminfo").unwrap_or_default();
    match anon_huge_bytes(&meminfo) {
        Some(huge) if huge.saturating_mul(2) >= resident => Plan::Skip(format!(
            "the system holds {} MiB of transparent huge pages, at least half the child's {} MiB \
             resident: it may be mostly huge pages, whose teardown process_mrelease does not speed up",
            huge >> 20,
            resident >> 20
        )),
        _ => Plan::Release,
    }
}

/// `AnonHugePages` of a `/proc/meminfo` text, in bytes.
fn anon_huge_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))?;
    let kib = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kib.checked_mul(1024)
}

/// How many CPUs this machine can ever run a process on: one more than the highest number in
/// `/sys/devices/system/cpu/possible` (which counts CPUs that may be hot-plugged later, unlike
/// "online" or any affinity mask), read once. `None` where there is no such file.
fn possible_cpus() -> Option<u32> {
    static CPUS: OnceLock<Option<u32>> = OnceLock::new();
    *CPUS.get_or_init(|| {
        let list = crate::base::kernel_text::read("/sys/devices/system/cpu/possible").ok()?;
        highest_cpu_in_list(&list)?.checked_add(1)
    })
}

/// The highest CPU number in a kernel CPU list such as `"0-3,8-11\n"`.
fn highest_cpu_in_list(list: &str) -> Option<u32> {
    list.trim()
        .split([',', '-'])
        .map(|n| n.parse::<u32>().ok())
        .try_fold(None::<u32>, |max, n| Some(max.max(Some(n?))))?
}

/// What the helper thread tells the climbing thread, in this order.
enum Message {
    /// It is running and about to spin on `process_mrelease`: the `SIGKILL` may go.
    Spinning,
    /// `process_mrelease` returned, this long after the helper began spinning; the helper's
    /// pidfd copy is closed.
    Done(io::Result<()>, Duration),
}

/// One release: in flight on its helper thread, or finished.
#[derive(Debug)]
pub(crate) struct Release {
    state: State,
    /// Set when no `SIGKILL` is coming: the helper stops spinning.
    abandoned: Arc<AtomicBool>,
    /// The child's CPU affinity before [`place_apart`] pinned it, to give back if the kill
    /// is refused (the child then lives on).
    pinned: Option<ChildOnOurCpu>,
}

#[derive(Debug)]
enum State {
    InFlight(mpsc::Receiver<Message>),
    Known(MemoryRelease),
}

impl Release {
    /// A release that did not happen, for this reason.
    pub(crate) fn skipped(reason: String) -> Release {
        Release {
            state: State::Known(MemoryRelease::Skipped { reason }),
            abandoned: Arc::default(),
            pinned: None,
        }
    }

    /// Step 2 of the timeline: a helper thread with its own copy of `pidfd` spins on
    /// `process_mrelease` until the child is dying. Returns once it spins, or after
    /// [`HANDOFF`]; the caller then sends the rung's `SIGKILL` as usual. Without a copy of the
    /// pidfd or a thread (`EMFILE`, `pids.max`, `RLIMIT_NPROC`) the release is skipped and the
    /// report says why; the kill is the caller's as for any rung.
    ///
    /// `pid` must be the caller's own child, not yet reaped, and only the caller may reap it
    /// before the kill: [`place_apart`] names it by pid.
    pub(crate) fn kill_and_release(pidfd: BorrowedFd<'_>, pid: u32) -> Release {
        let Some(place) = HelperPlace::take() else {
            return Release::skipped(format!(
                "{MAX_RELEASE_HELPERS} releases in flight already (MAX_RELEASE_HELPERS)"
            ));
        };
        let copy = match pidfd.try_clone_to_owned() {
            Ok(copy) => copy,
            Err(e) => return Release::skipped(format!("no copy of the pidfd for it: {e}")),
        };
        let (pinned, helper_cpus) = place_apart(pid);
        let (tx, rx) = mpsc::channel();
        let abandoned = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&abandoned);
        let spawned = std::thread::Builder::new()
            .name("childguard-mrelease".into())
            .stack_size(64 << 10)
            .spawn(move || {
                let _place = place;
                if let Some(cpus) = helper_cpus {
                    cpus.apply_to_this_thread();
                }
                release_when_dying(copy, &stop, tx)
            });
        // On failure the closure, and with it the pidfd copy, is dropped here; the child gets
        // its CPUs back, as after a refused kill.
        if let Err(e) = spawned {
            if let Some(pinned) = pinned {
                pinned.restore();
            }
            return Release::skipped(format!("no thread for it: {e}"));
        }
        // Spinning (or nothing, after HANDOFF): either way the caller's SIGKILL comes next.
        let _ = rx.recv_timeout(HANDOFF);
        Release {
            state: State::InFlight(rx),
            abandoned,
            pinned,
        }
    }

    /// The caller's `SIGKILL` was refused (`EPERM` from an LSM, …) or never sent: the child
    /// lives on, so it gets its CPU affinity back, and the helper stops spinning.
    pub(crate) fn kill_refused(&mut self) {
        self.abandoned.store(true, Ordering::Relaxed);
        if let Some(pinned) = self.pinned.take() {
            pinned.restore();
        }
    }

    /// Step 4: the outcome, waiting for the helper at most until `deadline` (the end of the
    /// rung's grace); [`MemoryRelease::Unfinished`] if it is still in `process_mrelease`.
    pub(crate) fn outcome(&mut self, deadline: Instant) -> MemoryRelease {
        if let State::InFlight(rx) = &self.state {
            let known = loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(Message::Spinning) => continue,
                    Ok(Message::Done(Ok(()), took)) => break MemoryRelease::Released { took },
                    Ok(Message::Done(Err(e), _)) => {
                        break MemoryRelease::Skipped {
                            reason: skip_reason(&e),
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => return MemoryRelease::Unfinished,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        break MemoryRelease::Skipped {
                            reason: "its helper thread ended without an answer".into(),
                        }
                    }
                }
            };
            self.state = State::Known(known);
        }
        match &self.state {
            State::Known(known) => known.clone(),
            State::InFlight(_) => MemoryRelease::Unfinished,
        }
    }
}

/// The helper thread: `process_mrelease` on its own pidfd copy, again and again while the
/// kernel answers `EINVAL` (not dying yet): without pause for [`SPIN_FAST`], then yielding
/// the CPU between calls, until [`SPIN_MAX`] or until the climbing thread says no kill is
/// coming (the `exit_mm` race, see the module docs). The copy is closed *before* the outcome
/// is sent, so a close that saw the outcome never returns while the copy is open
/// (`faults.rs::no_fd_outlives_the_close`).
fn release_when_dying(pidfd: OwnedFd, abandoned: &AtomicBool, tx: mpsc::Sender<Message>) {
    let _ = tx.send(Message::Spinning);
    let started = Instant::now();
    let outcome = loop {
        let outcome = crate::sys::process_mrelease(pidfd.as_fd());
        let not_dying =
            outcome.as_ref().err().and_then(io::Error::raw_os_error) == Some(libc::EINVAL);
        if !not_dying {
            break outcome;
        }
        if abandoned.load(Ordering::Relaxed) {
            break Err(io::Error::other("the SIGKILL was refused"));
        }
        let spun = started.elapsed();
        if spun >= SPIN_MAX {
            break Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no SIGKILL reached the child within {SPIN_MAX:?} of the helper's start"),
            ));
        }
        if spun < SPIN_FAST {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    };
    let took = started.elapsed();
    drop(pidfd);
    let _ = tx.send(Message::Done(outcome, took));
}

/// Names the harmless `process_mrelease` failures.
fn skip_reason(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSYS) => "ENOSYS: kernel without process_mrelease (< 5.15)".into(),
        Some(libc::EINVAL) => "EINVAL: the child was not dying or had no memory left".into(),
        Some(libc::ESRCH) => "ESRCH: the child was already gone".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_give_their_highest_number() {
        assert_eq!(highest_cpu_in_list("0\n"), Some(0));
        assert_eq!(highest_cpu_in_list("0-1\n"), Some(1));
        assert_eq!(highest_cpu_in_list("0-3,8-11\n"), Some(11));
        assert_eq!(highest_cpu_in_list("8-11,0-3"), Some(11));
        assert_eq!(highest_cpu_in_list(""), None);
        assert_eq!(highest_cpu_in_list("0-x"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn possible_cpus_cover_every_cpu_we_may_run_on() {
        let possible = possible_cpus().expect("/sys/devices/system/cpu/possible");
        let ours = std::thread::available_parallelism().unwrap().get() as u32;
        assert!(
            possible >= ours,
            "possible {possible} < our affinity's {ours}"
        );
    }

    #[test]
    fn meminfo_gives_its_anonymous_huge_pages() {
        let meminfo = "MemTotal:       24000000 kB\nAnonHugePages:    8388608 kB\n";
        assert_eq!(anon_huge_bytes(meminfo), Some(8 << 30));
        assert_eq!(anon_huge_bytes("AnonHugePages:  0 kB\n"), Some(0));
        assert_eq!(anon_huge_bytes("MemTotal: 1 kB\n"), None);
        assert_eq!(anon_huge_bytes("AnonHugePages: x kB\n"), None);
        #[cfg(target_os = "linux")]
        {
            let ours = crate::base::kernel_text::read("/proc/meminfo").unwrap();
            assert!(anon_huge_bytes(&ours).is_some(), "{ours}");
        }
    }
}
