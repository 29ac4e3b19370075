//! `skip`: a real redis closed by the default ladder (`HUP:1s,TERM:2s,KILL:5s`), the rungs it
//! ignores skipped (ours: the default) against every rung sent (baseline:
//! `Builder::skip_ignored_rungs(false)`, the close before issue 23).
//!
//! redis 7 has `SIGHUP` in `SigIgn`: sent, HUP only costs its 1 s grace before the `TERM` that
//! ends it; skipped, `TERM` goes out at once and redis exits at its next 100 ms cron tick. Each
//! repetition starts a fresh redis (a Unix socket only, `--port 0`, nothing saved), waits until
//! it accepts (`Ready::connect`), and times `close()` alone, from the call to its return.
//! Repetitions alternate which of the two goes first; the first of each is a warm-up.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ending, Ready, Signal};

use super::Settings;
use crate::fixture::ms;
use crate::row::Row;
use crate::stats::median;
use crate::Result;

const INSTALL: &str = "skip: needs redis-server (apt-get install -y redis-server)";

fn redis_server() -> Result<PathBuf> {
    ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| INSTALL.into())
}

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(20);
    let redis = redis_server()?;
    let dir = std::env::temp_dir().join(format!("childguard-bench-skip-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let measured = measure(&redis, &dir, reps);
    let _ = std::fs::remove_dir_all(&dir);
    let (ours, baseline) = measured?;
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let name = "every rung sent: Builder::skip_ignored_rungs(false)";
    Ok(vec![
        Row {
            scenario: "skip",
            metric: "redis_default_ladder_close_ms",
            ours: median(&ours),
            baseline: median(&baseline),
            baseline_name: name.into(),
            unit: "ms",
        },
        Row {
            scenario: "skip",
            metric: "redis_default_ladder_close_max_ms",
            ours: max(&ours),
            baseline: max(&baseline),
            baseline_name: name.into(),
            unit: "ms",
        },
    ])
}

fn measure(redis: &Path, dir: &Path, reps: usize) -> Result<(Vec<f64>, Vec<f64>)> {
    close_once(redis, dir, true)?;
    close_once(redis, dir, false)?;
    let (mut ours, mut baseline) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
    for rep in 0..reps {
        if rep % 2 == 0 {
            ours.push(close_once(redis, dir, true)?);
            baseline.push(close_once(redis, dir, false)?);
        } else {
            baseline.push(close_once(redis, dir, false)?);
            ours.push(close_once(redis, dir, true)?);
        }
    }
    Ok((ours, baseline))
}

/// One redis, started, closed with the default ladder; the close in milliseconds.
fn close_once(redis: &Path, dir: &Path, skip_ignored: bool) -> Result<f64> {
    let socket = dir.join("redis.sock");
    let mut cmd = Command::new(redis);
    cmd.args(["--port", "0", "--unixsocket"])
        .arg(&socket)
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(dir)
        .stdout(Stdio::null());
    let handle = ChildHandle::builder(cmd)
        .ready(Ready::connect(socket.as_path()))
        .ready_timeout(Duration::from_secs(30))
        .skip_ignored_rungs(skip_ignored)
        .spawn()?;
    let start = Instant::now();
    let report = handle.close()?;
    let took = start.elapsed();
    let hup_skipped = report.skipped.iter().any(|s| s.signal == Signal::HUP);
    let by_term = report.ended_by
        == (Ending::Rung {
            index: 1,
            signal: Signal::TERM,
        });
    if hup_skipped != skip_ignored || !by_term {
        return Err(format!(
            "skip: expected redis ended by TERM with HUP {}: {report}",
            if skip_ignored { "skipped" } else { "sent" }
        )
        .into());
    }
    Ok(ms(took))
}
