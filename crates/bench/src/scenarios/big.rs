//! `big`: how fast a big child is gone after `SIGKILL`, four ways, at 1, 4 and 8 GiB.
//!
//! The kernel frees a process's memory before its parent's `waitpid` returns, page by page:
//! the cost grows linearly with what the child touched. Each repetition spawns the embedded
//! slowserver with `--alloc N` (every 4 KiB page touched; `_huge` rows add `--hugepages`,
//! `MADV_HUGEPAGE`), waits for `READY`, then times from just before `SIGKILL` to:
//!
//! - `plain` (the baseline): std `Child`, `kill(SIGKILL)` + `wait()`.
//! - `mrelease_Ng`: ours, ladder `KILL:30s`, `release_memory_on_kill(true)`: a helper thread
//!   spinning on `process_mrelease` starts the release the moment the rung's `SIGKILL` lands,
//!   on another CPU than the dying child (release.rs), while the close waits on the pidfd;
//!   timed `close()`. The row says in how many closes the release won the `exit_mm` race.
//! - `kill50ms_8g` (largest 4 KiB size only): ours as `mrelease_Ng` but ladder `KILL:50ms`,
//!   shorter than the teardown: timed `close()`, which must return at the rung's deadline
//!   (the reaper reaps afterwards, drained before the next repetition). Its baseline is that
//!   bound, 50 ms, not a measurement: ratio ≤ 1.2 is "within the bound + 10 ms".
//! - `teardown_Ng`: ours, slowserver run with `--async-teardown` (childguard-teardown's
//!   CLONE_VM helper pays for the memory after the child is gone); timed `close()`, memory
//!   release off so only the helper works.
//! - `background_drop_Ng`: ours, `Reap::Background`: timed `drop()` of the handle; the reaper
//!   pays afterwards (and is drained before the next repetition).
//!
//! `ratio` = ours / plain for each. Sizes the machine cannot hold (MemAvailable < 1.25 × N)
//! are skipped and said so on stderr. Each repetition touches N GiB, so the default is 5
//! repetitions (each row's baseline_name says so).

use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ladder, MemoryRelease, Reap, SocketMode};
use rustix::process::Signal;

use super::Settings;
use crate::fixture::{self, ms};
use crate::row::Row;
use crate::stats::median;
use crate::Result;

const SIZES_GIB: &[u32] = &[1, 4, 8];

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(5);
    let mut rows = Vec::new();
    let largest_fitting = SIZES_GIB.iter().copied().filter(|&g| fits(g)).max();
    for &gib in SIZES_GIB {
        if !fits(gib) {
            eprintln!(
                "childguard-bench: big: skipping {gib} GiB: MemAvailable is below {:.2} GiB",
                1.25 * f64::from(gib)
            );
            continue;
        }
        let largest = Some(gib) == largest_fitting;
        rows.extend(measure(gib, false, reps, largest)?);
        if largest {
            rows.extend(measure(gib, true, reps, false)?);
        }
    }
    Ok(rows)
}

/// The `KILL:50ms` close's bound: the ladder's total grace.
const SHORT_KILL: Duration = Duration::from_millis(50);

fn measure(gib: u32, huge: bool, reps: usize, short_kill: bool) -> Result<Vec<Row>> {
    let size = gib.to_string();
    let mut args = vec!["--alloc", size.as_str(), "--ignore-eof"];
    if huge {
        args.push("--hugepages");
    }
    eprintln!(
        "childguard-bench: big: {gib} GiB{}…",
        if huge { " (MADV_HUGEPAGE)" } else { "" }
    );
    let variants = if short_kill { 5 } else { 4 };
    let mut samples: [Vec<f64>; 5] = Default::default();
    let mut released = 0;
    for rep in 0..reps {
        for k in 0..variants {
            let i = (rep + k) % variants;
            let took = match i {
                0 => plain(&args)?,
                1 => {
                    let (took, outcome) = ours_close(&args, "KILL:30s", true, false)?;
                    released +=
                        usize::from(matches!(outcome, Some(MemoryRelease::Released { .. })));
                    took
                }
                2 => ours_close(&args, "KILL:30s", false, true)?.0,
                3 => background_drop(&args)?,
                _ => short_kill_close(&args)?,
            };
            samples[i].push(took);
            settle_memory();
        }
    }
    let [plain, mrelease, teardown, background, short] =
        samples.map(|s| if s.is_empty() { 0.0 } else { median(&s) });
    let suffix = if huge { "_huge" } else { "" };
    let name = format!(
        "plain SIGKILL + waitpid of a {gib} GiB child{} (median of {reps} reps; each touches {gib} GiB)",
        if huge { ", MADV_HUGEPAGE" } else { "" }
    );
    let row = |metric: String, ours: f64| Row {
        scenario: "big",
        metric: Box::leak(metric.into_boxed_str()),
        ours,
        baseline: plain,
        baseline_name: name.clone(),
        unit: "ms",
    };
    let mut release_row = row(format!("mrelease_{gib}g{suffix}"), mrelease);
    release_row.baseline_name = format!(
        "{name}; process_mrelease ran in {released} of {reps} closes (the others: skipped or \
         ESRCH, see release.rs)"
    );
    let mut rows = vec![
        row(format!("teardown_{gib}g{suffix}"), teardown),
        release_row,
        row(format!("background_drop_{gib}g{suffix}"), background),
    ];
    if short_kill {
        rows.push(Row {
            scenario: "big",
            metric: Box::leak(format!("kill50ms_{gib}g").into_boxed_str()),
            ours: short,
            baseline: ms(SHORT_KILL),
            baseline_name: format!(
                "the bound of ladder KILL:50ms: its 50 ms grace, not measured (close of a {gib} \
                 GiB child with process_mrelease; median of {reps} reps)"
            ),
            unit: "ms",
        });
    }
    Ok(rows)
}

