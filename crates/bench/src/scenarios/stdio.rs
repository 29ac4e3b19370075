//! `stdio`: four MCP stdio servers closed by ours and by the MCP SDKs' own closes, side by
//! side in one run (issues 31 and 51).
//!
//! Servers ([`peers::Server`]): `npx --no-install mcp-server-everything` (npx → `npm exec` →
//! `sh -c` → node; exits on stdin EOF), the Python SDK's MCPServer behind `sh -c` (exits on
//! EOF), the stubborn fixture (ignores EOF and TERM; a `setsid` worker holds its stdout), and
//! a stubborn shell in a container, `podman run -i --rm IMAGE sh -c …` ([`container`]: answers
//! `initialize`, ignores EOF and TERM; killing the client only detaches it).
//!
//! Sides, each after an `initialize` round-trip (so the server is really up):
//! - ours ([`ours`]): `ChildHandle` with stdin/stdout piped, stderr captured,
//!   `Containment::BestEffort`, ladder `EOF:2s,TERM:2s,KILL:5s`, `close()`;
//! - `ts_sdk_close` ([`sdk`]): `StdioClientTransport.close()`, TypeScript SDK 1.32.2;
//! - `py_sdk_exit` ([`sdk`]): leaving `async with stdio_client(...)`, Python SDK 2.3.0;
//! - `rmcp_drop`, `rmcp_graceful_shutdown` ([`rmcp`]): rmcp 3.11's `TokioChildProcess`.
//!
//! Rows, for each server and each baseline (ours is in every one):
//! - `stdio_{server}_close_ms`: the close call, from its start to its return, median;
//! - `stdio_{server}_left`: processes of the server's tree (snapshotted right before the
//!   close, [`tree`]) still alive, not zombies, [`LEFT_AFTER`] after the close returned; the
//!   largest count of the repetitions (one leak in one repetition is a leak). For the
//!   container: the containers of the launch (`podman ps -a`, by its label) there once that
//!   wait is over, counted then removed ([`container::Podman::settle`]).
//!
//! Repetitions: 3 by default (`--reps`); in each, every (server, side) pair runs once, in a
//! fresh random order. The stubborn servers cost the SDKs their full waits (4–6 s each), so a
//! run takes about three minutes.

mod container;
mod lines;
mod ours;
mod peers;
mod rmcp;
mod sdk;
mod tree;

use std::time::Duration;

use peers::{Peers, Server, PY_SDK_VERSION, TS_SDK_VERSION};
use sdk::Sdk;

use super::Settings;
use crate::row::Row;
use crate::stats::{median, Shuffle};
use crate::Result;

/// When the leftover processes are counted: this long after the close returned.
pub const LEFT_AFTER: Duration = Duration::from_millis(200);

/// How long a server (or an SDK script) may take to answer `initialize`: npx starts npm
/// first, which takes seconds on a busy machine.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// One close: how long the close call took, and what of the tree was left.
#[derive(Debug, Clone, Copy)]
pub struct Measure {
    pub close_ms: f64,
    pub left: usize,
}

/// The sides, ours first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Ours,
    TsSdk,
    PySdk,
    RmcpDrop,
    RmcpGraceful,
}

const SIDES: [Side; 5] = [
    Side::Ours,
    Side::TsSdk,
    Side::PySdk,
    Side::RmcpDrop,
    Side::RmcpGraceful,
];

impl Side {
    /// The baseline's name and what it does, for `baseline_name`.
    fn describe(self) -> String {
        match self {
            Side::Ours => "ours".into(),
            Side::TsSdk => format!(
                "ts_sdk_close: @modelcontextprotocol/sdk {TS_SDK_VERSION} StdioClientTransport.close() \
                 (stdin end, 2 s, SIGTERM, 2 s, SIGKILL; the direct child only)"
            ),
            Side::PySdk => format!(
                "py_sdk_exit: mcp {PY_SDK_VERSION} leaving `async with stdio_client` \
                 (stdin closed, 2 s, killpg SIGTERM, 2 s, killpg SIGKILL)"
            ),
            Side::RmcpDrop => "rmcp_drop: rmcp 3.11 TokioChildProcess dropped \
                 (returns at once; a spawned task SIGKILLs the direct child)"
                .into(),
            Side::RmcpGraceful => "rmcp_graceful_shutdown: rmcp 3.11 TokioChildProcess::graceful_shutdown \
                 (stdin closed, 3 s, SIGTERM, 3 s, SIGKILL; the direct child only)"
                .into(),
        }
    }

