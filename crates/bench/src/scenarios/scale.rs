//! `scale`: 1,000 live children closed at once from tokio tasks.
//!
//! Each repetition spawns N = 1,000 slowservers that ignore `SIGHUP` and EOF, each on its own
//! socketpair, waits for every `READY`, then closes them all concurrently on a 2-worker
//! multi-thread runtime built beforehand. The soft `RLIMIT_NOFILE` is raised to the hard limit
//! first (each child costs us a socket and a pidfd).
//!
//! Ours: one task per child awaiting [`close_async`](childguard::ChildHandle::close_async) with
//! the ladder `HUP:100ms,TERM:1s` — the HUP is ignored, the TERM 100 ms later ends it, the close
//! reaps it. Baseline: the same children spawned by `tokio::process` with `kill_on_drop(true)`;
//! one task per child drops its socket and its `Child` (tokio sends `SIGKILL` and leaves the
//! reaping to its orphan queue), then we wait until `/proc` shows every pid reaped (gone, not a
//! zombie), capped at 30 s. The baseline does less work (an instant `SIGKILL`, no grace): the
//! row shows what a graceful ladder costs at this scale, not a like-for-like race.
//!
//! Rows: `wall_ms`, from the first close to the last child reaped (median of the reps), and
//! `extra_threads`, the threads of this process (`/proc/self/task`) after the close minus
//! before it (the most of the reps). Repetitions alternate which side goes first; each costs
//! 2,000 spawns, so the default is 3 (`--reps` to change).
//!
//! Then, after the runtime is gone, the contained rows (`contained_*`, see [`contained`]):
//! 1,000 contained, stderr-captured, `Ready::output`-awaited servers alive at once against the
//! same at 100 — per-server spawn→ready, close of all, peak threads and inotify instances, fds
//! per server, and the cgroups and processes left (1 rep by default, `--reps` to change).

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ending, Ladder, Signal, SocketMode};
use tokio::runtime::Runtime;

mod contained;
pub(super) mod probe;

use super::Settings;
use crate::fixture::{self, ms};
use crate::row::Row;
use crate::stats::median;
use crate::Result;

/// Children per repetition.
pub const N: usize = 1_000;
const ARGS: &[&str] = &["--ignore", "HUP", "--ignore-eof"];
/// `NOSKIP`: the ignored HUP is sent and its grace waited out, as the figures always measured
/// (skipped, it would cost nothing: `skip` measures that).
const LADDER: &str = "NOSKIP,HUP:100ms,TERM:1s";
const BASELINE_CAP: Duration = Duration::from_secs(30);

/// Figures of one side in one repetition.
struct Rep {
    wall_ms: f64,
    extra_threads: f64,
}

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let (soft, hard) = raise_nofile()?;
    eprintln!("scale: RLIMIT_NOFILE soft {soft} → {hard} (raised to the hard limit)");
    let mut rows = tokio_rows(settings)?;
    rows.extend(contained::rows(settings.reps_or(1)));
    Ok(rows)
}

/// The `wall_ms` and `extra_threads` rows; the runtime they build is dropped on return.
fn tokio_rows(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(3);
    eprintln!("scale: {N} children per side and rep");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let ladder: Ladder = LADDER.parse()?;
    let (mut ours, mut baseline) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        if rep % 2 == 0 {
            ours.push(ours_once(&rt, &ladder)?);
            baseline.push(baseline_once(&rt)?);
        } else {
            baseline.push(baseline_once(&rt)?);
            ours.push(ours_once(&rt, &ladder)?);
        }
        let (o, b) = (ours.last().unwrap(), baseline.last().unwrap());
        eprintln!(
            "scale: rep {}/{reps}: ours {:.1} ms +{} threads, kill_on_drop {:.1} ms +{} threads",
            rep + 1,
            o.wall_ms,
            o.extra_threads,
            b.wall_ms,
            b.extra_threads
        );
    }
    let wall = |r: &[Rep]| median(&r.iter().map(|r| r.wall_ms).collect::<Vec<_>>());
    let threads = |r: &[Rep]| r.iter().map(|r| r.extra_threads).fold(0.0, f64::max);
    let name = format!(
        "tokio::process kill_on_drop + wait until /proc shows all reaped \
         (SIGKILL, no grace; {N} children, {reps} reps, cap {}s)",
        BASELINE_CAP.as_secs()
    );
    Ok(vec![
        Row {
            scenario: "scale",
            metric: "wall_ms",
            ours: wall(&ours),
            baseline: wall(&baseline),
            baseline_name: name.clone(),
            unit: "ms",
        },
        Row {
            scenario: "scale",
            metric: "extra_threads",
            ours: threads(&ours),
            baseline: threads(&baseline),
            baseline_name: format!("{name}; most over reps"),
            unit: "threads",
        },
    ])
}

