//! `init`: `childguard init` as a container's PID 1 against tini (and `tini-static`), dumb-init
//! and catatonit,
//! each as PID 1 of a new PID namespace (`unshare --pid --fork --mount-proc`, so root), in
//! one run with their repetitions interleaved. Each metric gives one row per peer (the
//! baseline), ours in every one; a peer that is not installed gives rows with no baseline
//! (`null`) whose `baseline_name` says what to install.
//!
//! - `stop_ms`: the engine's stop of a server that ignores `TERM` (a shell with `TERM`
//!   ignored, waiting on a `sleep` that inherits it, plus a `setsid` daemon that ignores it
//!   too): `TERM` to PID 1, then `SIGKILL` after the engine's grace — **3 s here instead of
//!   docker's 10 s**, to keep the run short; ours runs with `--stop-budget 2s` (the grace minus
//!   a 1 s margin). From the `TERM` to PID 1's exit. Theirs forward `TERM` and wait for the
//!   engine's KILL; ours climbs its ladder within the budget.
//! - `left_at_engine_kill`: processes of the namespace still alive (not zombies) when the
//!   engine's `SIGKILL` comes, i.e. what that `SIGKILL` kills (0 if PID 1 had exited).
//! - `reap_us_per_zombie`: 1,000 orphaned `sleep`s adopted by PID 1 are `SIGKILL`ed at once
//!   from outside; the time until none of them is left unreaped, per zombie (the inverse of
//!   zombies reaped per second).
//! - `startup_ms`: `INIT -- true`, spawn to exit, not as PID 1 (stderr to /dev/null: ours
//!   warns there that it is no subreaper). Its note says how each binary is linked: a static
//!   one starts without the dynamic loader's work (`just bench` times our static build).
//!
//! Ours is the `childguard` binary named by `CHILDGUARD_BENCH_CLI`, else the one built beside
//! this bench ([`pid1::Init::ours`]); the scenario fails, saying how to build it, when it is
//! not there.

// `pub(super)`: the container scenario runs the same inits.
pub(super) mod pid1;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pid1::Init;

use super::Settings;
use crate::row::Row;
use crate::stats::{median, rotations};
use crate::Result;

/// The engine's grace before its `SIGKILL` (docker's default is 10 s; shortened, see above).
const ENGINE_GRACE: Duration = Duration::from_secs(3);

/// The peers, by their Debian package (= command) name.
/// `tini-static` (in Debian's `tini`) is tini linked statically: the peer to compare the start-up
/// of our static build with, linking for linking.
const PEERS: [&str; 4] = ["tini", "tini-static", "dumb-init", "catatonit"];

/// The TERM-ignoring server: a `setsid` daemon, and a shell waiting for a `sleep`, all with
/// `TERM` ignored.
const SERVER: &str = "trap '' TERM; (setsid sleep 1000 &); sleep 1001 & wait";

