//! The engine's stop, done within a budget: [`fit`] scales the ladder into the time left, and
//! [`sweep`] climbs it over the processes left once CMD is gone.
//!
//! CMD's own ladder is the library's climb (`ChildHandle::close_with`, in `init/mod.rs`). The
//! processes left afterwards — orphaned daemons, double-forked workers, whatever else runs in
//! the PID namespace — are not children the library spawned, so no handle climbs for them: the
//! library's [`Sweep`] does — the same `Climb` as CMD's close, one per process, over pidfds (so
//! a pid that exits and is reused is never signalled: a pidfd names one process for good).
//! [`sweep`] waits between its steps on those pidfds and the doorbell in one `poll`; a stop
//! signal on the doorbell cuts the current graces short, as it does for CMD's climb.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use childguard::{Ladder, Rung, Signal, Sweep, SweepOutcome};
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
    // `NOSKIP` (sending a rung the server ignores, its grace waited out) is kept; the EOF
    // wait is not (an engine's stop begins with a signal).
    ladder
        .with_rungs(fitted)
        .expect("a fitted ladder has at least one rung")
        .without_eof_grace()
}

/// `ladder` with its first rung's signal replaced by `signal` (the stop signal received: an
/// `INT` from `docker stop` with `STOPSIGNAL SIGINT` is what CMD gets first, with the first
/// rung's grace).
pub fn starting_with(ladder: &Ladder, signal: Signal) -> Ladder {
    let mut rungs = ladder.rungs().to_vec();
    rungs[0].signal = signal;
    ladder.with_rungs(rungs).expect("same number of rungs")
}

/// A process left at the stop, pinned by its pidfd until the sweep takes it.
#[derive(Debug)]
pub struct Leftover {
    /// Its pid when listed.
    pub pid: u32,
    /// Its command name when listed.
    pub comm: String,
    fd: Option<OwnedFd>,
    /// What the sweep did to it (filled in by [`sweep`]).
    pub outcome: Option<SweepOutcome>,
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
    pids.into_iter()
        .filter(|&pid| pid != me)
        .filter_map(|pid| pin(pid, me, whole_namespace))
        .collect()
}

/// `pid` pinned by a pidfd, if it still names a process to sweep: alive, not a kernel thread,
/// and — unless the sweep takes the `whole_namespace` — still a descendant of `me`.
///
/// Race closed (*pid reuse between the listing and `pidfd_open`*): a descendant listed may
/// exit and be reaped (by us, or by its own parent) before its pidfd is opened, and its pid be
/// handed to a new process anywhere on the machine — a stranger the sweep would then signal
/// through a pidfd of its own. So what the pidfd pinned is looked at again after it is open:
/// its `stat` read, its parent chain walked up to us ([`descends_from`]), then the pidfd polled
/// to see it has not exited meanwhile (a live process keeps its pid, so every read named the
/// pinned process). A stranger's chain reaches pid 1 without meeting us, and it is dropped.
/// Race left: an ancestor of a stranger exiting *during* the walk, its pid reused within those
/// microseconds by a process of our tree, would make the walk pass through us.
fn pin(pid: u32, me: u32, whole_namespace: bool) -> Option<Leftover> {
    let raw = i32::try_from(pid).ok().and_then(Pid::from_raw)?;
    // Gone meanwhile: nothing to do.
    let fd = pidfd_open(raw, PidfdFlags::empty()).ok()?;
    // Read after the pidfd pins the pid (and checked below to be still alive): this is the
    // process the pidfd names.
    let stat = reap::stat(pid)?;
    // Kernel threads (children of kthreadd, pid 2, when the namespace is the host's).
    if stat.state == 'Z' || pid == 2 || stat.ppid == 2 {
        return None;
    }
    if !whole_namespace && !descends_from(stat.ppid, me) {
        return None;
    }
    if exited(&fd) {
        return None;
    }
    Some(Leftover {
        pid,
        comm: stat.comm,
        fd: Some(fd),
        outcome: None,
    })
}

/// Parent chains longer than this are not followed (a chain is as deep as the process tree).
const MAX_CHAIN: usize = 4096;