/// Ours: N handles, each closed by `close_async` in its own task.
fn ours_once(rt: &Runtime, ladder: &Ladder) -> Result<Rep> {
    let mut handles = Vec::with_capacity(N);
    for _ in 0..N {
        let handle = ChildHandle::builder(fixture::command(ARGS)?)
            .socket(SocketMode::Stdio)
            .ladder(ladder.clone())
            .spawn()?;
        handles.push(handle);
    }
    let mut pids = Vec::with_capacity(N);
    for handle in &handles {
        let socket = handle.socket().ok_or("the handle has no socket")?;
        pids.push(fixture::read_ready(socket)?);
    }
    let before = thread_count()?;
    let start = Instant::now();
    let reports = rt.block_on(async move {
        let tasks: Vec<_> = handles
            .into_iter()
            .map(|h| tokio::spawn(h.close_async()))
            .collect();
        let mut reports = Vec::with_capacity(tasks.len());
        for task in tasks {
            reports.push(task.await);
        }
        reports
    });
    let wall = start.elapsed();
    let after = thread_count()?;
    for report in reports {
        let report = report??;
        let by_term = Ending::Rung {
            index: 1,
            signal: Signal::TERM,
        };
        if report.ended_by != by_term || report.reaped.is_none() {
            return Err(format!("scale: expected TERM to end it and a reap: {report}").into());
        }
    }
    if let Some(pid) = pids.iter().find(|&&p| proc_present(p)) {
        return Err(format!("scale: pid {pid} still in /proc after close_async").into());
    }
    Ok(Rep {
        wall_ms: ms(wall),
        extra_threads: after as f64 - before as f64,
    })
}

/// Baseline: N `tokio::process` children with `kill_on_drop`, dropped from tasks, then waited
/// for in `/proc` while the runtime keeps running (tokio reaps orphans from its driver).
fn baseline_once(rt: &Runtime) -> Result<Rep> {
    let mut children = Vec::with_capacity(N);
    {
        let _in_runtime = rt.enter();
        for _ in 0..N {
            let (ours, theirs) = UnixStream::pair()?;
            let theirs = OwnedFd::from(theirs);
            let mut cmd = tokio::process::Command::from(fixture::command(ARGS)?);
            cmd.stdin(Stdio::from(theirs.try_clone()?))
                .stdout(Stdio::from(theirs))
                .kill_on_drop(true);
            let child = cmd.spawn()?;
            drop(cmd); // the child's end of the socket lives only in the child
            children.push((child, ours));
        }
    }
    let mut pids = Vec::with_capacity(N);
    for (child, socket) in &children {
        let pid = fixture::read_ready(socket)?;
        if Some(pid) != child.id() {
            return Err(format!("READY names pid {pid}, spawned {:?}", child.id()).into());
        }
        pids.push(pid);
    }
    let before = thread_count()?;
    let start = Instant::now();
    let all_reaped = rt.block_on(async move {
        let tasks: Vec<_> = children
            .into_iter()
            .map(|child| tokio::spawn(async move { drop(child) }))
            .collect();
        for task in tasks {
            let _ = task.await;
        }
        let cap = Instant::now() + BASELINE_CAP;
        loop {
            if !pids.iter().any(|&p| proc_present(p)) {
                return true;
            }
            if Instant::now() >= cap {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    let wall = start.elapsed();
    let after = thread_count()?;
    if !all_reaped {
        eprintln!(
            "scale: kill_on_drop left zombies after {}s; counted as the cap",
            BASELINE_CAP.as_secs()
        );
    }
    Ok(Rep {
        wall_ms: ms(wall.min(BASELINE_CAP)),
        extra_threads: after as f64 - before as f64,
    })
}

/// Whether `/proc` still has `pid`, alive or a zombie (not yet reaped).
fn proc_present(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Threads of this process.
pub fn thread_count() -> Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns (old soft, new soft).
pub fn raise_nofile() -> Result<(u64, u64)> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    let old = limit.current.unwrap_or(u64::MAX);
    limit.current = limit.maximum;
    setrlimit(Resource::Nofile, limit)?;
    let new = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    if new < (3 * N) as u64 {
        return Err(format!("scale: RLIMIT_NOFILE hard limit {new} is below {}", 3 * N).into());
    }
    Ok((old, new))
}
