//! `seed`: closing a server that is busy with a slow read.
//!
//! slowserver `--delay-read 10s` gets `READ 1` (so a read with 10 s left is in flight), then we
//! close. Ours: [`ChildHandle::close`] with the default ladder `HUP:1s,TERM:2s,KILL:5s` — the
//! server dies on the HUP at once. Baseline, "waitpid-only close": drop our end of the socket
//! and `child.wait()`; the server only notices once its read is done, ≈ 10 s later. The
//! baseline is capped at 10 s (killed and counted as 10 s if still alive) and, since each of
//! its repetitions costs that long, runs only 3 times, spread between ours.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use childguard::{Ending, Ladder};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

use super::{spread, Settings};
use crate::fixture::{self, ms};
use crate::row::Row;
use crate::Result;

const ARGS: &[&str] = &["--delay-read", "10s"];
const REQUEST: &str = "READ 1";
const CAP: Duration = Duration::from_secs(10);
const BASELINE_REPS: usize = 3;

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(20);
    let baseline_reps = BASELINE_REPS.min(reps);
    let slots = spread(baseline_reps, reps);
    ours_once()?; // warm-up: page cache, first spawn of the pidfd machinery
    let mut ours = Vec::with_capacity(reps);
    let mut baseline = Vec::with_capacity(baseline_reps);
    for i in 0..reps {
        ours.push(ours_once()?);
        if slots.contains(&i) {
            eprintln!(
                "seed: baseline rep {}/{baseline_reps} (≈10 s)…",
                baseline.len() + 1
            );
            baseline.push(baseline_once()?);
        }
    }
    Ok(vec![Row {
        scenario: "seed",
        metric: "close_ms",
        ours: crate::stats::median(&ours),
        baseline: crate::stats::median(&baseline),
        baseline_name: format!(
            "waitpid-only close ({baseline_reps} reps, capped {}s)",
            CAP.as_secs()
        ),
        unit: "ms",
    }])
}

/// Ours: the whole `close()`, in milliseconds.
fn ours_once() -> Result<f64> {
    let handle = fixture::spawn_ours(ARGS, Ladder::default())?;
    let socket = handle.socket().ok_or("the handle has no socket")?;
    fixture::send_line(socket, REQUEST)?;
    thread::sleep(fixture::SETTLE);
    let start = Instant::now();
    let report = handle.close()?;
    let took = start.elapsed();
    if !matches!(report.ended_by, Ending::Rung { index: 0, .. }) {
        return Err(format!("seed: expected the HUP rung to end the server: {report}").into());
    }
    Ok(ms(took))
}

/// Baseline: drop our socket end, then `wait()`; a watchdog kills the server at the cap.
fn baseline_once() -> Result<f64> {
    let (mut child, socket) = fixture::spawn_plain(ARGS)?;
    fixture::send_line(&socket, REQUEST)?;
    thread::sleep(fixture::SETTLE);
    // The watchdog signals through a pidfd, opened while the child is certainly unreaped, so
    // a kill that races with the reap can never hit a recycled pid.
    let pid = i32::try_from(child.id()).ok().and_then(Pid::from_raw);
    let pidfd = pidfd_open(pid.ok_or("bad pid")?, PidfdFlags::empty())?;
    let (tx, rx) = mpsc::channel::<Instant>();
    let watchdog = thread::spawn(move || {
        let Ok(start) = rx.recv() else { return };
        let left = (start + CAP).saturating_duration_since(Instant::now());
        if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(left) {
            let _ = pidfd_send_signal(&pidfd, Signal::KILL);
        }
    });
    let start = Instant::now();
    let _ = tx.send(start);
    drop(socket);
    let waited = child.wait();
    let took = start.elapsed();
    let _ = tx.send(Instant::now());
    let _ = watchdog.join();
    waited?;
    Ok(ms(took.min(CAP)))
}
