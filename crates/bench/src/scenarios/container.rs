//! `container`: `childguard init` as PID 1 of a real runc container against tini-static,
//! dumb-init and catatonit in the same runc (issue 50 item 5), stopped as an engine stops one:
//! `runc kill ID TERM` to PID 1. The server is the `init` scenario's: a shell with `TERM`
//! ignored, waiting on a `sleep` that inherits that, plus a `setsid` sleeper that ignores it too.
//! Ours runs as docs/containers.md's Dockerfile has it (`--stop-budget 9s`, docker's 10 s
//! grace minus a margin).
//!
//! - `stop_ms`: from the start of `runc kill ID TERM` (runc's own run included) to PID 1's exit
//!   (its pidfd). The peers forward `TERM` and wait for the engine's `KILL`, which docker sends
//!   10 s later: they are watched for [`CAP`] only, and a container still running then counts
//!   as [`CAP`] (the row says in how many repetitions).
//! - `stop_max_ms`: the slowest of those stops.
//! - `left_at_cap`: the container's processes alive (PID 1 included, zombies not) at the stop or
//!   at [`CAP`]: what the engine's `KILL` would find (0 once PID 1 exited: the kernel ends a PID
//!   namespace with its PID 1).
//!
//! Ours is the binary the `init` scenario runs ([`Init::ours`]); the bed is
//! [`runc`](self::runc) (needs root, runc and busybox).

mod runc;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::init::pid1::Init;
use super::Settings;
use crate::row::Row;
use crate::stats::{median, rotations};
use crate::Result;

/// How long a container is watched after the `TERM` (docker's `KILL` comes at 10 s).
const CAP: Duration = Duration::from_secs(3);

/// The peers, static where Debian ships them so (dumb-init is bound with its libraries).
const PEERS: [&str; 3] = ["tini-static", "dumb-init", "catatonit"];

/// The TERM-ignoring server (the `init` scenario's, and tests/runc_init.rs's).
const SERVER: &str = "trap '' TERM; setsid sleep 1000 & sleep 1001 & wait";

/// One init's figures, one entry per repetition.
#[derive(Debug, Default)]
struct Figures {
    stop_ms: Vec<f64>,
    left: Vec<f64>,
    capped: usize,
    kill_ms: Vec<f64>,
}

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(10);
    let mut bed = runc::Bed::new()?;
    let peers: Vec<std::result::Result<Init, String>> =
        PEERS.iter().map(|p| Init::peer(p)).collect();
    let mut all = vec![(Init::ours(&["--stop-budget", "9s"])?, Figures::default())];
    for peer in peers.iter().flatten() {
        all.push((peer.clone(), Figures::default()));
    }
    // Interleaved: each repetition stops every init once, in a rotating order.
    for i in rotations(all.len(), reps) {
        let (init, figures) = &mut all[i];
        stop_once(&mut bed, init, figures)?;
    }
    let ours = &all[0].1;
    let mut rows = Vec::new();
    for (peer, found) in PEERS.iter().zip(&peers) {
        let theirs = all
            .iter()
            .find(|(init, _)| init.name == *peer)
            .map(|(_, f)| f);
        let note = |what: String| match (found, theirs) {
            (Ok(_), Some(_)) => format!("{peer} as PID 1 under runc, {what}"),
            (Err(why), _) => why.clone(),
            (Ok(_), None) => format!("{peer}: not measured"),
        };
        let capped = theirs.map_or(0, |t| t.capped);
        rows.push(Row {
            scenario: "container",
            metric: "stop_ms",
            ours: median(&ours.stop_ms),
            baseline: theirs.map_or(f64::NAN, |t| median(&t.stop_ms)),
            baseline_name: note(format!(
                "runc kill TERM to PID 1's exit, median of {reps}; theirs still running at {} s in {capped} of {reps} (counted as {} ms); ours --stop-budget 9s; runc kill itself took {:.1} ms (median)",
                CAP.as_secs(),
                CAP.as_millis(),
                median(&ours.kill_ms),
            )),
            unit: "ms",
        });
        rows.push(Row {
            scenario: "container",
            metric: "stop_max_ms",
            ours: max(&ours.stop_ms),
            baseline: theirs.map_or(f64::NAN, |t| max(&t.stop_ms)),
            baseline_name: note(format!(
                "the same, the slowest of {reps} (the issue's bound for ours: 100 ms)"
            )),
            unit: "ms",
        });
        rows.push(Row {
            scenario: "container",
            metric: "left_at_cap",
            ours: max(&ours.left),
            baseline: theirs.map_or(f64::NAN, |t| max(&t.left)),
            baseline_name: note(format!(
                "the container's processes alive (PID 1 included) at the stop or {} s after the TERM, max of {reps}",
                CAP.as_secs()
            )),
            unit: "processes",
        });
    }
    Ok(rows)
}

fn max(samples: &[f64]) -> f64 {
    samples.iter().copied().fold(f64::NAN, f64::max)
}

/// One container with `init` as PID 1 and the server as CMD, up; `runc kill TERM`; watched
/// until PID 1 exits or [`CAP`]; then ended (`runc kill KILL` if still running).
fn stop_once(bed: &mut runc::Bed, init: &Init, figures: &mut Figures) -> Result<()> {
    // Init's argv is the host's: its binary is bound in at /bin/NAME.
    let host = PathBuf::from(&init.argv[0]);
    let inside = format!(
        "/bin/{}",
        host.file_name()
            .and_then(|n| n.to_str())
            .ok_or("init's name")?
    );
    let mut args = vec![inside.clone()];
    args.extend(init.argv[1..].iter().cloned());
    args.extend(["sh", "-c", SERVER].map(String::from));
    let mut container = bed.run(&args, &[(host, inside)])?;
    container.await_named("sleep", 2)?;
    // runc kill runs on a thread while this one watches PID 1's pidfd: PID 1 may exit before
    // runc kill does.
    let mut kill = container.kill_command("TERM");
    let sent = Instant::now();
    let killer = std::thread::spawn(move || (kill.output(), sent.elapsed()));
    let stopped = container.stopped_by(sent + CAP)?;
    let took = sent.elapsed();
    let (killed, kill_took) = killer.join().map_err(|_| "the runc kill thread panicked")?;
    runc::succeeded("TERM", killed?)?;
    figures.kill_ms.push(kill_took.as_secs_f64() * 1e3);
    if stopped {
        figures.stop_ms.push(took.as_secs_f64() * 1e3);
        figures.left.push(container.processes().len() as f64);
        container.wait()?;
    } else {
        figures.stop_ms.push(CAP.as_secs_f64() * 1e3);
        figures.capped += 1;
        figures.left.push(container.processes().len() as f64);
        container.kill("KILL")?;
        container.wait()?;
    }
    Ok(())
}
