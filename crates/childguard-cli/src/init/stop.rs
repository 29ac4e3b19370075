//! The engine's stop, done within a budget: [`fit`] scales the ladder into the time left, and
//! [`sweep`] climbs it over the processes left once CMD is gone.
//!
//! CMD's own ladder is the library's climb (`ChildHandle::close_with`, in `init/mod.rs`). The
//! processes left afterwards — orphaned daemons, double-forked workers, whatever else runs in
//! the PID namespace — are not children the library spawned, so no handle can climb for them:
//! [`sweep`] does, with the same rungs, over pidfds (so a pid that exits and is reused is
//! never signalled: a pidfd names one process for good). It waits on those pidfds and the
//! doorbell in one `poll` per rung; a stop signal on the doorbell cuts the rung's wait short,
//! as it does for CMD's climb.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use childguard::{Ladder, Rung, Signal};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

use super::reap;

/// Fits `ladder` into `budget`: the graces of every rung before the last are scaled by one
/// factor (never up) so that they add up to at most `budget` — the last rung's signal (KILL in
/// the default ladder) then goes out by the end of the budget at the latest. The last rung's
/// grace is the wait for the kernel to finish what that signal started; it is kept, capped at
/// the budget. With nothing left of the budget, the result is the last rung alone.
pub fn fit(ladder: &Ladder, budget: Duration) -> Ladder {
    let rungs = ladder.rungs();
    let (last, before) = rungs.split_last().expect("a ladder has at least one rung");
    let total: Duration = before.iter().map(|r| r.grace).sum();
    let mut fitted: Vec<Rung> = Vec::with_capacity(rungs.len());
    if !budget.is_zero() {
        let factor = if total > budget {
            budget.as_secs_f64() / total.as_secs_f64()
        } else {
            1.0
        };
        fitted.extend(
            before
                .iter()
                // Whole milliseconds: the report and the ladder's text stay readable.
                .map(|r| {
                    let ms = (r.grace.as_secs_f64() * factor * 1000.0).floor() as u64;
                    Rung::new(r.signal, Duration::from_millis(ms))
                }),
        );
    }
    fitted.push(Rung::new(
        last.signal,
        last.grace.min(budget.max(Duration::from_millis(100))),
    ));
    // `NOSKIP` (sending a rung the server ignores, its grace waited out) is kept.
    Ladder::new(fitted)
        .expect("a fitted ladder has at least one rung")
        .skip_ignored(ladder.skips_ignored())
}

/// `ladder` with its first rung's signal replaced by `signal` (the stop signal received: an
/// `INT` from `docker stop` with `STOPSIGNAL SIGINT` is what CMD gets first, with the first
/// rung's grace).
pub fn starting_with(ladder: &Ladder, signal: Signal) -> Ladder {
    let mut rungs = ladder.rungs().to_vec();
    rungs[0].signal = signal;
    Ladder::new(rungs)
        .expect("same number of rungs")
        .skip_ignored(ladder.skips_ignored())
}

/// A process left at the stop, pinned by its pidfd.
#[derive(Debug)]
pub struct Leftover {
    /// Its pid when listed.
    pub pid: u32,
    /// Its command name when listed.
    pub comm: String,
    fd: OwnedFd,
    /// The rung (index, signal, time since the sweep began) that it exited after, once gone.
    pub ended: Option<(usize, Signal, Duration)>,
}

/// The processes left now: with `whole_namespace` (we are PID 1), every process in `/proc`
/// except us; otherwise our descendants (with the subreaper bit, orphans are re-parented to
/// us, so daemons CMD started are among them). Zombies are not listed: they are reaped, not
/// signalled.
pub fn leftovers(whole_namespace: bool) -> Vec<Leftover> {
    let me = std::process::id();
    let pids = if whole_namespace {
        reap::all_pids()
    } else {
        reap::descendants()
    };
    let mut found = Vec::new();
    for pid in pids {
        if pid == me {
            continue;
        }
        let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
            continue;
        };
        let Ok(fd) = pidfd_open(raw, PidfdFlags::empty()) else {
            continue; // gone meanwhile
        };
        // Read after the pidfd pins the pid: this is the process the pidfd names.
        let Some(stat) = reap::stat(pid) else {
            continue;
        };
        // Kernel threads (children of kthreadd, pid 2, when the namespace is the host's).
        if stat.state == 'Z' || pid == 2 || stat.ppid == 2 {
            continue;
        }
        found.push(Leftover {
            pid,
            comm: stat.comm,
            fd,
            ended: None,
        });
    }
    found
}

