//! `overhead`: what the close path costs when nothing goes wrong.
//!
//! Plain slowserver exits on EOF. Ours: [`ChildHandle::close`](childguard::ChildHandle::close)
//! with the ladder `EOF:1s,KILL:1s`, so no signal is needed. Baseline: `shutdown(Both)` on a
//! std `UnixStream`, close it, `child.wait()`. Only the close is timed (from just before it to
//! its return), not the spawn. Repetitions alternate ours-first and baseline-first.

use std::net::Shutdown;
use std::time::Instant;

use childguard::{Ending, Ladder};

use super::Settings;
use crate::fixture::{self, ms};
use crate::row::Row;
use crate::stats::median;
use crate::Result;

const LADDER: &str = "EOF:1s,KILL:1s";
const WARM_UP: usize = 2;

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(20);
    let ladder: Ladder = LADDER.parse()?;
    for _ in 0..WARM_UP {
        ours_once(&ladder)?;
        baseline_once()?;
    }
    let mut ours = Vec::with_capacity(reps);
    let mut baseline = Vec::with_capacity(reps);
    for rep in 0..reps {
        if rep % 2 == 0 {
            ours.push(ours_once(&ladder)?);
            baseline.push(baseline_once()?);
        } else {
            baseline.push(baseline_once()?);
            ours.push(ours_once(&ladder)?);
        }
    }
    Ok(vec![Row {
        scenario: "overhead",
        metric: "close_ms",
        ours: median(&ours),
        baseline: median(&baseline),
        baseline_name: "shutdown(Both) + child.wait()".into(),
        unit: "ms",
    }])
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