    fn close(self, peers: &Peers, server: Server) -> Result<Measure> {
        let launch = server.launch(peers);
        let measured = match self {
            Side::Ours => ours::close_ours(&launch),
            Side::TsSdk => sdk::close_sdk(Sdk::Ts, peers, &launch),
            Side::PySdk => sdk::close_sdk(Sdk::Py, peers, &launch),
            Side::RmcpDrop => rmcp::close_rmcp(rmcp::End::Drop, &launch),
            Side::RmcpGraceful => rmcp::close_rmcp(rmcp::End::GracefulShutdown, &launch),
        };
        if let Some(pidfile) = &launch.pidfile {
            let _ = std::fs::remove_file(pidfile);
        }
        let measured = match &launch.container {
            Some(label) => peers.podman.settle(label, measured),
            None => measured,
        };
        measured.map_err(|e| format!("{} / {}: {e}", server.name(), self.describe()).into())
    }
}

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(3);
    let peers = Peers::find()?;
    // figures[server][side]: one Measure per repetition.
    let mut figures: Vec<Vec<Vec<Measure>>> =
        vec![vec![Vec::new(); SIDES.len()]; Server::ALL.len()];
    let pairs: Vec<(usize, usize)> = (0..Server::ALL.len())
        .flat_map(|s| (0..SIDES.len()).map(move |k| (s, k)))
        .collect();
    let mut shuffle = Shuffle::new(31);
    for rep in 0..reps {
        eprintln!("childguard-bench: stdio: repetition {} of {reps}", rep + 1);
        for i in shuffle.order(pairs.len()) {
            let (s, k) = pairs[i];
            let measure = SIDES[k].close(&peers, Server::ALL[s])?;
            figures[s][k].push(measure);
        }
    }
    let mut rows = Vec::new();
    for (s, server) in Server::ALL.iter().enumerate() {
        let (close_metric, left_metric) = metrics(*server);
        let (left_what, left_unit) = match server {
            Server::StubbornContainer => (
                "containers of the launch (podman ps -a, by label) there",
                "containers",
            ),
            _ => ("processes of the tree alive", "processes"),
        };
        let ours = &figures[s][0];
        for (k, side) in SIDES.iter().enumerate().skip(1) {
            let theirs = &figures[s][k];
            rows.push(Row {
                scenario: "stdio",
                metric: close_metric,
                ours: median_close(ours),
                baseline: median_close(theirs),
                baseline_name: format!("{}, median of {reps}", side.describe()),
                unit: "ms",
            });
            rows.push(Row {
                scenario: "stdio",
                metric: left_metric,
                ours: max_left(ours),
                baseline: max_left(theirs),
                baseline_name: format!(
                    "{}, {left_what} {} ms after the close returned, max of {reps}",
                    side.describe(),
                    LEFT_AFTER.as_millis()
                ),
                unit: left_unit,
            });
        }
    }
    Ok(rows)
}

fn metrics(server: Server) -> (&'static str, &'static str) {
    match server {
        Server::Everything => ("stdio_everything_close_ms", "stdio_everything_left"),
        Server::Python => ("stdio_python_close_ms", "stdio_python_left"),
        Server::Stubborn => ("stdio_stubborn_close_ms", "stdio_stubborn_left"),
        Server::StubbornContainer => (
            "stdio_stubborn_container_close_ms",
            "stdio_stubborn_container_left",
        ),
    }
}

fn median_close(measures: &[Measure]) -> f64 {
    median(&measures.iter().map(|m| m.close_ms).collect::<Vec<_>>())
}

fn max_left(measures: &[Measure]) -> f64 {
    measures
        .iter()
        .map(|m| m.left as f64)
        .fold(f64::NAN, f64::max)
}
