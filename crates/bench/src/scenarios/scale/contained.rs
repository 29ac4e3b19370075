//! `scale`'s contained rows: N = 1,000 contained, captured, `Ready::output`-awaited servers
//! alive at once in this process, against the same at N = 100 (how the cost grows).
//!
//! Each server is the embedded slowserver with `--stderr-flood 100`: one 100-byte log line
//! (`slowserver log line 0 …`) on stderr, then `READY` on its socket, then it serves until EOF.
//! It is spawned with `contain(Containment::Cgroup)`, `capture(Capture::stderr())`,
//! `ready(Ready::output("slowserver log line"))` and the ladder `EOF:2s,KILL:2s`, one after
//! another, each kept alive; then all are closed, one after another, with `close()`.
//! (`exit_with_parent` is off, as in the `contain` scenario.)
//!
//! Figures of one fleet of N:
//! - `spawn_ready_ms` per server: `spawn()`'s duration, which returns once the ready line was
//!   read (median and p99 over the servers); `spawn_all_ms`: the first spawn to the last
//!   ready; `close_all_ms`: the first close to the last close's return.
//! - `peak_threads`: the most threads of this process (`/proc/self/task`), sampled after each
//!   spawn and each close; `peak_inotify`: inotify instances (`/proc/self/fd` links reading
//!   `anon_inode:inotify`) with all N alive; `fds_per_server`: (fds with N alive − fds
//!   before) / N.
//! - after the close: `cgroups_left` (`childguard-<our pid>-*` in the containment parent,
//!   found from `/proc/self/mountinfo`) and `processes_left` (servers whose pidfd is not
//!   readable, plus any other live child of ours): both must be 0.
//!
//! A spawn or a close that fails ends that fleet's spawning (or is counted) and becomes an error
//! row naming N, the spawn (or close) number and the error; the servers spawned so far are
//! closed and the leftovers still counted. The timing rows of a failed fleet are `null`.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use childguard::{Capture, ChildHandle, Containment, Ladder, Ready, SocketMode};

use super::probe;
use crate::fixture::{self, ms};
use crate::row::Row;
use crate::stats::{median, percentile};
use crate::Result;

/// The fleet sizes: the measured one and its baseline.
pub const N: usize = 1_000;
pub const BASELINE_N: usize = 100;
const ARGS: &[&str] = &["--stderr-flood", "100"];
const READY_TEXT: &str = "slowserver log line";
const LADDER: &str = "EOF:2s,KILL:2s";
/// Generous: a contained spawn is ~30 ms on a loaded 2-CPU machine (the cgroup migration).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What went wrong in a fleet.
struct Failure {
    /// `spawn`, `close` or `count` (of what is left).
    stage: &'static str,
    /// 1-based.
    number: usize,
    error: String,
}

/// The figures of one fleet (NaN where not measured).
struct Fleet {
    n: usize,
    spawn_ready_ms: Vec<f64>,
    spawn_all_ms: f64,
    close_all_ms: f64,
    peak_threads: usize,
    peak_inotify: usize,
    alive_at_peak: usize,
    fds_per_server: f64,
    cgroups_left: usize,
    processes_left: usize,
    failures: Vec<Failure>,
}

/// The contained rows; every failure is a row, never an `Err` (the tokio rows stay printed).
pub fn rows(reps: usize) -> Vec<Row> {
    let parent = match probe::containment_parent() {
        Ok(parent) => parent,
        Err(e) => return vec![error_row("setup", 0, 0, &format!("not run: {e}"))],
    };
    eprintln!(
        "scale: contained: fleets of {BASELINE_N} and {N} under {}, {reps} rep(s)",
        parent.display()
    );
    // Warm-up: whatever the library starts once per process (threads, a helper process) is
    // started before the fleets, so that both fleets count it alike.
    let mut rows = Vec::new();
    if let Err(e) = spawn_one().and_then(|h| Ok(h.close()?)) {
        rows.push(error_row(
            "setup",
            0,
            0,
            &format!("warm-up spawn + close: {e}"),
        ));
    }
    let (mut big, mut small) = (Vec::new(), Vec::new());
    for rep in 0..reps {
        // Alternate which size goes first.
        if rep % 2 == 0 {
            small.push(fleet(BASELINE_N, &parent));
            big.push(fleet(N, &parent));
        } else {
            big.push(fleet(N, &parent));
            small.push(fleet(BASELINE_N, &parent));
        }
    }
    for f in small.iter().chain(&big) {
        for fail in &f.failures {
            rows.push(error_row(fail.stage, f.n, fail.number, &fail.error));
        }
    }
    rows.extend(figure_rows(&big, &small, reps));
    rows
}

