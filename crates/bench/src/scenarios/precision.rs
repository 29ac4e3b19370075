//! `precision`: how late the next rung comes once a grace has run out.
//!
//! slowserver `--ignore HUP --ignore-eof` survives both the shutdown and the HUP, so the KILL
//! is always needed. Overshoot = (when the KILL was sent) − (when the HUP was sent + 100 ms).
//! Ours: the ladder `HUP:100ms,KILL:1s`, read from the [`CloseReport`](childguard::CloseReport)
//! (`signals[1].at − signals[0].at − 100 ms`; both instants are taken right before the
//! respective signal is sent). Baselines: a hand-written loop — `kill(HUP)`, then
//! `loop { try_wait → done; elapsed ≥ 100 ms → kill(KILL); sleep(step) }` — with a 10 ms and a
//! 1 ms step. Every repetition runs all three, in a rotating order.
//!
//! Default 50 repetitions; `overshoot_p99` is nearest-rank, so below 100 repetitions it is the
//! largest overshoot seen.

use std::thread;
use std::time::{Duration, Instant};

use childguard::{Ladder, Signal as CgSignal};
use rustix::process::Signal;

use super::Settings;
use crate::fixture::{self, ms};
use crate::row::Row;
use crate::stats::{median, percentile};
use crate::Result;

const ARGS: &[&str] = &["--ignore", "HUP", "--ignore-eof"];
/// `NOSKIP`: the ignored HUP is sent and its grace waited out — the grace whose end is timed.
const LADDER: &str = "NOSKIP,HUP:100ms,KILL:1s";
const GRACE: Duration = Duration::from_millis(100);
/// The baselines' sleep steps, with their row names.
const LOOPS: [(Duration, &str); 2] = [
    (Duration::from_millis(10), "try_wait loop, 10 ms sleep"),
    (Duration::from_millis(1), "try_wait loop, 1 ms sleep"),
];

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(50);
    let ladder: Ladder = LADDER.parse()?;
    let mut ours = Vec::with_capacity(reps);
    let mut loops: [Vec<f64>; 2] = Default::default();
    ours_once(&ladder)?; // warm-up
    for rep in 0..reps {
        // 0 = ours, 1 and 2 = the loops; rotate who goes first.
        for k in 0..3 {
            match (rep + k) % 3 {
                0 => ours.push(ours_once(&ladder)?),
                i => loops[i - 1].push(baseline_once(LOOPS[i - 1].0)?),
            }
        }
    }
    let mut rows = Vec::new();
    for (metric, stat) in [
        ("overshoot_p50", median as fn(&[f64]) -> f64),
        ("overshoot_p99", |xs: &[f64]| percentile(xs, 99.0)),
    ] {
        for (samples, (_, name)) in loops.iter().zip(LOOPS) {
            rows.push(Row {
                scenario: "precision",
                metric,
                ours: stat(&ours),
                baseline: stat(samples),
                baseline_name: name.to_string(),
                unit: "ms",
            });
        }
    }
    Ok(rows)
}

/// Ours: overshoot of the KILL rung, from the close report, in milliseconds.
fn ours_once(ladder: &Ladder) -> Result<f64> {
    let handle = fixture::spawn_ours(ARGS, ladder.clone())?;
    let report = handle.close()?;
    match report.signals.as_slice() {
        [hup, kill, ..] if hup.signal == CgSignal::HUP && kill.signal == CgSignal::KILL => {
            Ok(ms(kill.at) - ms(hup.at) - ms(GRACE))
        }
        _ => Err(format!("precision: expected HUP then KILL: {report}").into()),
    }
}

/// Baseline: `kill(HUP)`, then a `try_wait` loop sleeping `step`; overshoot in milliseconds.
fn baseline_once(step: Duration) -> Result<f64> {
    let (mut child, socket) = fixture::spawn_plain(ARGS)?;
    drop(socket); // as ours: the socket is gone before the first signal
    let start = Instant::now();
    fixture::kill(&child, Signal::HUP)?;
    let overshoot = loop {
        if let Some(status) = child.try_wait()? {
            return Err(format!("precision: the server ignoring HUP exited: {status}").into());
        }
        let elapsed = start.elapsed();
        if elapsed >= GRACE {
            fixture::kill(&child, Signal::KILL)?;
            break ms(elapsed) - ms(GRACE);
        }
        thread::sleep(step);
    };
    child.wait()?;
    Ok(overshoot)
}
