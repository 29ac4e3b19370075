//! `capture`: a server writing 100 MB of log to stderr, captured by childguard (the shared
//! capture thread, a 64 KiB tail) against the same server writing to `/dev/null`.
//!
//! The fixture (slowserver `--stderr-flood 100M`) writes 100-byte numbered lines in 64 KiB
//! writes before it prints its READY line; the figure is spawn → READY, i.e. the time the
//! server needs to get its log out. Lower is better; the throughput ratio is 1 / ratio.
//! Repetitions alternate which goes first.

use std::process::Stdio;
use std::time::Instant;

use childguard::{Capture, ChildHandle, Ladder, SocketMode};

use super::Settings;
use crate::fixture::{self, ms};
use crate::row::Row;
use crate::stats::median;
use crate::Result;

const FLOOD: &str = "100M";
const FLOOD_BYTES: usize = 100_000_000;

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(10);
    ours_once()?;
    baseline_once()?;
    let mut ours = Vec::with_capacity(reps);
    let mut baseline = Vec::with_capacity(reps);
    for rep in 0..reps {
        if rep % 2 == 0 {
            ours.push(ours_once()?);
            baseline.push(baseline_once()?);
        } else {
            baseline.push(baseline_once()?);
            ours.push(ours_once()?);
        }
    }
    Ok(vec![Row {
        scenario: "capture",
        metric: "log_100mb_ms",
        ours: median(&ours),
        baseline: median(&baseline),
        baseline_name: format!("stderr to /dev/null ({reps} reps of 100 MB)"),
        unit: "ms",
    }])
}

fn ours_once() -> Result<f64> {
    let start = Instant::now();
    let handle = ChildHandle::builder(fixture::command(&["--stderr-flood", FLOOD])?)
        .socket(SocketMode::Stdio)
        .capture(Capture::stderr())
        .ladder("EOF:5s,KILL:1s".parse::<Ladder>()?)
        .spawn()?;
    fixture::read_ready(handle.socket().ok_or("no socket")?)?;
    let took = start.elapsed();
    let report = handle.close()?;
    let tail = report.output_tail.unwrap_or_default();
    if tail.len() != childguard::DEFAULT_TAIL_BYTES.min(FLOOD_BYTES) || !tail.ends_with('\n') {
        return Err(format!("capture: a {} byte tail after 100 MB", tail.len()).into());
    }
    Ok(ms(took))
}

fn baseline_once() -> Result<f64> {
    let start = Instant::now();
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let theirs = std::os::fd::OwnedFd::from(theirs);
    let mut cmd = fixture::command(&["--stderr-flood", FLOOD])?;
    cmd.stdin(Stdio::from(theirs.try_clone()?))
        .stdout(Stdio::from(theirs))
        .stderr(std::fs::File::create("/dev/null")?);
    let mut child = cmd.spawn()?;
    drop(cmd);
    let ready = fixture::read_ready(&ours);
    let took = start.elapsed();
    drop(ours);
    let status = child.wait()?;
    ready?;
    if !status.success() {
        return Err(format!("capture: the baseline server exited with {status}").into());
    }
    Ok(ms(took))
}