fn figure_rows(big: &[Fleet], small: &[Fleet], reps: usize) -> Vec<Row> {
    let ok = |f: &&Fleet| f.failures.is_empty();
    // Timings pool the servers of the fleets that did not fail.
    let pooled = |fs: &[Fleet]| -> Vec<f64> {
        fs.iter()
            .filter(ok)
            .flat_map(|f| f.spawn_ready_ms.clone())
            .collect()
    };
    let med = |fs: &[Fleet], get: fn(&Fleet) -> f64| -> f64 {
        median(&fs.iter().filter(ok).map(get).collect::<Vec<_>>())
    };
    let most = |fs: &[Fleet], get: fn(&Fleet) -> f64| -> f64 {
        fs.iter().map(get).fold(f64::NAN, f64::max)
    };
    let sum = |fs: &[Fleet], get: fn(&Fleet) -> f64| -> f64 { fs.iter().map(get).sum() };
    let (pb, ps) = (pooled(big), pooled(small));
    let base = format!(
        "the same at N={BASELINE_N} (contained, stderr captured, Ready::output; {reps} rep(s))"
    );
    let row = |metric, ours, baseline, how: &str, unit| Row {
        scenario: "scale",
        metric,
        ours,
        baseline,
        baseline_name: format!("{base}; {how}"),
        unit,
    };
    vec![
        row(
            "contained_spawn_ready_p50_ms",
            median(&pb),
            median(&ps),
            "per server, spawn() to ready; ratio = growth, 1 = flat",
            "ms",
        ),
        row(
            "contained_spawn_ready_p99_ms",
            percentile(&pb, 99.0),
            percentile(&ps, 99.0),
            "per server, spawn() to ready; ratio = growth, 1 = flat",
            "ms",
        ),
        row(
            "contained_spawn_all_ms",
            med(big, |f| f.spawn_all_ms),
            med(small, |f| f.spawn_all_ms),
            "first spawn to last ready, one after another; ratio 10 = linear",
            "ms",
        ),
        row(
            "contained_close_all_ms",
            med(big, |f| f.close_all_ms),
            med(small, |f| f.close_all_ms),
            "close() of each, one after another; ratio 10 = linear",
            "ms",
        ),
        row(
            "contained_peak_threads",
            most(big, |f| f.peak_threads as f64),
            most(small, |f| f.peak_threads as f64),
            "threads of this process, most seen; ratio 1 = constant",
            "threads",
        ),
        row(
            "contained_peak_inotify",
            most(big, |f| f.peak_inotify as f64),
            most(small, |f| f.peak_inotify as f64),
            "inotify instances of this process with all alive (0 since the watches are epoll registrations: ratio null)",
            "instances",
        ),
        row(
            "contained_fds_per_server",
            median(&big.iter().map(|f| f.fds_per_server).collect::<Vec<_>>()),
            median(&small.iter().map(|f| f.fds_per_server).collect::<Vec<_>>()),
            "(fds with N alive - fds before) / N (a failed fleet: over those alive)",
            "fds",
        ),
        row(
            "contained_cgroups_left",
            sum(big, |f| f.cgroups_left as f64),
            sum(small, |f| f.cgroups_left as f64),
            "our cgroups left after the close, summed over reps; must be 0",
            "cgroups",
        ),
        row(
            "contained_processes_left",
            sum(big, |f| f.processes_left as f64),
            sum(small, |f| f.processes_left as f64),
            "live processes left after the close, summed over reps; must be 0",
            "processes",
        ),
    ]
}

