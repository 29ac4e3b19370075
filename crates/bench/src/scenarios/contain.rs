//! `contain`: a server with 64 busy workers, each in a session of its own (`slowserver
//! --workers 64 --setsid --lifeline`), closed with and without containment.
//!
//! Rows (lower is better in each):
//! - `survivors`: processes of the server's tree alive right after the close. Ours:
//!   `contain(Containment::Cgroup)`, ladder `TERM:100ms,KILL:2s`. Baseline: the same ladder
//!   with `process_group(true)` only — `killpg` never reaches the `setsid`'d workers.
//! - `close_ms`: from the start of the close until every process of the tree is dead. Ours:
//!   contained, ladder `KILL:2s` (`cgroup.kill`, woken by `cgroup.events`). Baseline: the usual
//!   hand-written way — walk `/proc` for the server's descendants (by ppid), `kill(SIGKILL)`
//!   each and the server, reap the server, poll `/proc` until every one is gone.
//! - `spawn_close_us`: spawn + close of a plain slowserver (exits on EOF), contained vs not:
//!   what containment costs per spawn on std's path (mkdir, opens, the `cgroup.events` watch, the pre_exec
//!   hook's fork instead of posix_spawn and its `cgroup.procs` write, rmdir).
//! - `spawn_close_own_us`: the same on our own spawn (`Builder::own_spawn`: `clone3` into the
//!   cgroup at birth), contained vs not (both on our spawn).
//!
//! - `spawn_close_floor_us`: the kernel's floor under that row, with no childguard code
//!   (`contain/floor.rs`): the same server spawned with `clone3` (`CLONE_INTO_CGROUP` into a
//!   cgroup just made, and not) and closed with `shutdown`, `poll` on the pidfd, `waitid`,
//!   `rmdir`. If the floor's ratio is near the goal, so is any containment's.
//!
//! The tree scenarios run fewer repetitions (10 by default: each starts 65 processes that burn
//! CPU); the spawn rows 100, their four sides (ours contained and not, the floor contained and
//! not) in a fresh random order in each repetition. Elsewhere ours and the baseline alternate.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Containment, Ladder, SocketMode};

use super::Settings;
use crate::fixture::{self, ms};
use crate::row::Row;
use crate::stats::{median, shuffled_medians};
use crate::Result;

mod floor;
mod tree;

const WORKERS: &str = "64";
/// `--lifeline`: a worker that escaped a close (the baseline's) exits once this benchmark has,
/// so a bench killed in the middle leaves none burning CPU under what runs next.
const TREE_ARGS: &[&str] = &[
    "--workers",
    WORKERS,
    "--setsid",
    "--ignore-eof",
    "--lifeline",
];

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(10);
    let spawn_reps = settings.reps_or(100);
    let (mut surv_ours, mut surv_base) = (Vec::new(), Vec::new());
    let (mut close_ours, mut close_base) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        if rep % 2 == 0 {
            surv_ours.push(survivors(true)?);
            surv_base.push(survivors(false)?);
            close_ours.push(close_contained()?);
            close_base.push(close_by_proc_walk()?);
        } else {
            surv_base.push(survivors(false)?);
            surv_ours.push(survivors(true)?);
            close_base.push(close_by_proc_walk()?);
            close_ours.push(close_contained()?);
        }
    }
    let (spawn_ours, spawn_base) = contained_vs_not(spawn_reps, false)?;
    let [own_ours, own_base, floor_ours, floor_base] = own_and_floor(spawn_reps)?;
    let trees = tree::rows(spawn_reps, reps)?;
    Ok([
        Row {
            scenario: "contain",
            metric: "survivors",
            ours: median(&surv_ours),
            baseline: median(&surv_base),
            baseline_name: format!(
                "process_group(true) only, TERM:100ms,KILL:2s, {WORKERS} setsid workers ({reps} reps)"
            ),
            unit: "processes",
        },
        Row {
            scenario: "contain",
            metric: "close_ms",
            ours: median(&close_ours),
            baseline: median(&close_base),
            baseline_name: format!(
                "/proc walk by ppid + kill(SIGKILL) each + poll /proc until gone, {WORKERS} busy workers ({reps} reps)"
            ),
            unit: "ms",
        },
        Row {
            scenario: "contain",
            metric: "spawn_close_us",
            ours: spawn_ours,
            baseline: spawn_base,
            baseline_name: "the same spawn + close (EOF exit) without containment (std's spawn)"
                .into(),
            unit: "us",
        },
        Row {
            scenario: "contain",
            metric: "spawn_close_own_us",
            ours: own_ours,
            baseline: own_base,
            baseline_name: "our own clone3 spawn: the same spawn + close without containment"
                .into(),
            unit: "us",
        },
        Row {
            scenario: "contain",
            metric: "spawn_close_floor_us",
            ours: floor_ours,
            baseline: floor_base,
            baseline_name: "diagnostic, no childguard code: the same server by clone3 into a \
                            cgroup just made (mkdir, open, rmdir) vs clone3 without, closed by \
                            shutdown + poll(pidfd) + waitid — the kernel's floor under \
                            spawn_close_own_us"
                .into(),
            unit: "us",
        },
    ]
    .into_iter()
    .chain(trees)
    .collect())
}

