//! [`Climb`]: one run up a [`Ladder`], as a state machine that any driver can step — the
//! blocking close path, the background reaper, or the tokio face.

use std::io;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::ladder::Ladder;
use crate::process::Process;
use crate::report::{CloseReport, Ending, MemoryRelease, SentSignal};
use crate::signal::Signal;

/// Where a close stands on its ladder.
#[derive(Debug)]
pub(crate) struct Climb {
    ladder: Ladder,
    /// Index of the next rung to send.
    next_rung: usize,
    /// End of the current wait (EOF grace or the last sent rung's grace).
    deadline: Instant,
    /// When the close began; report offsets are measured from here.
    started: Instant,
    /// Signals sent; each was sent at `started + at`.
    sent: Vec<SentSignal>,
    /// A signal sent by `ChildHandle::kill` before the close, and when.
    earlier_kill: Option<(Signal, Instant)>,
    /// Ask for `process_mrelease` after a `SIGKILL` rung.
    release_memory: bool,
    /// The `process_mrelease` made, if any: its outcome and how long it took.
    release: Option<(io::Result<()>, Duration)>,
    /// Whether the thread stepping this climb may block in `process_mrelease` (a blocking
    /// close, the reaper thread); an async task or a background close may not.
    release_inline: bool,
}

impl Climb {
    /// Starts a climb at `started`.
    ///
    /// Without an earlier kill, the first rung is due after the EOF grace (at once if there is
    /// none). After `kill(sig, …)`, the climb resumes behind the *first* rung that sends `sig`
    /// (so a later repeat of `sig` never lets it skip a stronger rung in between),
    /// and first waits out that rung's grace counted from the kill: the caller already took
    /// that step, so the child gets no second, weaker signal while it is dying.
    pub(crate) fn begin(
        ladder: &Ladder,
        started: Instant,
        earlier_kill: Option<(Signal, Instant)>,
        release_memory: bool,
    ) -> Climb {
        let resumed = earlier_kill.and_then(|(signal, at)| {
            let index = ladder.rungs().iter().position(|r| r.signal == signal)?;
            Some((index + 1, later(at, ladder.rungs()[index].grace)))
        });
        let (next_rung, deadline) =
            resumed.unwrap_or((0, later(started, ladder.eof_grace().unwrap_or_default())));
        Climb {
            ladder: ladder.clone(),
            next_rung,
            deadline,
            started,
            sent: Vec::new(),
            earlier_kill,
            release_memory,
            release: None,
            release_inline: false,
        }
    }

    /// When the current wait ends.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether every rung was sent and the last grace has run out.
    pub(crate) fn is_exhausted(&self, now: Instant) -> bool {
        self.next_rung >= self.ladder.rungs().len() && now >= self.deadline
    }

    /// Sends the next rung's signal (and `SIGCONT` after a catchable one, so a stopped child
    /// sees it) and starts its grace. Returns `false` when no rung is left.
    pub(crate) fn send_next(&mut self, process: &mut Process) -> io::Result<bool> {
        let Some(rung) = self.ladder.rungs().get(self.next_rung).copied() else {
            return Ok(false);
        };
        // Sized before the kill: afterwards the child drops its memory within microseconds.
        let worth_releasing = rung.signal == Signal::KILL && self.worth_releasing(process);
        let now = Instant::now();
        let (delivered, reached) = process.signal_counting(rung.signal)?;
        if rung.signal.is_catchable() {
            process.signal(Signal::CONT)?;
        } else if worth_releasing && delivered {
            self.release_memory_of(process);
        }
        self.sent.push(SentSignal {
            signal: rung.signal,
            at: now.saturating_duration_since(self.started),
            rung: self.next_rung,
            to_group: process.leads_group(),
            to_cgroup: process.reaches_cgroup(rung.signal),
            reached,
        });
        self.next_rung += 1;
        self.deadline = later(now, rung.grace);
        Ok(true)
    }