/// `ours`: the failing spawn (or close) number; `baseline`: N (so `ratio` is how far it got).
fn error_row(stage: &'static str, n: usize, number: usize, error: &str) -> Row {
    let metric = match stage {
        "spawn" => "contained_failed_at_spawn",
        "close" => "contained_failed_at_close",
        "count" => "contained_failed_count",
        _ => "contained_failed_setup",
    };
    let what = match stage {
        "setup" => format!("contained rows: {error}"),
        "count" => format!("N={n}: {error}"),
        _ => format!("N={n}: {stage} #{number} of {n} failed: {error}"),
    };
    eprintln!("scale: {what}");
    Row {
        scenario: "scale",
        metric,
        ours: number as f64,
        baseline: n as f64,
        baseline_name: what,
        unit: stage,
    }
}

/// Spawns `n` servers one after another, keeps them all alive, closes them all, counts what is
/// left. Never returns early with servers alive.
fn fleet(n: usize, parent: &Path) -> Fleet {
    let mut f = Fleet {
        n,
        spawn_ready_ms: Vec::with_capacity(n),
        spawn_all_ms: f64::NAN,
        close_all_ms: f64::NAN,
        peak_threads: 0,
        peak_inotify: 0,
        alive_at_peak: 0,
        fds_per_server: f64::NAN,
        cgroups_left: 0,
        processes_left: 0,
        failures: Vec::new(),
    };
    let fail = |f: &mut Fleet, stage, number, error: String| {
        f.failures.push(Failure {
            stage,
            number,
            error,
        })
    };
    let sample = |f: &mut Fleet| {
        if let Ok(t) = probe::threads() {
            f.peak_threads = f.peak_threads.max(t);
        }
    };
    // Per-process helpers the library started on first use (the warm-up's) are not the
    // fleet's leftovers.
    let helpers = probe::live_children();
    let fds_before = probe::fds().unwrap_or(0);
    sample(&mut f);
    let mut handles: Vec<ChildHandle> = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let began = Instant::now();
        match spawn_one() {
            Ok(handle) => {
                f.spawn_ready_ms.push(ms(began.elapsed()));
                handles.push(handle);
            }
            Err(e) => {
                fail(&mut f, "spawn", i + 1, e.to_string());
                break;
            }
        }
        sample(&mut f);
    }
    if f.failures.is_empty() {
        f.spawn_all_ms = ms(start.elapsed());
    }
    // The peak: everything spawned is alive.
    f.alive_at_peak = handles.len();
    f.peak_inotify = probe::inotify_instances().unwrap_or(0);
    if let (Ok(now), false) = (probe::fds(), handles.is_empty()) {
        f.fds_per_server = (now as f64 - fds_before as f64) / handles.len() as f64;
    }
    // Pinned after the fd count, so the pins are not counted as the servers'.
    let pids: Vec<u32> = handles.iter().filter_map(ChildHandle::id).collect();
    let (mut pinned, mut pins): (Vec<u32>, Vec<OwnedFd>) = (Vec::new(), Vec::new());
    for &pid in &pids {
        match probe::pin(pid) {
            Ok(pin) => {
                pinned.push(pid);
                pins.push(pin);
            }
            // Not yet reaped (its handle holds it), so pidfd_open cannot fail with ESRCH;
            // counted as a child of ours after the close instead.
            Err(e) => eprintln!("scale: contained N={n}: cannot pin server {pid}: {e}"),
        }
    }
    eprintln!(
        "scale: contained N={n}: {} alive, {} threads, {} inotify instances, {:.1} fds each; \
         spawn->ready median by tenth of the fleet: {}",
        f.alive_at_peak,
        f.peak_threads,
        f.peak_inotify,
        f.fds_per_server,
        by_tenth(&f.spawn_ready_ms)
    );
    let start = Instant::now();
    let mut close_failed = false;
    for (i, handle) in handles.into_iter().enumerate() {
        match handle.close() {
            Ok(report) if report.cgroup.as_ref().is_some_and(|c| c.removed) => {}
            Ok(report) => {
                close_failed = true;
                fail(
                    &mut f,
                    "close",
                    i + 1,
                    format!("cgroup not removed: {report}"),
                )
            }
            Err(e) => {
                close_failed = true;
                fail(&mut f, "close", i + 1, e.to_string())
            }
        }
        sample(&mut f);
    }
    if !close_failed {
        f.close_all_ms = ms(start.elapsed());
    }
    match probe::our_cgroups(parent) {
        Ok(left) => f.cgroups_left = left,
        Err(e) => fail(&mut f, "count", 0, format!("counting cgroups left: {e}")),
    }
    // The servers by pidfd (never a reused pid), and any other live child of ours that was
    // not there before the fleet (a server that could not be pinned, anything the library
    // started for these servers).
    f.processes_left = pins.iter().filter(|p| !probe::exited(p)).count();
    let now = probe::live_children().map_err(|e| e.to_string());
    match (now, helpers.map_err(|e| e.to_string())) {
        (Ok(now), Ok(helpers)) => {
            f.processes_left += now
                .iter()
                .filter(|p| !pinned.contains(p) && !helpers.contains(p))
                .count()
        }
        (Err(e), _) | (_, Err(e)) => {
            fail(&mut f, "count", 0, format!("counting processes left: {e}"))
        }
    }
    f
}