/// Climbs `ladder` over `left`: each rung's signal to every one still alive (then `SIGCONT`,
/// for a stopped one, after a catchable signal), then a wait until all are gone, the rung's
/// grace ends, or `skip` says a stop signal came (the doorbell `bell` turned readable and
/// `skip` returns true). `reap` is called after each wake-up (our children among them must be
/// reaped). Returns how long the sweep took; each leftover's `ended` says which rung it went
/// after (`None`: it outlived the ladder).
pub fn sweep(
    left: &mut [Leftover],
    ladder: &Ladder,
    bell: BorrowedFd<'_>,
    mut skip: impl FnMut() -> bool,
    mut reap: impl FnMut(),
) -> Duration {
    let started = Instant::now();
    for (index, rung) in ladder.rungs().iter().enumerate() {
        mark_gone(left, index, rung.signal, started);
        if left.iter().all(|l| l.ended.is_some()) {
            break;
        }
        for l in left.iter().filter(|l| l.ended.is_none()) {
            send(l, rung.signal);
            if rung.signal.is_catchable() {
                send(l, Signal::CONT);
            }
        }
        let deadline = started_at_least(Instant::now(), rung.grace);
        loop {
            reap();
            mark_gone(left, index, rung.signal, started);
            let alive: Vec<&Leftover> = left.iter().filter(|l| l.ended.is_none()).collect();
            let now = Instant::now();
            if alive.is_empty() || now >= deadline {
                break;
            }
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(alive.len() + 1);
            fds.push(PollFd::new(&bell, PollFlags::IN));
            fds.extend(alive.iter().map(|l| PollFd::new(&l.fd, PollFlags::IN)));
            let left_ms = deadline.saturating_duration_since(now);
            let timeout = Timespec::try_from(left_ms).ok();
            let _ = poll(&mut fds, timeout.as_ref());
            let rang = fds[0].revents().contains(PollFlags::IN);
            drop(fds);
            if rang && skip() {
                break;
            }
        }
    }
    reap();
    let last = ladder.rungs().len().saturating_sub(1);
    let signal = ladder.rungs().last().map_or(Signal::KILL, |r| r.signal);
    mark_gone(left, last, signal, started);
    started.elapsed()
}

fn started_at_least(now: Instant, grace: Duration) -> Instant {
    now.checked_add(grace).unwrap_or(now)
}

/// Records as ended (after rung `index`) every leftover whose pidfd says it exited.
fn mark_gone(left: &mut [Leftover], index: usize, signal: Signal, started: Instant) {
    for l in left.iter_mut().filter(|l| l.ended.is_none()) {
        if exited(l.fd.as_fd()) {
            l.ended = Some((index, signal, started.elapsed()));
        }
    }
}

/// A pidfd is readable once its process has exited (a zombie counts: it runs no more).
fn exited(fd: BorrowedFd<'_>) -> bool {
    let mut one = [PollFd::new(&fd, PollFlags::IN)];
    matches!(poll(&mut one, Some(&Timespec::default())), Ok(n) if n > 0)
}

/// `pidfd_send_signal(2)`; a signal rustix does not name (a real-time one in a custom ladder)
/// goes by `kill(2)` to the pid listed, after the pidfd says the process has not exited (a
/// pid is reused only after its zombie is reaped, which for our children only we do).
fn send(l: &Leftover, signal: Signal) {
    match rustix::process::Signal::from_named_raw(signal.as_raw()) {
        Some(s) => {
            let _ = rustix::process::pidfd_send_signal(&l.fd, s);
        }
        None if !exited(l.fd.as_fd()) => {
            let _ = crate::sys::kill(l.pid as i32, signal.as_raw());
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ladder(text: &str) -> Ladder {
        text.parse().unwrap()
    }

    #[test]
    fn fit_scales_the_rungs_before_the_last() {
        assert_eq!(
            fit(&ladder("TERM:8s,KILL:1s"), Duration::from_secs(4)).to_string(),
            "TERM:4s,KILL:1s"
        );
        assert_eq!(
            fit(&ladder("HUP:2s,TERM:6s,KILL:1s"), Duration::from_secs(4)).to_string(),
            "HUP:1s,TERM:3s,KILL:1s"
        );
        // Never scaled up.
        assert_eq!(
            fit(&ladder("TERM:2s,KILL:1s"), Duration::from_secs(30)).to_string(),
            "TERM:2s,KILL:1s"
        );
        // Nothing left: KILL alone.
        assert_eq!(
            fit(&ladder("TERM:2s,KILL:1s"), Duration::ZERO).to_string(),
            "KILL:100ms"
        );
    }

    #[test]
    fn the_stop_signal_replaces_the_first_rung() {
        assert_eq!(
            starting_with(&ladder("TERM:8s,KILL:1s"), Signal::INT).to_string(),
            "INT:8s,KILL:1s"
        );
    }
}