/// One init's figures, one entry per repetition.
#[derive(Debug, Default)]
struct Figures {
    stop_ms: Vec<f64>,
    left: Vec<f64>,
    reap_us: Vec<f64>,
    startup_ms: Vec<f64>,
}

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(5);
    let ours = Init::ours(&["--stop-budget", "2s"])?;
    let plain_ours = Init::ours(&[])?;
    let peers: Vec<std::result::Result<Init, String>> =
        PEERS.iter().map(|p| Init::peer(p)).collect();
    let mut all: Vec<(Init, Figures)> = vec![(ours, Figures::default())];
    for peer in peers.iter().flatten() {
        all.push((peer.clone(), Figures::default()));
    }
    // Interleaved: each repetition runs every init once, in a rotating order.
    for i in rotations(all.len(), reps) {
        let (init, figures) = &mut all[i];
        let (stop, left) = stop_once(init)?;
        figures.stop_ms.push(stop.as_secs_f64() * 1000.0);
        figures.left.push(left as f64);
        figures
            .reap_us
            .push(reap_once(init)?.as_secs_f64() * 1e6 / 1000.0);
        let startup = match i {
            0 => startup_once(&plain_ours)?,
            _ => startup_once(init)?,
        };
        figures.startup_ms.push(startup.as_secs_f64() * 1000.0);
    }
    // Start-up is cheap: more repetitions, interleaved the same way.
    for i in rotations(all.len(), reps * 4) {
        let init = if i == 0 { &plain_ours } else { &all[i].0 };
        let t = startup_once(init)?;
        all[i].1.startup_ms.push(t.as_secs_f64() * 1000.0);
    }
    let ours = &all[0].1;
    // Read once (the whole binary), not once per peer's row.
    let ours_linking = all[0].0.linking();
    let mut rows = Vec::new();
    for (peer, found) in PEERS.iter().zip(&peers) {
        let theirs = all
            .iter()
            .find(|(init, _)| init.name == *peer)
            .map(|(_, f)| f);
        let note = |what: &str| match (found, theirs) {
            (Ok(_), Some(_)) => format!("{peer} as PID 1, {what}"),
            (Err(why), _) => why.clone(),
            (Ok(_), None) => format!("{peer}: not measured"),
        };
        let pick = |f: fn(&Figures) -> &Vec<f64>| theirs.map_or(f64::NAN, |t| median(f(t)));
        rows.push(Row {
            scenario: "init",
            metric: "stop_ms",
            ours: median(&ours.stop_ms),
            baseline: pick(|f| &f.stop_ms),
            baseline_name: note(&format!(
                "TERM then KILL after {} s (engine grace shortened from 10 s; ours --stop-budget 2s), median of {reps}",
                ENGINE_GRACE.as_secs()
            )),
            unit: "ms",
        });
        rows.push(Row {
            scenario: "init",
            metric: "left_at_engine_kill",
            ours: max(&ours.left),
            baseline: theirs.map_or(f64::NAN, |t| max(&t.left)),
            baseline_name: note(&format!(
                "processes alive when the engine's KILL comes, max of {reps}"
            )),
            unit: "processes",
        });
        rows.push(Row {
            scenario: "init",
            metric: "reap_us_per_zombie",
            ours: median(&ours.reap_us),
            baseline: pick(|f| &f.reap_us),
            baseline_name: note(&format!(
                "1,000 orphans KILLed at once until all reaped, per zombie, median of {reps}"
            )),
            unit: "us",
        });
        rows.push(Row {
            scenario: "init",
            metric: "startup_ms",
            ours: median(&ours.startup_ms),
            baseline: pick(|f| &f.startup_ms),
            baseline_name: note(&format!(
                "INIT -- true, spawn to exit, median of {}; ours linked {}, {peer} {}",
                reps * 5,
                ours_linking,
                found.as_ref().map_or("not found", Init::linking),
            )),
            unit: "ms",
        });
    }
    Ok(rows)
}

fn max(samples: &[f64]) -> f64 {
    samples.iter().copied().fold(f64::NAN, f64::max)
}

/// The engine's stop: `TERM`, then `SIGKILL` after [`ENGINE_GRACE`] if PID 1 is still there.
/// Returns the time to PID 1's exit and the processes left when the KILL came (0 if none
/// had to come).
fn stop_once(init: &Init) -> Result<(Duration, usize)> {
    let mut running = init.spawn_pid1(SERVER)?;
    // Up: the daemon and the shell's sleep exec'd (TERM ignored in both).
    running.await_named("sleep", 2)?;
    let sent = Instant::now();
    running.signal(libc::SIGTERM);
    let deadline = sent + ENGINE_GRACE;
    while Instant::now() < deadline {
        if running.exited() {
            return Ok((sent.elapsed(), 0));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let left = pid1::alive_descendants(running.init);
    running.kill_and_wait();
    Ok((sent.elapsed(), left))
}

/// 1,000 orphaned `sleep`s adopted by PID 1, `SIGKILL`ed at once; the time until PID 1 has no
/// child but CMD (each zombie stays in its `children` file until reaped).
fn reap_once(init: &Init) -> Result<Duration> {
    let script = "for i in $(seq 1 1000); do (sleep 1000 &); done; exec sleep 1001";
    let running = init.spawn_pid1(script)?;
    running.await_named("sleep", 1001)?;
    let cmd = cmd_of(&running);
    let orphans: Vec<u32> = pid1::children_of(running.init)
        .into_iter()
        .filter(|&c| c != cmd)
        .collect();
    let started = Instant::now();
    for &pid in &orphans {
        let _ = pid1::kill(pid, libc::SIGKILL);
    }
    loop {
        if pid1::children_of(running.init).iter().all(|&c| c == cmd) {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            running.kill_and_wait();
            return Err(format!("{}: 1,000 zombies not reaped in 60 s", init.name).into());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let took = started.elapsed();
    running.kill_and_wait();
    Ok(took)
}

/// CMD: the child of PID 1 whose command line ends in `sleep 1001` (it exec'd).
fn cmd_of(running: &pid1::Running) -> u32 {
    pid1::children_of(running.init)
        .into_iter()
        .find(|&c| {
            std::fs::read(format!("/proc/{c}/cmdline")).is_ok_and(|line| line.ends_with(b"1001\0"))
        })
        .unwrap_or(0)
}

/// `INIT -- true`, spawn to exit.
fn startup_once(init: &Init) -> Result<Duration> {
    let started = Instant::now();
    let status = Command::new(&init.argv[0])
        .args(&init.argv[1..])
        .arg("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let took = started.elapsed();
    if !status.success() {
        return Err(format!("{} -- true: {status}", init.name).into());
    }
    Ok(took)
}