    /// Whether the child is big enough for `process_mrelease` to pay off: at least
    /// [`RELEASE_MIN_RESIDENT`] resident (from `/proc/PID/statm`). For a small child the call
    /// costs more (~35 µs measured) than the teardown it would share.
    ///
    /// Reading `statm` costs ~6 µs (procfs builds the child's `/proc/PID` entries on first
    /// use), a third of a whole spawn + close's overhead over std's. So first cheaper tests.
    /// Resident memory of its own is memory the child faulted in and the kernel zeroed on its
    /// CPU time; a child that has used less than [`RELEASE_MIN_CPU`] cannot have reached
    /// [`RELEASE_MIN_RESIDENT`], and gets no `statm` read. Its CPU clock (~0.3 µs, a system
    /// call) tells; before it, its age: a process cannot have used more CPU time than it has
    /// existed times the CPUs there are, so a child closed right after its spawn needs no call.
    fn worth_releasing(&self, process: &Process) -> bool {
        if !self.release_memory
            || !self.release_inline
            || self.release.is_some()
            || process.pidfd().is_none()
        {
            return false;
        }
        let most_cpu = possible_cpus().map(|cpus| process.max_age().saturating_mul(cpus));
        if most_cpu.is_some_and(|most| most < RELEASE_MIN_CPU) {
            return false;
        }
        let cpu = crate::sys::process_cpu_time(process.pid());
        if cpu.is_ok_and(|used| used < RELEASE_MIN_CPU) {
            return false;
        }
        let statm = std::fs::read_to_string(format!("/proc/{}/statm", process.pid()));
        let resident_pages = statm
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok());
        let page = rustix::param::page_size() as u64;
        resident_pages.is_some_and(|pages| pages * page >= RELEASE_MIN_RESIDENT)
    }

    /// Lets the thread that steps this climb block in `process_mrelease` itself.
    pub(crate) fn release_inline(&mut self) {
        self.release_inline = true;
    }

    /// After `SIGKILL`: `process_mrelease` the child (once per close), from this thread.
    ///
    /// Race: the call only works while the dying child still has its `mm`; the child drops it
    /// (`exit_mm`) within microseconds of being scheduled, and then does the slow teardown
    /// itself. A call queued to another thread arrives too late (measured: `ESRCH` every time
    /// at 1–8 GiB) or, when it wins, takes a CPU from the caller on a small machine. So the
    /// thread that sent `SIGKILL` makes the call at once when it may block anyway — a blocking
    /// close, which waits for the exit regardless, or the reaper thread — and an async task or
    /// a background close (which must return at once) makes none.
    fn release_memory_of(&mut self, process: &Process) {
        let Some(pidfd) = process.pidfd() else { return };
        let started = Instant::now();
        let outcome = crate::sys::process_mrelease(pidfd);
        self.release = Some((outcome, started.elapsed()));
    }

    /// Advances without blocking: sends every rung whose time has come. Returns `false` once
    /// the ladder is used up and its last grace has passed.
    pub(crate) fn advance(&mut self, process: &mut Process, now: Instant) -> io::Result<bool> {
        while now >= self.deadline {
            if !self.send_next(process)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Blocks until `process` is gone or the ladder is used up. Returns whether it is gone.
    /// No sleep-polling: each wait is a `poll` on pidfds (or the `SIGCHLD` notifier) bounded by
    /// the current deadline.
    pub(crate) fn run_blocking(&mut self, process: &mut Process) -> io::Result<bool> {
        self.run_blocking_with(process, |process, deadline| process.wait_until(deadline))
    }

    /// [`run_blocking`](Climb::run_blocking) with the wait between steps done by `wait`, which
    /// must return by the deadline it is given, and may return earlier (the loop re-checks):
    /// [`ChildHandle::output`](crate::ChildHandle::output) reads the child's pipes meanwhile.
    pub(crate) fn run_blocking_with(
        &mut self,
        process: &mut Process,
        mut wait: impl FnMut(&Process, Instant) -> io::Result<()>,
    ) -> io::Result<bool> {
        self.release_inline();
        loop {
            if process.is_gone()? {
                return Ok(true);
            }
            if !self.advance(process, Instant::now())? {
                return Ok(false);
            }
            wait(process, self.deadline)?;
        }
    }

    /// Fills the signal, exit and ending parts of `report`. The signals move into the report:
    /// a climb handed to the reaper afterwards reports nothing more.
    pub(crate) fn record(&mut self, process: &Process, report: &mut CloseReport) {
        report.memory_release = self.release.as_ref().map(|(outcome, took)| match outcome {
            Ok(()) => MemoryRelease::Released { took: *took },
            Err(e) => MemoryRelease::Skipped {
                reason: release_skip_reason(e),
            },
        });
        report.status = process.status();
        report.signals = std::mem::take(&mut self.sent);
        let Some(exited_at) = process.exited_at() else {
            report.ended_by = Ending::Outlived;
            return;
        };
        report.exited = Some(exited_at.saturating_duration_since(self.started));
        let sent_by_exit = |s: &&SentSignal| self.started + s.at <= exited_at;
        let last_before_exit = report.signals.iter().rev().find(sent_by_exit);
        report.ended_by = match (last_before_exit, self.earlier_kill) {
            (Some(s), _) => Ending::Rung {
                index: s.rung,
                signal: s.signal,
            },
            (None, Some((signal, at))) if at <= exited_at => Ending::Kill { signal },
            (None, _) if exited_at < self.started => Ending::BeforeClose,
            (None, _) => Ending::Eof,
        };
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

/// `at + wait`, saturating: a grace too long for the clock (`Duration::MAX`) means "a century",
/// never an overflow panic.
pub(crate) fn later(at: Instant, wait: Duration) -> Instant {
    at.checked_add(wait)
        .or_else(|| at.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(at)
}

/// Names the harmless `process_mrelease` failures.
fn release_skip_reason(e: &io::Error) -> String {
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
}