/// Baseline: SIGKILL + waitpid.
fn plain(args: &[&str]) -> Result<f64> {
    let (mut child, socket) = fixture::spawn_plain(args)?;
    let start = Instant::now();
    fixture::kill(&child, Signal::KILL)?;
    child.wait()?;
    let took = ms(start.elapsed());
    drop(socket);
    Ok(took)
}

fn spawn_big(
    args: &[&str],
    ladder: &str,
    release: bool,
    teardown: bool,
    reap: Reap,
) -> Result<ChildHandle> {
    let mut full: Vec<&str> = args.to_vec();
    if teardown {
        full.push("--async-teardown");
    }
    let ladder: Ladder = ladder.parse()?;
    let handle = ChildHandle::builder(fixture::command(&full)?)
        .socket(SocketMode::Stdio)
        .ladder(ladder)
        .release_memory_on_kill(release)
        .reap(reap)
        .spawn()?;
    fixture::read_ready(handle.socket().ok_or("no socket")?)?;
    Ok(handle)
}

/// Ours, blocking close with the KILL rung (memory release or teardown helper): the time,
/// and what the memory release did.
fn ours_close(
    args: &[&str],
    ladder: &str,
    release: bool,
    teardown: bool,
) -> Result<(f64, Option<MemoryRelease>)> {
    let handle = spawn_big(args, ladder, release, teardown, Reap::Blocking)?;
    let start = Instant::now();
    let report = handle.close()?;
    let took = ms(start.elapsed());
    if report.reaped.is_none() {
        return Err(format!("big: child not reaped: {report}").into());
    }
    Ok((took, report.memory_release))
}

/// Ours, blocking close with `KILL:50ms` and memory release: returns at the rung's deadline
/// (or the exit, if sooner); the reaper reaps afterwards.
fn short_kill_close(args: &[&str]) -> Result<f64> {
    let handle = spawn_big(args, "KILL:50ms", true, false, Reap::Blocking)?;
    let start = Instant::now();
    let report = handle.close()?;
    let took = ms(start.elapsed());
    if report.memory_release.is_none() {
        return Err(format!("big: KILL:50ms: no memory release: {report}").into());
    }
    if !childguard::reaper::drain(Instant::now() + Duration::from_secs(60)) {
        return Err("big: the reaper did not finish within 60 s".into());
    }
    Ok(took)
}

/// Ours, `Reap::Background`: how long `drop` blocks.
fn background_drop(args: &[&str]) -> Result<f64> {
    let handle = spawn_big(args, "KILL:30s", true, false, Reap::Background)?;
    let start = Instant::now();
    drop(handle);
    let took = ms(start.elapsed());
    if !childguard::reaper::drain(Instant::now() + Duration::from_secs(60)) {
        return Err("big: the reaper did not finish within 60 s".into());
    }
    Ok(took)
}

/// GiB of MemAvailable.
fn available_gib() -> f64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / (1024.0 * 1024.0))
}

fn fits(gib: u32) -> bool {
    available_gib() >= 1.25 * f64::from(gib)
}

/// Waits (up to 20 s) until memory freed in the background (teardown helper, reaper) is back,
/// so one repetition's leftovers do not slow the next.
fn settle_memory() {
    let end = Instant::now() + Duration::from_secs(20);
    let mut last = available_gib();
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
        let now = available_gib();
        if (now - last).abs() < 0.01 {
            return;
        }
        last = now;
    }
}
