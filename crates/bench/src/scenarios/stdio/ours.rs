//! Ours: the server spawned by [`ChildHandle::stdio_server`] (pipes, stderr captured, the MCP
//! close, the tree contained), closed by `close()`.

use std::time::Instant;

use childguard::ChildHandle;

use super::lines::{self, Lines};
use super::peers::Launch;
use super::tree::Tree;
use super::{Measure, LEFT_AFTER, READY_TIMEOUT};
use crate::fixture::ms;
use crate::Result;

/// Spawns the server with the library's stdio-server defaults (its ladder is `@mcp`:
/// stdin closed, 2 s, TERM, 2 s, KILL), runs
/// `initialize`, snapshots its tree, times `close()`, and counts the tree's processes alive
/// [`LEFT_AFTER`] after the close returned.
pub fn close_ours(launch: &Launch) -> Result<Measure> {
    let mut handle = ChildHandle::stdio_server(launch.command()).spawn()?;
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
    let held = report
        .containment
        .as_ref()
        .and_then(|c| c.container.as_ref());
    if launch.container.is_some() && held.is_none() {
        return Err(format!("ours did not hold the container as the tree: {report}").into());
    }
    Ok(Measure {
        close_ms: ms(took),
        left,
    })
}