/// The median of each tenth of `samples` in spawn order (how the cost grows as servers
/// accumulate), e.g. `2.9 3.0 … ms`.
fn by_tenth(samples: &[f64]) -> String {
    let tenth = samples.len().div_ceil(10).max(1);
    let medians: Vec<String> = samples
        .chunks(tenth)
        .map(|c| format!("{:.1}", median(c)))
        .collect();
    format!("{} ms", medians.join(" "))
}

fn spawn_one() -> Result<ChildHandle> {
    Ok(ChildHandle::builder(fixture::command(ARGS)?)
        .socket(SocketMode::Stdio)
        .ladder(LADDER.parse::<Ladder>()?)
        .contain(Containment::Cgroup)
        // Born in its cgroup (clone3): no cgroup.procs write, whose RCU wait grew with N.
        .own_spawn(true)
        .capture(Capture::stderr())
        .ready(Ready::output(READY_TEXT))
        .ready_timeout(READY_TIMEOUT)
        .spawn()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet_of(n: usize, failed: bool) -> Fleet {
        Fleet {
            n,
            spawn_ready_ms: vec![1.0; n.min(128)],
            spawn_all_ms: if failed { f64::NAN } else { n as f64 },
            close_all_ms: if failed { f64::NAN } else { n as f64 },
            peak_threads: 2,
            peak_inotify: n.min(128),
            alive_at_peak: n.min(128),
            fds_per_server: 6.0,
            cgroups_left: 0,
            processes_left: 0,
            failures: if failed {
                vec![Failure {
                    stage: "spawn",
                    number: 129,
                    error: "inotify_init1: Too many open files".into(),
                }]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn a_failed_spawn_is_a_row_naming_n_the_spawn_and_the_error() {
        let row = error_row("spawn", 1000, 129, "inotify_init1: Too many open files");
        assert_eq!(row.metric, "contained_failed_at_spawn");
        assert_eq!((row.ours, row.baseline), (129.0, 1000.0));
        assert_eq!(
            row.baseline_name,
            "N=1000: spawn #129 of 1000 failed: inotify_init1: Too many open files"
        );
    }

    #[test]
    fn a_failed_fleet_gives_null_timings_and_keeps_its_counts() {
        let rows = figure_rows(&[fleet_of(1000, true)], &[fleet_of(100, false)], 1);
        let get = |metric: &str| rows.iter().find(|r| r.metric == metric).unwrap();
        let p50 = get("contained_spawn_ready_p50_ms");
        assert!(p50.ours.is_nan() && p50.baseline == 1.0);
        assert!(p50.to_json_line().contains("\"ours\":null"));
        assert!(get("contained_close_all_ms").ours.is_nan());
        assert_eq!(get("contained_peak_inotify").ours, 128.0);
        assert_eq!(get("contained_fds_per_server").ours, 6.0);
        assert_eq!(get("contained_processes_left").ours, 0.0);
    }
}
