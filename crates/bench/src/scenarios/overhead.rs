//! `overhead`: what the close path costs when nothing goes wrong.
//!
//! Plain slowserver exits on EOF. Ours: [`ChildHandle::close`](childguard::ChildHandle::close)
//! with the ladder `EOF:1s,KILL:1s`, so no signal is needed. Baseline: `shutdown(Both)` on a
//! std `UnixStream`, close it, `child.wait()`. Only the close is timed (from just before it to
//! its return), not the spawn.
//!
//! A second row is the floor under the first, with no childguard code: the same std baseline's
//! child closed with the system calls a close *bounded in time* needs at the least —
//! `shutdown`, close, `poll` on a pidfd (opened before the timing starts, as ours is at the
//! spawn) with the grace as its timeout, `waitid(P_PIDFD)` to reap, close of the pidfd (~2 µs
//! here: the kernel frees the reaped child's `struct pid`). An unbounded `wait()` sleeps once
//! and reaps in the same call; a bounded wait sleeps in `poll`, then reaps, then lets go of the
//! pidfd. What that costs here, against `wait()`, is what no bounded close can go under.
//!
//! A third row adds to that floor the two looks our close takes before its shutdown, each for a
//! guarantee of ours: `getpid` (the fork check: a handle inherited through `fork()` must not end
//! the parent's child) and `waitid(WNOHANG)` (did the child exit before the close? the report's
//! `Ending::BeforeClose`). It is the least a close with those guarantees costs, so ours against
//! it is what the rest of our close path (climb, report, drops) adds. The four sides run in a
//! fresh random order in each repetition.

use std::net::Shutdown;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use childguard::{Ending, Ladder};

use super::Settings;
use crate::fixture::{self, ms};
use crate::row::Row;
use crate::stats::shuffled_medians;
use crate::Result;

const LADDER: &str = "EOF:1s,KILL:1s";
const WARM_UP: usize = 2;

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(100);
    let ladder: Ladder = LADDER.parse()?;
    let sides: [&dyn Fn() -> Result<f64>; 4] = [
        &|| ours_once(&ladder),
        &baseline_once,
        &|| floor_once(Looks::None),
        &|| floor_once(Looks::Ours),
    ];
    let [ours, baseline, floor, checked] = shuffled_medians(sides, WARM_UP, reps, 0x0c105e)?;
    Ok(vec![
        Row {
            scenario: "overhead",
            metric: "close_ms",
            ours,
            baseline,
            baseline_name: format!("shutdown(Both) + child.wait() ({reps} reps)"),
            unit: "ms",
        },
        Row {
            scenario: "overhead",
            metric: "close_floor_ms",
            ours: floor,
            baseline,
            baseline_name: "diagnostic, no childguard code: 'ours' is the least a bounded \
                            close does (shutdown, close, poll on a pidfd with a timeout, \
                            waitid, close of the pidfd) vs shutdown(Both) + child.wait()"
                .into(),
            unit: "ms",
        },
        Row {
            scenario: "overhead",
            metric: "close_checked_floor_ms",
            ours: checked,
            baseline,
            baseline_name: "diagnostic, no childguard code: the floor above plus the two looks \
                            our close takes before its shutdown (getpid for the fork check, \
                            waitid WNOHANG for an exit before the close) vs shutdown(Both) + \
                            child.wait()"
                .into(),
            unit: "ms",
        },
    ])
}

/// Which looks the floor takes before its shutdown.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Looks {
    /// None: the least a bounded close does.
    None,
    /// Ours: `getpid` (the fork check) and `waitid(WNOHANG)` (an exit before the close).
    Ours,
}

/// Ours: the whole `close()`, in milliseconds.
fn ours_once(ladder: &Ladder) -> Result<f64> {
    let handle = fixture::spawn_ours(&[], ladder.clone())?;
    let start = Instant::now();
    let report = handle.close()?;
    let took = start.elapsed();
    if report.ended_by != Ending::Eof || !report.signals.is_empty() {
        return Err(format!("overhead: expected an exit on EOF, no signal: {report}").into());
    }
    Ok(ms(took))
}

/// Baseline: `shutdown(Both)`, close, `wait()`, in milliseconds.
fn baseline_once() -> Result<f64> {
    let (mut child, socket) = fixture::spawn_plain(&[])?;
    let start = Instant::now();
    let shut = socket.shutdown(Shutdown::Both);
    drop(socket);
    let status = child.wait();
    let took = start.elapsed();
    shut?;
    let status = status?;
    if !status.success() {
        return Err(format!("overhead: the baseline server exited with {status}").into());
    }
    Ok(ms(took))
}

/// The floor: the baseline's child closed with a bounded wait made directly — `shutdown`,
/// close, `poll(2)` on a pidfd with the grace (1 s) as timeout, `waitid(P_PIDFD)`, close of
/// the pidfd — in ms; with [`Looks::Ours`], after our two looks (see the module docs).
fn floor_once(looks: Looks) -> Result<f64> {
    use rustix::event::{poll, PollFd, PollFlags};
    use rustix::process::{pidfd_open, waitid, Pid, PidfdFlags, WaitId, WaitIdOptions};
    let (child, socket) = fixture::spawn_plain(&[])?;
    let pid = Pid::from_raw(child.id() as i32).ok_or("spawned pid 0")?;
    let pidfd = pidfd_open(pid, PidfdFlags::empty())?;
    let grace = rustix::time::Timespec::try_from(Duration::from_secs(1))?;
    let owner = rustix::process::getpid();
    let start = Instant::now();
    if looks == Looks::Ours {
        if rustix::process::getpid() != owner {
            return Err("overhead: the checked floor ran in another process".into());
        }
        let early = waitid(
            WaitId::PidFd(pidfd.as_fd()),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        )?;
        // With WNOHANG a child still running yields a zeroed siginfo: neither exited nor killed.
        if early.is_some_and(|s| s.exited() || s.killed() || s.dumped()) {
            return Err("overhead: the checked floor's server exited before its close".into());
        }
    }
    let shut = socket.shutdown(Shutdown::Both);
    drop(socket);
    let polled = poll(&mut [PollFd::new(&pidfd, PollFlags::IN)], Some(&grace));
    let status = waitid(WaitId::PidFd(pidfd.as_fd()), WaitIdOptions::EXITED);
    // Closing the pidfd is part of any close that opened one: ~2 µs here, the kernel freeing
    // the reaped child's `struct pid` (its last reference).
    drop(pidfd);
    let took = start.elapsed();
    shut?;
    if polled? == 0 {
        return Err("overhead: the floor's server did not exit within 1 s of EOF".into());
    }
    let status = status?.ok_or("overhead: waitid returned no status")?;
    if status.exit_status() != Some(0) {
        return Err("overhead: the floor's server did not exit with 0".into());
    }
    drop(child); // reaped above; dropping a std Child neither waits nor kills
    Ok(ms(took))
}
