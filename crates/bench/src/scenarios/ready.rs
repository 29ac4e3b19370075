//! `ready`: how soon `spawn()` returns after the server became ready, against the usual test
//! harness loop (a connect retried every 10 ms, and every 100 ms).
//!
//! The fixture (slowserver `--ready-after D --ready-stamp FILE`) writes the `CLOCK_MONOTONIC`
//! instant at which it becomes ready, then listens (`--listen PATH`) and sends `READY=1`
//! (`--notify`). The figure is the *detection delay*: from that instant to the moment the
//! waiter knows — `spawn()` returning for ours, the first accepted connect for the baselines.
//! `D` varies per repetition (40–59 ms), so a loop's phase against the readiness is not fixed.
//! Repetitions interleave the four waiters.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ladder, Ready};

use super::Settings;
use crate::fixture;
use crate::row::Row;
use crate::stats::median;
use crate::Result;

/// `CLOCK_MONOTONIC` now, in ms (the clock slowserver stamps with; Rust's `Instant` uses it too).
fn monotonic_ms() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as f64 * 1000.0 + t.tv_nsec as f64 / 1e6
}

fn stamp_ms(path: &Path) -> Result<f64> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("ready: no stamp in {} ({e})", path.display()))?;
    Ok(text.trim().parse::<f64>()? / 1e6)
}

#[derive(Clone, Copy)]
enum Waiter {
    Notify,
    Connect,
    Loop(Duration),
}

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(20);
    let dir = std::env::temp_dir().join(format!("childguard-bench-ready-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let waiters = [
        Waiter::Notify,
        Waiter::Connect,
        Waiter::Loop(Duration::from_millis(10)),
        Waiter::Loop(Duration::from_millis(100)),
    ];
    let mut delays: Vec<Vec<f64>> = vec![Vec::with_capacity(reps); waiters.len()];
    let result = (|| -> Result<()> {
        for rep in 0..reps + 1 {
            for k in 0..waiters.len() {
                // Rotate who goes first; rep 0 is a warm-up.
                let i = (k + rep) % waiters.len();
                let after = Duration::from_millis(40 + (rep as u64 * 7) % 20);
                let delay = once(waiters[i], &dir, after)?;
                if rep > 0 {
                    delays[i].push(delay);
                }
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    let loop10 = median(&delays[2]);
    let loop100 = median(&delays[3]);
    let row = |metric, ours: f64, baseline, name: &str| Row {
        scenario: "ready",
        metric,
        ours,
        baseline,
        baseline_name: name.into(),
        unit: "ms",
    };
    Ok(vec![
        row(
            "notify_delay_ms",
            median(&delays[0]),
            loop10,
            "connect retried every 10 ms",
        ),
        row(
            "connect_delay_ms",
            median(&delays[1]),
            loop10,
            "connect retried every 10 ms",
        ),
        row(
            "notify_delay_ms",
            median(&delays[0]),
            loop100,
            "connect retried every 100 ms",
        ),
        row(
            "connect_delay_ms",
            median(&delays[1]),
            loop100,
            "connect retried every 100 ms",
        ),
    ])
}

/// One start of the fixture, waited for by `waiter`: the detection delay in ms.
fn once(waiter: Waiter, dir: &Path, after: Duration) -> Result<f64> {
    let socket = dir.join("s");
    let stamp = dir.join("stamp");
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&stamp);
    let after_text = format!("{}ms", after.as_millis());
    let mut args = vec![
        "--ignore-eof",
        "--ready-after",
        &after_text,
        "--ready-stamp",
        stamp.to_str().ok_or("non-UTF-8 temp dir")?,
        "--listen",
        socket.to_str().ok_or("non-UTF-8 temp dir")?,
    ];
    if matches!(waiter, Waiter::Notify) {
        args.push("--notify");
    }
    let mut cmd = fixture::command(&args)?;
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    let known_at = match waiter {
        Waiter::Notify | Waiter::Connect => {
            let ready = match waiter {
                Waiter::Notify => Ready::Notify,
                _ => Ready::connect(socket.as_path()),
            };
            let handle = ChildHandle::builder(cmd)
                .ready(ready)
                .ladder("KILL:1s".parse::<Ladder>()?)
                .spawn()?;
            let known_at = monotonic_ms();
            let report = handle.close()?;
            if report.status.is_none() {
                return Err(format!("ready: the fixture was not reaped: {report}").into());
            }
            known_at
        }
        Waiter::Loop(every) => harness_loop(cmd, &socket, every)?,
    };
    Ok(known_at - stamp_ms(&stamp)?)
}

/// The usual harness: spawn, then try to connect every `every` until it works.
fn harness_loop(mut cmd: Command, socket: &Path, every: Duration) -> Result<f64> {
    let mut child = cmd.spawn()?;
    let give_up = Instant::now() + Duration::from_secs(30);
    let known_at = loop {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            break Ok(monotonic_ms());
        }
        if Instant::now() >= give_up {
            break Err("ready: the fixture never listened");
        }
        std::thread::sleep(every);
    };
    let _ = child.kill();
    let _ = child.wait();
    Ok(known_at?)
}
