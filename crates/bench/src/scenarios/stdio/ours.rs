//! Ours: the server in a [`ChildHandle`] with the MCP close, closed by `close()`.
//!
//! Everything childguard-specific is in [`close_ours`], so that the stdio-server constructor
//! being added to the library can replace the builder calls in one place.

use std::process::Stdio;
use std::time::Instant;

use childguard::{Capture, ChildHandle, Containment, Ladder};

use super::lines::{self, Lines};
use super::peers::Launch;
use super::tree::Tree;
use super::{Measure, LEFT_AFTER, READY_TIMEOUT};
use crate::fixture::ms;
use crate::Result;

/// The MCP close: stdin closed, 2 s, TERM, 2 s, KILL (5 s to reap).
pub const LADDER: &str = "EOF:2s,TERM:2s,KILL:5s";

/// Spawns the server (stdin and stdout piped, stderr captured, contained best-effort), runs
/// `initialize`, snapshots its tree, times `close()`, and counts the tree's processes alive
/// [`LEFT_AFTER`] after the close returned.
pub fn close_ours(launch: &Launch) -> Result<Measure> {
    let mut cmd = launch.command();
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut handle = ChildHandle::builder(cmd)
        .contain(Containment::BestEffort)
        .capture(Capture::stderr())
        .ladder(LADDER.parse::<Ladder>()?)
        .spawn()?;
    let what = "stdio (ours)";
    let stdout = handle.take_stdout().ok_or("ours: no stdout pipe")?;
    let mut stdout = Lines::new(stdout);
    let stdin = handle.stdin().ok_or("ours: no stdin pipe")?;
    lines::initialize(stdin, &mut stdout, READY_TIMEOUT, what)?;
    let pid = handle.id().ok_or("ours: the handle has no pid")?;
    let tree = Tree::snapshot(pid, true, &launch.pidfile_pids()?);
    launch.check(&tree)?;
    let start = Instant::now();
    let report = handle.close()?;
    let took = start.elapsed();
    if let Some(fallback) = &report.containment_fallback {
        eprintln!("childguard-bench: stdio: ours ran uncontained: {fallback}");
    }
    std::thread::sleep(LEFT_AFTER);
    let left = tree.alive().len();
    tree.kill_rest()?;
    Ok(Measure {
        close_ms: ms(took),
        left,
    })
}
