//! Memory release after a `SIGKILL` rung: whether a child is worth a `process_mrelease(2)`,
//! and the short-lived helper thread that sends the kill and makes the call, so that the
//! thread climbing the ladder never blocks in it.
//!
//! Timeline of a release (the climbing thread is a blocking close or the reaper thread):
//! 1. Before the kill, [`plan`] sizes the child: cheap tests first (age, CPU clock), then
//!    `/proc/PID/statm` (≥ [`RELEASE_MIN_RESIDENT`]) and `/proc/meminfo` (transparent huge
//!    pages, see [`plan`]).
//! 2. [`Release::kill_and_release`] copies the pidfd and spawns a helper thread that owns the
//!    copy. The helper sends `SIGKILL` through it and calls `process_mrelease` right after;
//!    the climbing thread waits for that send at most [`HANDOFF`], then sends the rung's
//!    `SIGKILL` itself as usual (to the group too, with `process_group`; a second `SIGKILL`
//!    to a dying process is a no-op, and a pidfd never reaches a recycled pid).
//! 3. The climbing thread waits on the child's pidfd until the rung's deadline, as for any
//!    rung: the close returns at the exit or the deadline, whichever comes first, however
//!    long `process_mrelease` takes (~300 ms at 8 GiB).
//! 4. The helper closes its copy of the pidfd, then reports the outcome. A blocking close
//!    collects it within the rung's remaining grace ([`Release::outcome`]); one still running
//!    then is reported [`MemoryRelease::Unfinished`] and the helper finishes alone.
//!
//! Race avoided (`exit_mm`): `process_mrelease` only works while the dying child still owns
//! its address space; once woken by `SIGKILL` the child detaches it within microseconds and
//! frees it alone (the call then fails with `ESRCH`). A call queued to another thread *after*
//! the kill arrived too late every time we measured, so the helper sends the kill itself and
//! makes the call with nothing in between but a channel send. The race can still be lost
//! (the child's CPU may be idle and the helper's busy): that costs the speed-up, never
//! correctness, and the report says `ESRCH`.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::process::Process;
use crate::report::MemoryRelease;

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

/// How long the climbing thread waits for the helper's `SIGKILL` before sending its own (1 ms;
/// a fresh thread's first run took 30–120 µs here). Bounds the stall of the shared reaper
/// thread per release, and how late a `SIGKILL` rung can be.
pub(crate) const HANDOFF: Duration = Duration::from_millis(1);

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
    let statm = std::fs::read_to_string(format!("/proc/{}/statm", process.pid()));
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
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
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
        let list = std::fs::read_to_string("/sys/devices/system/cpu/possible").ok()?;
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
    /// Its `SIGKILL` went out (or failed; `process_mrelease` then reports why).
    Killed,
    /// `process_mrelease` returned, after this long; the helper's pidfd copy is closed.
    Done(io::Result<()>, Duration),
}

/// One release: in flight on its helper thread, or finished.
#[derive(Debug)]
pub(crate) struct Release {
    state: State,
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
        }
    }

    /// Step 2 of the timeline: a helper thread with its own copy of `pidfd` sends `SIGKILL`
    /// and calls `process_mrelease` at once. Returns once that `SIGKILL` is out, or after
    /// [`HANDOFF`]; the caller then sends the rung's own `SIGKILL` as usual. Without a copy of
    /// the pidfd or a thread (`EMFILE`, `pids.max`, `RLIMIT_NPROC`) the release is skipped and
    /// the report says why; the kill is the caller's as for any rung.
    pub(crate) fn kill_and_release(pidfd: BorrowedFd<'_>) -> Release {
        let copy = match pidfd.try_clone_to_owned() {
            Ok(copy) => copy,
            Err(e) => return Release::skipped(format!("no copy of the pidfd for it: {e}")),
        };
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("childguard-mrelease".into())
            .stack_size(64 << 10)
            .spawn(move || kill_then_release(copy, tx));
        // On failure the closure, and with it the pidfd copy, is dropped here.
        if let Err(e) = spawned {
            return Release::skipped(format!("no thread for it: {e}"));
        }
        // Killed (or nothing, after HANDOFF): either way the caller's SIGKILL comes next.
        let _ = rx.recv_timeout(HANDOFF);
        Release {
            state: State::InFlight(rx),
        }
    }

    /// Step 4: the outcome, waiting for the helper at most until `deadline` (the end of the
    /// rung's grace); [`MemoryRelease::Unfinished`] if it is still in `process_mrelease`.
    pub(crate) fn outcome(&mut self, deadline: Instant) -> MemoryRelease {
        if let State::InFlight(rx) = &self.state {
            let known = loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(Message::Killed) => continue,
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

/// The helper thread: `SIGKILL` through its own pidfd copy, then `process_mrelease` on it with
/// nothing in between but a channel send (the `exit_mm` race, see the module docs). The copy
/// is closed *before* the outcome is sent, so a close that saw the outcome never returns while
/// the copy is open (`faults.rs::no_fd_outlives_the_close`).
fn kill_then_release(pidfd: OwnedFd, tx: mpsc::Sender<Message>) {
    let killed = kill_through(&pidfd);
    let _ = tx.send(Message::Killed);
    let started = Instant::now();
    let outcome = killed.and_then(|()| crate::sys::process_mrelease(pidfd.as_fd()));
    let took = started.elapsed();
    drop(pidfd);
    let _ = tx.send(Message::Done(outcome, took));
}

/// `SIGKILL` through a pidfd (`pidfd_send_signal(2)`).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn kill_through(pidfd: &OwnedFd) -> io::Result<()> {
    let kill = crate::sys::rustix_signal(crate::signal::Signal::KILL)?;
    Ok(rustix::process::pidfd_send_signal(pidfd, kill)?)
}

/// Off Linux there are no pidfds, so no release is ever planned (see [`plan`]).
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn kill_through(_pidfd: &OwnedFd) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
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
            let ours = std::fs::read_to_string("/proc/meminfo").unwrap();
            assert!(anon_huge_bytes(&ours).is_some(), "{ours}");
        }
    }
}