/// Medians of spawn + close contained and not, alternating (`own`: on our own spawn).
fn contained_vs_not(reps: usize, own: bool) -> Result<(f64, f64)> {
    let (mut contained, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        spawn_close(true, own)?;
        spawn_close(false, own)?;
    }
    for rep in 0..reps {
        if rep % 2 == 0 {
            contained.push(spawn_close(true, own)?);
            plain.push(spawn_close(false, own)?);
        } else {
            plain.push(spawn_close(false, own)?);
            contained.push(spawn_close(true, own)?);
        }
    }
    Ok((median(&contained), median(&plain)))
}

/// Medians of the four sides of the own-spawn rows — ours contained, ours not, the floor
/// contained, the floor not — each repetition in a fresh random order.
fn own_and_floor(reps: usize) -> Result<[f64; 4]> {
    let floor = floor::Floor::new()?;
    let sides: [&dyn Fn() -> Result<f64>; 4] = [
        &|| spawn_close(true, true),
        &|| spawn_close(false, true),
        &|| floor.once(true),
        &|| floor.once(false),
    ];
    shuffled_medians(sides, 2, reps, 0xf100)
}

/// The pids of the tree from a READY line: the server and its `workers=`.
fn tree_of(pid: u32, line: &str) -> Result<Vec<u32>> {
    let workers = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("workers="))
        .ok_or_else(|| format!("no workers= in {line:?}"))?;
    let mut tree = vec![pid];
    for w in workers.split(',') {
        tree.push(w.parse()?);
    }
    Ok(tree)
}

fn pidfds(tree: &[u32]) -> Result<Vec<OwnedFd>> {
    tree.iter()
        .map(|&pid| {
            let raw = rustix::process::Pid::from_raw(pid as i32).ok_or("pid 0")?;
            Ok(rustix::process::pidfd_open(
                raw,
                rustix::process::PidfdFlags::empty(),
            )?)
        })
        .collect()
}

fn exited(fd: &OwnedFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&zero)), Ok(n) if n > 0)
}

/// Spawns the tree through childguard, contained or in a process group; returns the handle
/// and pidfds of the whole tree.
fn spawn_tree(contained: bool, ladder: &str) -> Result<(ChildHandle, Vec<OwnedFd>)> {
    let containment = match contained {
        true => Containment::Cgroup,
        false => Containment::None,
    };
    spawn_tree_in(containment, ladder)
}

fn spawn_tree_in(containment: Containment, ladder: &str) -> Result<(ChildHandle, Vec<OwnedFd>)> {
    let contained = containment != Containment::None;
    let handle = ChildHandle::builder(fixture::command(TREE_ARGS)?)
        .socket(SocketMode::Stdio)
        .ladder(ladder.parse::<Ladder>()?)
        .process_group(!contained)
        .contain(containment.clone())
        .spawn()?;
    let (pid, line) = fixture::read_ready_line(handle.socket().ok_or("no socket")?)?;
    let tree = tree_of(pid, &line)?;
    let tree = match containment {
        // Under a tree init the READY line's pids are the server's view (a PID namespace's):
        // the tree as we see it is everything below the tree init, the server's parent.
        Containment::PidNamespace | Containment::Subreaper => {
            let server = handle.id().ok_or("no pid")?;
            let init = ppid_of(server).ok_or("no tree init")?;
            let found = descendants_of(init);
            if found.len() < tree.len() {
                return Err(format!("contain: {} of {} found", found.len(), tree.len()).into());
            }
            found
        }
        _ => tree,
    };
    let fds = pidfds(&tree)?;
    Ok((handle, fds))
}

