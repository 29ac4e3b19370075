//! `probe`: the wall time of one `childguard probe` of a real redis (issue 23 item 5), against
//! what a naive fixed-wait probe of the same signals and runs would spend waiting.
//!
//! `childguard probe --json --ready unix:SOCK -- redis-server --port 0 --unixsocket SOCK
//! --save '' --appendonly no --dir DIR` with its defaults: the six signals
//! `HUP,INT,TERM,QUIT,USR1,USR2`, 3 runs each, a 10 s window. The CLI runs in a child process,
//! this binary re-executed as `childguard-bench childguard probe …` (the CLI's library is
//! linked in), so the figure includes every spawn, readiness wait, signal, exit wait and
//! `KILL` close, from the start of that process to its exit.
//!
//! The baseline is **computed, not measured**: signals × runs × window — what a probe that
//! waits out the whole window after each signal (a `sleep`, then a look) spends in those waits
//! alone, before any spawn. Ours waits the window only where the server does not exit (redis
//! ignores `HUP`: 3 × 10 s) and returns at the exit otherwise.

use std::process::{Command, Stdio};
use std::time::Instant;

use super::Settings;
use crate::row::Row;
use crate::stats::median;
use crate::Result;

const INSTALL: &str = "probe: needs redis-server (apt-get install -y redis-server)";
/// The probe's defaults (`childguard probe --help`).
const SIGNALS: f64 = 6.0;
const RUNS: f64 = 3.0;
const WINDOW_S: f64 = 10.0;

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let redis = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
        .ok_or(INSTALL)?;
    let dir = std::env::temp_dir().join(format!("childguard-bench-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let socket = dir.join("redis.sock").display().to_string();
    let exe = std::env::current_exe()?;
    let mut walls = Vec::new();
    for _ in 0..settings.reps_or(1) {
        let started = Instant::now();
        let output = Command::new(&exe)
            .args(["childguard", "probe", "--json", "--ready"])
            .arg(format!("unix:{socket}"))
            .args([
                "--",
                redis,
                "--port",
                "0",
                "--unixsocket",
                &socket,
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--dir"])
            .arg(&dir)
            .stdin(Stdio::null())
            .output()?;
        let wall = started.elapsed();
        let report: serde_json::Value = serde_json::from_slice(&output.stdout).map_err(|e| {
            format!(
                "probe: not one JSON object ({e}); exit {:?}, stderr: {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
        if output.status.code() != Some(0) {
            return Err(format!("probe: exit {:?}: {report}", output.status.code()).into());
        }
        eprintln!(
            "childguard-bench: probe of redis in {:.1} s: recommended {}",
            wall.as_secs_f64(),
            report["recommended_ladder"]
        );
        walls.push(wall.as_secs_f64() * 1000.0);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(vec![Row {
        scenario: "probe",
        metric: "probe_wall_ms",
        ours: median(&walls),
        baseline: SIGNALS * RUNS * WINDOW_S * 1000.0,
        baseline_name: "computed: 6 signals x 3 runs x the 10 s window, waited out in full (a fixed-wait probe's waits alone)".into(),
        unit: "ms",
    }])
}
