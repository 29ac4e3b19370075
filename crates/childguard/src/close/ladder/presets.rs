//! The named ladders ([`LADDER_PRESETS`]): one constructor per server whose signals we know,
//! with what each signal does to it (the figures are in `docs/servers.md`).

use std::time::Duration;

use super::{Ladder, Rung};
use crate::base::signal::Signal;

/// A preset's constructor ([`LADDER_PRESETS`]).
pub type PresetFn = fn() -> Ladder;

/// The named presets, as `(name, constructor)`; the text form is `@name` (see
/// [Presets](Ladder#presets)).
pub const LADDER_PRESETS: &[(&str, PresetFn)] = &[
    ("default", Ladder::default),
    ("nbdkit", Ladder::nbdkit),
    ("qemu-nbd", Ladder::qemu_nbd),
    ("postgres", Ladder::postgres),
    ("nginx", Ladder::nginx),
    ("redis", Ladder::redis),
    ("memcached", Ladder::memcached),
    ("mcp", Ladder::mcp),
];

fn rungs(rungs: &[(Signal, u64)]) -> Ladder {
    Ladder {
        eof_grace: None,
        skip_ignored: true,
        rungs: rungs
            .iter()
            .map(|&(signal, ms)| Rung::new(signal, Duration::from_millis(ms)))
            .collect(),
    }
}

impl Ladder {
    /// `@nbdkit`: the default, `HUP:1s,TERM:2s,KILL:5s`. nbdkit ends on `SIGHUP` as on
    /// `SIGTERM`/`SIGINT` (after the request in flight), so the first rung already ends it.
    pub fn nbdkit() -> Ladder {
        Ladder::default()
    }

    /// `@qemu-nbd`: the default, `HUP:1s,TERM:2s,KILL:5s`. qemu-nbd treats `SIGHUP`, `SIGTERM`
    /// and `SIGINT` alike (flush the export, exit 0): the first rung ends it.
    pub fn qemu_nbd() -> Ladder {
        Ladder::default()
    }

    /// `@postgres`: `INT:10s,QUIT:5s,KILL:5s`.
    ///
    /// - `SIGINT` is postgres' *fast shutdown*: clients are disconnected, open transactions
    ///   rolled back, a shutdown checkpoint written, exit 0. The grace is for that checkpoint,
    ///   which grows with the dirty buffers (46 ms on an idle cluster here).
    /// - `SIGQUIT` is the *immediate shutdown*: every process quits at once, no checkpoint, crash
    ///   recovery at the next start (30 ms here).
    /// - `SIGKILL` for a postmaster that is stuck.
    ///
    /// Not `SIGHUP` (a reload: it keeps running) nor `SIGTERM` first (the *smart shutdown*
    /// waits for every client to disconnect, without bound). Use it with
    /// `contain(Containment::Cgroup)`: postgres' backends call `setsid()`.
    pub fn postgres() -> Ladder {
        rungs(&[
            (Signal::INT, 10_000),
            (Signal::QUIT, 5_000),
            (Signal::KILL, 5_000),
        ])
    }

    /// `@nginx`: `QUIT:10s,TERM:2s,KILL:5s`.
    ///
    /// - `SIGQUIT` is nginx's *graceful shutdown*: the listening sockets close, requests in
    ///   flight are answered, then the workers and the master exit 0. The grace bounds the
    ///   slowest request in flight (an idle nginx exits in a few ms).
    /// - `SIGTERM` (and `SIGINT`) is the *fast shutdown*: connections are dropped, exit 0.
    /// - `SIGKILL` last. Not `SIGHUP`: that re-reads the configuration and keeps running.
    pub fn nginx() -> Ladder {
        rungs(&[
            (Signal::QUIT, 10_000),
            (Signal::TERM, 2_000),
            (Signal::KILL, 5_000),
        ])
    }

    /// `@redis`: `TERM:20s,KILL:5s`.
    ///
    /// `SIGTERM` makes redis save its dataset (when persistence is on), wait up to its
    /// `shutdown-timeout` (10 s by default in redis 7) for replicas to catch up, and exit 0 —
    /// 7 ms with nothing to save here; the 20 s grace covers that wait and the save. `SIGINT`
    /// does the same; `SIGHUP` is ignored (the default ladder only loses its grace).
    pub fn redis() -> Ladder {
        rungs(&[(Signal::TERM, 20_000), (Signal::KILL, 5_000)])
    }

    /// `@memcached`: `TERM:2s,KILL:1s`. memcached exits on `SIGTERM`/`SIGINT` after its
    /// threads stop (0.7 s measured here); it catches `SIGHUP` and keeps running (1.6.18:
    /// `SigCgt`); it has no state to save.
    pub fn memcached() -> Ladder {
        rungs(&[(Signal::TERM, 2_000), (Signal::KILL, 1_000)])
    }

    /// `@mcp`: `EOF:2s,TERM:2s,KILL:5s` — the close the MCP specification prescribes for a
    /// stdio server (2025-06-18, Transports → stdio → Shutdown): close the server's stdin and
    /// wait for it to exit, then `SIGTERM`, then `SIGKILL`. The 2 s graces are the TypeScript
    /// and Python SDKs' (`StdioClientTransport.close()`, `stdio_client`); the `KILL` rung's
    /// 5 s bound the reap of a process in `D` state. Also a fit for LSP servers after their
    /// `shutdown`/`exit`. The default of
    /// [`ChildHandle::stdio_server`](crate::ChildHandle::stdio_server).
    pub fn mcp() -> Ladder {
        let mut ladder = rungs(&[(Signal::TERM, 2_000), (Signal::KILL, 5_000)]);
        ladder.eof_grace = Some(Duration::from_secs(2));
        ladder
    }
}
