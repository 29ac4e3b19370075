//! The scenario registry. To add a scenario: write `src/scenarios/NAME.rs` with a
//! `pub fn run(settings: &Settings) -> Result<Vec<Row>>`, declare the module here, and add one
//! [`Scenario`] entry to [`ALL`] (and to [`DEFAULT`] if a bare run should include it).
//!
//! Rules every scenario keeps: ours and the baseline are measured in the same run, their
//! repetitions interleaved (so machine noise hits both), at least 20 of them unless a rep is
//! too long to afford (then say so in `baseline_name`), and lower is better in every row.

mod big;
mod capture;
mod contain;
mod container;
pub mod init;
mod libnbd;
mod overhead;
mod precision;
mod probe;
mod ready;
mod ready_http;
mod restart;
mod scale;
mod seed;
mod servers;
mod skip;
mod spawn;
mod stdio;

use crate::row::Row;
use crate::Result;

/// What the command line passes to every scenario.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settings {
    /// `--reps N`, if given.
    pub reps: Option<usize>,
}

impl Settings {
    /// The repetitions to run: `--reps` if given, else the scenario's own default.
    pub fn reps_or(&self, default: usize) -> usize {
        self.reps.unwrap_or(default)
    }
}

/// One named benchmark.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// The name used on the command line and in the `scenario` column.
    pub name: &'static str,
    /// One line for `--help`.
    pub about: &'static str,
    /// Measures and returns its rows.
    pub run: fn(&Settings) -> Result<Vec<Row>>,
}

/// Every scenario, in the order `--help` lists them.
pub const ALL: &[Scenario] = &[
    Scenario {
        name: "seed",
        about: "close with a 10 s read in flight: default ladder vs waitpid-only close",
        run: seed::run,
    },
    Scenario {
        name: "precision",
        about: "grace-expiry overshoot (HUP:100ms,KILL:1s) vs try_wait sleep loops",
        run: precision::run,
    },
    Scenario {
        name: "overhead",
        about: "close of a child that exits on EOF: EOF:1s,KILL:1s vs shutdown + wait",
        run: overhead::run,
    },
    Scenario {
        name: "libnbd",
        about: "real nbdkit, read in flight: libnbd close / kill_subprocess vs HUP:200ms,TERM:200ms,KILL:1s + group",
        run: libnbd::run,
    },
    Scenario {
        name: "scale",
        about: "1,000 children (HUP ignored, HUP:100ms,TERM:1s) closed from tokio tasks vs kill_on_drop; 1,000 contained, stderr-captured, Ready::output servers alive at once vs 100",
        run: scale::run,
    },
    Scenario {
        name: "big",
        about: "1/4/8 GiB child, SIGKILL to reaped: waitpid vs process_mrelease, async teardown, background drop",
        run: big::run,
    },
    Scenario {
        name: "contain",
        about: "64 setsid'd busy workers: survivors contained vs process group, close vs /proc walk + kill, contained spawn+close cost",
        run: contain::run,
    },
    Scenario {
        name: "ready",
        about: "detection delay from the server's readiness to spawn() returning (Ready::Notify, Ready::Connect) vs a connect retried every 10 / 100 ms",
        run: ready::run,
    },
    Scenario {
        name: "ready_http",
        about: "detection delay from an HTTP server's readiness to spawn() returning (Ready::http on a Unix socket) vs curl run every 10 ms (needs python3 and curl)",
        run: ready_http::run,
    },
    Scenario {
        name: "probe",
        about: "one `childguard probe` of real redis (6 signals x 3 runs, 10 s window), wall time vs a fixed-wait probe's waits (computed; needs redis-server)",
        run: probe::run,
    },
    Scenario {
        name: "capture",
        about: "a server writing 100 MB of log: stderr captured (shared thread, 64 KiB tail) vs stderr to /dev/null",
        run: capture::run,
    },
    Scenario {
        name: "servers",
        about: "real postgres, spawn to ready: Ready::Notify vs pg_isready run every 10 ms (needs root and postgresql)",
        run: servers::run,
    },
    Scenario {
        name: "skip",
        about: "real redis (HUP ignored) closed by the default ladder: the ignored HUP skipped vs every rung sent",
        run: skip::run,
    },
    Scenario {
        name: "init",
        about: "childguard init as PID 1 vs tini, dumb-init, catatonit: engine stop of a TERM-ignoring server, processes left at the engine's KILL, zombies reaped, start-up (needs root, unshare and the peers)",
        run: init::run,
    },
    Scenario {
        name: "container",
        about: "childguard init as PID 1 of a real runc container vs tini-static, dumb-init, catatonit: runc kill TERM of a TERM-ignoring server to the container stopped (watched 3 s), processes left (needs root, runc, busybox and the peers)",
        run: container::run,
    },
    Scenario {
        name: "spawn",
        about: "spawn + close vs std / tokio::process spawn + kill + wait, per spawn",
        run: spawn::run,
    },
    Scenario {
        name: "stdio",
        about: "MCP stdio servers (npx server-everything, a Python server behind sh -c, a stubborn one, a stubborn one in a podman run -i --rm container) after initialize: close time and processes (containers) left, ours (contained, EOF:2s,TERM:2s,KILL:5s) vs the TypeScript and Python SDKs' close and rmcp's TokioChildProcess drop / graceful_shutdown (needs node, the npm peers, the peers venv, and root with podman and tests/run.sh's busybox image)",
        run: stdio::run,
    },
    Scenario {
        name: "restart",
        about: "a SIGKILLed server started again: ours (Supervisor, Always, no delay) vs supervisord 4.2.5 (autorestart, startsecs=0) and a naive sh loop; the supervisor's idle CPU (needs the peers venv)",
        run: restart::run,
    },
];

/// The scenarios run when none is named.
pub const DEFAULT: &[&str] = &["seed", "precision", "overhead"];

/// The scenario called `name`.
pub fn find(name: &str) -> Option<&'static Scenario> {
    ALL.iter().find(|s| s.name == name)
}

/// The known names, comma-separated, for error messages.
pub fn known_names() -> String {
    ALL.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

/// Where, among `reps` repetitions of ours, to slot `few` baseline repetitions so they spread
/// evenly over the run: after ours repetition `(2j + 1) · reps / (2 · few)` for j in 0..few.
pub fn spread(few: usize, reps: usize) -> Vec<usize> {
    (0..few).map(|j| (2 * j + 1) * reps / (2 * few)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_registered_and_names_unique() {
        for name in DEFAULT {
            assert!(find(name).is_some(), "{name}");
        }
        let mut names: Vec<_> = ALL.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }

    #[test]
    fn spread_is_even() {
        assert_eq!(spread(3, 20), vec![3, 10, 16]);
        assert_eq!(spread(1, 1), vec![0]);
        assert_eq!(spread(2, 2), vec![0, 1]);
    }
}
