//! Baselines: the TypeScript and Python MCP SDKs' own close, each in a small script of
//! `tests/fixtures/` (`ts_sdk_close.mjs`, `py_sdk_close.py`) that connects and initializes,
//! prints a `ready` line, waits for a line on its stdin, times the SDK's close and prints
//! `{"close_ms": …}`. The bench snapshots the script's descendants (the server's tree) between
//! the two lines and counts what is left [`LEFT_AFTER`] after the second.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::lines::Lines;
use super::peers::{Launch, Peers};
use super::tree::{self, Tree};
use super::{Measure, LEFT_AFTER, READY_TIMEOUT};
use crate::Result;

/// The two SDKs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sdk {
    /// `@modelcontextprotocol/sdk`: `StdioClientTransport.close()`.
    Ts,
    /// `mcp`: leaving `async with stdio_client(...)`.
    Py,
}

impl Sdk {
    fn command(self, peers: &Peers) -> Command {
        let (program, script) = match self {
            Sdk::Ts => ("node".into(), "ts_sdk_close.mjs"),
            Sdk::Py => (peers.python.clone(), "py_sdk_close.py"),
        };
        let mut cmd = Command::new(program);
        cmd.arg(peers.fixture(script));
        cmd
    }

    fn name(self) -> &'static str {
        match self {
            Sdk::Ts => "ts_sdk_close.mjs",
            Sdk::Py => "py_sdk_close.py",
        }
    }
}

/// One close of `launch`'s server by `sdk`.
pub fn close_sdk(sdk: Sdk, peers: &Peers, launch: &Launch) -> Result<Measure> {
    let mut cmd = sdk.command(peers);
    cmd.arg(launch.json())
        .current_dir(&peers.tests)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut script = Script(cmd.spawn()?);
    let result = measure(sdk, launch, &mut script.0);
    if result.is_err() {
        tree::kill_descendants(script.0.id());
    }
    result
}

fn measure(sdk: Sdk, launch: &Launch, child: &mut Child) -> Result<Measure> {
    let what = format!("stdio ({})", sdk.name());
    let mut stdout = Lines::new(child.stdout.take().ok_or("no stdout pipe")?);
    let ready = stdout.next_json(READY_TIMEOUT, &what)?;
    if ready["ready"] != true {
        return Err(format!("{what}: expected the ready line, got {ready}").into());
    }
    let tree = Tree::snapshot(child.id(), false, &launch.pidfile_pids()?);
    launch.check(&tree)?;
    let mut stdin = child.stdin.take().ok_or("no stdin pipe")?;
    writeln!(stdin, "close")?;
    drop(stdin);
    // The SDKs wait at most 2 s + 2 s (+ 2 s for Python's reap) for the stubborn server.
    let done = stdout.next_json(Duration::from_secs(30), &what)?;
    std::thread::sleep(LEFT_AFTER);
    let left = tree.alive().len();
    tree.kill_rest()?;
    let close_ms = done["close_ms"]
        .as_f64()
        .ok_or_else(|| format!("{what}: expected close_ms, got {done}"))?;
    Ok(Measure { close_ms, left })
}

/// The script, killed and reaped when it goes out of scope (it exits by itself once it
/// printed its figure; this only bounds a script that hangs).
struct Script(Child);

impl Drop for Script {
    fn drop(&mut self) {
        for _ in 0..200 {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
