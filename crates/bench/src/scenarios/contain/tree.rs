//! The tree inits' rows (issue 50): containment without a cgroup.
//!
//! - `spawn_close_pidns_us`, `spawn_close_subreaper_us`: spawn + close of a plain slowserver
//!   (exits on EOF) under a PID namespace's tree init, or a subreaper's, against the same
//!   spawn + close uncontained on our own spawn, the sides in a fresh random order each
//!   repetition. Goals: ≤ 1.5× and ≤ 1.1× plain. What the tree init adds: a fork of this
//!   process (page tables copied: grows with our size), the namespace (and a user namespace
//!   when not root), the server's fork from it, a message with its pidfd.
//! - `close_pidns_ms`, `close_subreaper_ms`: the 64-worker `setsid` tree of `survivors`, closed
//!   with `KILL:2s` until every process is dead, against the cgroup's `close_ms` side.

use childguard::Containment;

use super::spawn_close_in;
use crate::row::Row;
use crate::stats::{median, shuffled_medians};
use crate::Result;

pub(super) fn rows(spawn_reps: usize, reps: usize) -> Result<Vec<Row>> {
    let sides: [&dyn Fn() -> Result<f64>; 3] = [
        &|| spawn_close_in(Containment::PidNamespace, true),
        &|| spawn_close_in(Containment::Subreaper, true),
        &|| spawn_close_in(Containment::None, true),
    ];
    let [pidns, subreaper, plain] = shuffled_medians(sides, 2, spawn_reps, 0x7ee5)?;
    let (mut close_pidns, mut close_sub, mut close_cg) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        close_pidns.push(super::close_in(Containment::PidNamespace)?);
        close_sub.push(super::close_in(Containment::Subreaper)?);
        close_cg.push(super::close_in(Containment::Cgroup)?);
    }
    let spawn_row = |metric, ours| Row {
        scenario: "contain",
        metric,
        ours,
        baseline: plain,
        baseline_name: "our own clone3 spawn: the same spawn + close, uncontained".into(),
        unit: "us",
    };
    let close_row = |metric, samples: &[f64]| {
        Row {
        scenario: "contain",
        metric,
        ours: median(samples),
        baseline: median(&close_cg),
        baseline_name: format!(
            "the same close contained by a cgroup (cgroup.kill), 64 busy setsid workers ({reps} reps)"
        ),
        unit: "ms",
    }
    };
    Ok(vec![
        spawn_row("spawn_close_pidns_us", pidns),
        spawn_row("spawn_close_subreaper_us", subreaper),
        close_row("close_pidns_ms", &close_pidns),
        close_row("close_subreaper_ms", &close_sub),
    ])
}
