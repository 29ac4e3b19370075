//! [`Sweep`]: a ladder climbed over processes this program did not spawn through a handle —
//! what is left in a container once its command is gone (`childguard init`: orphaned daemons,
//! double-forked workers). Each process is pinned by a pidfd and gets the library's one
//! [`Climb`] (`close/climb.rs`), so the sweep follows the ladder exactly as a close does:
//! `SIGCONT` after each catchable rung, a rung the process ignores skipped (unless the ladder
//! says `NOSKIP`), a refused signal ending that process's climb. All climbs begin at once, so
//! they send their rungs together; the caller waits between steps (on [`Sweep::running_fds`]
//! and whatever else it listens to) until [`Sweep::step`]'s next deadline.
//!
//! Race avoided (*a pid reused*): every signal goes through the pidfd, which names one process
//! for good; a pid that exits and is taken by a new process is never signalled.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::base::signal::Signal;
use crate::close::climb::Climb;
use crate::close::ladder::Ladder;
use crate::close::target::Pinned;

/// Climbs a [`Ladder`] over processes pinned by pidfds (Linux). See the module's docs in
/// `close/sweep.rs`: one `Climb` per process, the same code as a close.
///
/// ```no_run
/// use std::os::fd::OwnedFd;
/// use std::time::Instant;
/// use childguard::{Ladder, Sweep};
///
/// /// `left`: each process's pidfd (from `pidfd_open(2)`) and pid.
/// fn stop_all(left: Vec<(OwnedFd, u32)>) {
///     let mut sweep = Sweep::new(&"TERM:2s,KILL:1s".parse::<Ladder>().unwrap());
///     for (pidfd, pid) in left {
///         sweep.add(pidfd, pid);
///     }
///     while let Some(next) = sweep.step(Instant::now()) {
///         // A real caller polls sweep.running_fds() (and its own fds) until `next`.
///         std::thread::sleep(next.saturating_duration_since(Instant::now()));
///     }
///     for outcome in sweep.outcomes() {
///         println!("{}: {:?}", outcome.pid, outcome.ended);
///     }
/// }
/// ```
#[derive(Debug)]
pub struct Sweep {
    ladder: Ladder,
    started: Instant,
    members: Vec<Member>,
}

#[derive(Debug)]
struct Member {
    target: Pinned,
    climb: Climb,
    outcome: SweepOutcome,
}

/// What became of one process of a [`Sweep`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepOutcome {
    /// The process's pid when it was added.
    pub pid: u32,
    /// Once it exited (seen by a [`Sweep::step`]): the last rung sent to it before (index in
    /// the ladder and signal; `None` if it exited before any), and when the exit was seen,
    /// since the sweep began. `None`: it outlived the ladder (or the sweep was not stepped to
    /// its end).
    pub ended: Option<(Option<(usize, Signal)>, Duration)>,
    /// Rungs skipped because the process ignored their signal, and signals the kernel
    /// refused, in words.
    pub notes: Vec<String>,
}

impl Sweep {
    /// A sweep of `ladder` (its EOF wait, if any, is not used: the first rung is due at the
    /// first [`Sweep::step`]) with no process yet.
    pub fn new(ladder: &Ladder) -> Sweep {
        Sweep {
            ladder: ladder.clone().without_eof_grace(),
            started: Instant::now(),
            members: Vec::new(),
        }
    }

    /// Adds the process `pid`, named by `pidfd` (`pidfd_open(2)`). Its climb begins now: add
    /// every process before the first step, so they get each rung together.
    pub fn add(&mut self, pidfd: OwnedFd, pid: u32) {
        let now = Instant::now();
        let skip = self.ladder.skips_ignored();
        self.members.push(Member {
            target: Pinned::new(pidfd, pid, false),
            climb: Climb::begin(&self.ladder, now, None, false, skip),
            outcome: SweepOutcome {
                pid,
                ended: None,
                notes: Vec::new(),
            },
        });
    }

    /// Notes each process that exited, then sends every rung now due to each one still
    /// running. Returns when the next step is due — the earliest deadline of a climb still
    /// going (a grace ends, a skipped rung's successor is due) — or `None` once every process
    /// exited or has outlived its whole ladder.
    pub fn step(&mut self, now: Instant) -> Option<Instant> {
        let since = now.saturating_duration_since(self.started);
        let mut next: Option<Instant> = None;
        for m in &mut self.members {
            if m.outcome.ended.is_some() {
                continue;
            }
            if m.target.exited() {
                let last = m.climb.sent().last().map(|s| (s.rung, s.signal));
                m.outcome.ended = Some((last, since));
                continue;
            }
            let skipped_before = m.climb.skipped().len();
            let going = m.climb.advance(&mut m.target, now);
            for s in &m.climb.skipped()[skipped_before..] {
                m.outcome
                    .notes
                    .push(format!("{} skipped (ignored)", s.signal));
            }
            if let Some((_, signal, e)) = m.climb.take_signal_error() {
                m.outcome.notes.push(format!("{signal} not sent: {e}"));
            }
            if let Err(e) = &going {
                m.outcome.notes.push(format!("climb stopped: {e}"));
            }
            if matches!(going, Ok(true)) {
                let at = m.climb.deadline();
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        next
    }

    /// Cuts every climb's current wait short (a second stop signal): the next rung is due at
    /// once. The last rung's grace is never cut, as in a close.
    pub fn skip(&mut self, now: Instant) {
        for m in &mut self.members {
            m.climb.skip(now);
        }
    }

    /// The pidfds of the processes not yet seen to exit: readable once one exits, for the
    /// caller's wait between steps.
    pub fn running_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.members
            .iter()
            .filter(|m| m.outcome.ended.is_none())
            .map(|m| m.target.pidfd().as_fd())
            .collect()
    }

    /// When the sweep began.
    pub fn started(&self) -> Instant {
        self.started
    }

    /// Each process's outcome, in the order they were added.
    pub fn outcomes(&self) -> Vec<SweepOutcome> {
        self.members.iter().map(|m| m.outcome.clone()).collect()
    }
}