/// Whether a process whose parent is `parent` descends from `ancestor`: the parent chain,
/// read from `/proc/PID/stat`, reaches `ancestor` before pid 1 (or 0, or a process gone).
fn descends_from(parent: u32, ancestor: u32) -> bool {
    let mut parent = parent;
    for _ in 0..MAX_CHAIN {
        if parent == ancestor {
            return true;
        }
        if parent <= 1 {
            return false;
        }
        match reap::stat(parent) {
            Some(stat) => parent = stat.ppid,
            None => return false,
        }
    }
    false
}

/// Whether the process of `pidfd` has exited (its pidfd is readable).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    !matches!(poll(&mut fds, Some(&now)), Ok(0))
}

/// Climbs `ladder` over `left` with the library's [`Sweep`] — the same climb as CMD's close,
/// one per process: each rung to every one still running (then `SIGCONT` after a catchable
/// one), a rung a process ignores skipped for it, until all are gone or the ladder is used
/// up. Between steps it waits on their pidfds and the doorbell `bell` in one `poll`; when the
/// bell rang and `skip` says a stop signal came, the current graces are cut short. `reap` is
/// called after each wake-up (our children among them must be reaped). Returns how long the
/// sweep took; each leftover's `outcome` says which rung it went after.
pub fn sweep(
    left: &mut [Leftover],
    ladder: &Ladder,
    bell: BorrowedFd<'_>,
    mut skip: impl FnMut() -> bool,
    mut reap: impl FnMut(),
) -> Duration {
    let mut sweep = Sweep::new(ladder);
    for l in left.iter_mut() {
        if let Some(fd) = l.fd.take() {
            sweep.add(fd, l.pid);
        }
    }
    while let Some(next) = sweep.step(Instant::now()) {
        let rang = {
            let running = sweep.running_fds();
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(running.len() + 1);
            fds.push(PollFd::new(&bell, PollFlags::IN));
            fds.extend(running.iter().map(|fd| PollFd::new(fd, PollFlags::IN)));
            let wait = next.saturating_duration_since(Instant::now());
            let timeout = Timespec::try_from(wait).ok();
            let _ = poll(&mut fds, timeout.as_ref());
            fds[0].revents().contains(PollFlags::IN)
        };
        reap();
        if rang && skip() {
            sweep.skip(Instant::now());
        }
    }
    reap();
    let mut outcomes = sweep.outcomes().into_iter();
    for l in left.iter_mut() {
        l.outcome = outcomes.next();
    }
    sweep.started().elapsed()
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
    fn only_our_descendants_are_pinned_unless_the_whole_namespace_is_swept() {
        use std::io::BufRead;
        let me = std::process::id();
        // A child and a grandchild of ours.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 1000 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let grandchild: u32 = line.trim().parse().unwrap();
        let mut pinned = Vec::new();
        for pid in [child.id(), grandchild] {
            let left = pin(pid, me, false).unwrap_or_else(|| panic!("{pid} is ours"));
            assert!(!exited(left.fd.as_ref().unwrap()));
            pinned.push(left);
        }
        // What a pid reused by a stranger names: a process outside our tree (our own parent),
        // refused unless the sweep takes the whole namespace.
        let stranger = rustix::process::getppid().map_or(1, |p| p.as_raw_nonzero().get() as u32);
        assert!(pin(stranger, me, false).is_none(), "our parent {stranger}");
        assert!(!descends_from(1, me));
        assert!(pin(stranger, me, true).is_some());
        let _ = rustix::process::kill_process(
            Pid::from_raw(grandchild as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
        let _ = child.kill();
        // Another test of this binary may reap it first (`reap_others`): not asserted.
        let _ = child.wait();
        // Exited: what `pin` checks last. The grandchild may take a moment to die.
        for left in &pinned {
            let mut fds = [PollFd::new(left.fd.as_ref().unwrap(), PollFlags::IN)];
            let ten_s = Timespec {
                tv_sec: 10,
                tv_nsec: 0,
            };
            assert_eq!(
                poll(&mut fds, Some(&ten_s)).unwrap(),
                1,
                "{} ended",
                left.pid
            );
            assert!(exited(left.fd.as_ref().unwrap()));
        }
    }

    #[test]
    fn the_stop_signal_replaces_the_first_rung() {
        assert_eq!(
            starting_with(&ladder("TERM:8s,KILL:1s"), Signal::INT).to_string(),
            "INT:8s,KILL:1s"
        );
    }
}
