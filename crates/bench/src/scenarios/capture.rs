//! `capture`: a server writing 100 MB of log to stderr, captured by childguard (the shared
//! capture thread, a 64 KiB tail) against the same server writing to `/dev/null`.
//!
//! The fixture (slowserver `--stderr-flood 100M`) writes 100-byte numbered lines in 64 KiB
//! writes before it prints its READY line; the figure is spawn → READY, i.e. the time the
//! server needs to get its log out. Lower is better; the throughput ratio is 1 / ratio.
//! Three baselines, one row each: `/dev/null` (the kernel takes nothing), a pipe drained by a
//! plain reader thread (what any reader costs the writer), a tmpfs file (what storing the log
//! anywhere costs). Repetitions rotate which goes first.

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
    baseline_once(Sink::DevNull)?;
    let sinks = [Sink::DevNull, Sink::Pipe, Sink::Tmpfs];
    let mut ours = Vec::with_capacity(reps);
    let mut baselines: [Vec<f64>; 3] = Default::default();
    for rep in 0..reps {
        // Rotate the order, so that no variant always runs first.
        for k in 0..=sinks.len() {
            match (rep + k) % (sinks.len() + 1) {
                0 => ours.push(ours_once()?),
                i => baselines[i - 1].push(baseline_once(sinks[i - 1])?),
            }
        }
    }
    let ours = median(&ours);
    Ok(sinks
        .iter()
        .zip(&baselines)
        .map(|(sink, samples)| Row {
            scenario: "capture",
            metric: "log_100mb_ms",
            ours,
            baseline: median(samples),
            baseline_name: format!("stderr {} ({reps} reps of 100 MB)", sink.describe()),
            unit: "ms",
        })
        .collect())
}

/// Where a baseline server's stderr goes.
#[derive(Clone, Copy)]
enum Sink {
    /// `/dev/null`: the kernel takes nothing (the target: throughput ≥ 0.9 of it).
    DevNull,
    /// A pipe read by a plain thread of ours (`io::copy` into `io::sink`, as `cat`): every
    /// byte moves through the kernel, as with any reader, and nothing is kept.
    Pipe,
    /// A file on tmpfs (`/dev/shm`), nobody reading: the cost of putting the log anywhere.
    Tmpfs,
}

impl Sink {
    fn describe(self) -> &'static str {
        match self {
            Sink::DevNull => "to /dev/null",
            Sink::Pipe => "into a pipe drained by a plain reader thread (io::copy, as cat)",
            Sink::Tmpfs => "to a tmpfs file (/dev/shm), nobody reading",
        }
    }
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

fn baseline_once(sink: Sink) -> Result<f64> {
    let tmpfs =
        std::path::Path::new("/dev/shm").join(format!("childguard-bench-{}", std::process::id()));
    let start = Instant::now();
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    let theirs = std::os::fd::OwnedFd::from(theirs);
    let mut cmd = fixture::command(&["--stderr-flood", FLOOD])?;
    cmd.stdin(Stdio::from(theirs.try_clone()?))
        .stdout(Stdio::from(theirs));
    match sink {
        Sink::DevNull => cmd.stderr(std::fs::File::create("/dev/null")?),
        Sink::Pipe => cmd.stderr(Stdio::piped()),
        Sink::Tmpfs => cmd.stderr(std::fs::File::create(&tmpfs)?),
    };
    let mut child = cmd.spawn()?;
    drop(cmd);
    let reader = child.stderr.take().map(|mut stderr| {
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()))
    });
    let ready = fixture::read_ready(&ours);
    let took = start.elapsed();
    drop(ours);
    let status = child.wait()?;
    let copied = reader.map(|r| r.join());
    let _ = std::fs::remove_file(&tmpfs);
    ready?;
    if !status.success() {
        return Err(format!("capture: the baseline server exited with {status}").into());
    }
    match copied {
        Some(Ok(Ok(n))) if n < FLOOD_BYTES as u64 => {
            return Err(format!("capture: the pipe baseline read only {n} bytes").into())
        }
        Some(Ok(Err(e))) => return Err(format!("capture: the pipe baseline's reader: {e}").into()),
        Some(Err(_)) => return Err("capture: the pipe baseline's reader panicked".into()),
        _ => {}
    }
    Ok(ms(took))
}