/// Processes of the tree alive right after the close (the rest are killed here, by pidfd).
fn survivors(contained: bool) -> Result<f64> {
    let (handle, fds) = spawn_tree(contained, "TERM:100ms,KILL:2s")?;
    let report = handle.close()?;
    let alive: Vec<&OwnedFd> = fds.iter().filter(|fd| !exited(fd)).collect();
    let count = alive.len();
    for fd in alive {
        let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
    }
    if contained && count > 0 {
        return Err(format!("contain: {count} survived a contained close: {report}").into());
    }
    Ok(count as f64)
}

/// Ours: a contained close with `KILL:2s`, until every process of the tree is dead.
fn close_contained() -> Result<f64> {
    close_in(Containment::Cgroup)
}

/// [`close_contained`] with any containment (`contain/tree.rs`).
fn close_in(containment: Containment) -> Result<f64> {
    let (handle, fds) = spawn_tree_in(containment, "KILL:2s")?;
    let start = Instant::now();
    let report = handle.close()?;
    let took = start.elapsed();
    if fds.iter().any(|fd| !exited(fd)) {
        return Err(format!("contain: a process outlived the contained close: {report}").into());
    }
    Ok(ms(took))
}

/// Baseline: std spawn, then the usual kill of a tree: descendants from `/proc` by ppid,
/// `SIGKILL` each and the leader, reap the leader, poll `/proc` until all are gone.
fn close_by_proc_walk() -> Result<f64> {
    let (mut child, socket) = fixture::spawn_plain(TREE_ARGS)?;
    // spawn_plain consumed READY: the tree is complete once READY was printed. The timed part
    // starts here and includes its own /proc walk, as a supervisor's close would.
    let start = Instant::now();
    let _ = socket.shutdown(std::net::Shutdown::Both);
    drop(socket);
    let tree = descendants_of(child.id());
    for &pid in &tree {
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    fixture::kill(&child, rustix::process::Signal::KILL)?;
    child.wait()?;
    let deadline = start + Duration::from_secs(10);
    while tree.iter().any(|&pid| is_alive(pid)) {
        if Instant::now() > deadline {
            return Err("contain baseline: the tree did not die within 10 s".into());
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    let took = start.elapsed();
    if tree.len() < 64 {
        return Err(format!("contain baseline: found {} workers", tree.len()).into());
    }
    Ok(ms(took))
}

/// Every descendant of `root` in `/proc` (by ppid), found level by level.
fn descendants_of(root: u32) -> Vec<u32> {
    let mut parents = vec![(0u32, 0u32)];
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(ppid) = ppid_of(pid) {
                parents.push((pid, ppid));
            }
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(pid, ppid) in &parents {
            if ppid == p && pid != 0 {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

/// `(state, ppid)` from `/proc/PID/stat` (the scale scenario's leftover count reads it too).
pub(crate) fn stat_of(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    Some((state, fields.next()?.parse().ok()?))
}

fn ppid_of(pid: u32) -> Option<u32> {
    stat_of(pid).map(|(_, ppid)| ppid)
}

fn is_alive(pid: u32) -> bool {
    stat_of(pid).is_some_and(|(state, _)| state != 'Z' && state != 'X')
}

/// One spawn + close of a plain slowserver (exits on EOF), in µs.
fn spawn_close(contained: bool, own: bool) -> Result<f64> {
    let containment = match contained {
        true => Containment::Cgroup,
        false => Containment::None,
    };
    spawn_close_in(containment, own)
}

/// [`spawn_close`] with any containment (the tree inits' rows, `contain/tree.rs`).
fn spawn_close_in(containment: Containment, own: bool) -> Result<f64> {
    let start = Instant::now();
    let handle = ChildHandle::builder(fixture::command(&[])?)
        .socket(SocketMode::Stdio)
        .ladder("EOF:1s,KILL:1s".parse::<Ladder>()?)
        .contain(containment)
        .own_spawn(own)
        .spawn()?;
    fixture::read_ready(handle.socket().ok_or("no socket")?)?;
    let report = handle.close()?;
    let took = start.elapsed();
    if report.status.is_none() {
        return Err(format!("contain: spawn_close not reaped: {report}").into());
    }
    Ok(took.as_secs_f64() * 1e6)
}
