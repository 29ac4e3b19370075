//! An rmcp client program over `childguard_rmcp::ChildTransport`, written as a user would
//! (tests/rmcp_defaults.rs, tests/rmcp_drop.rs; issue 52 items 2 and 3): a multi-thread
//! runtime built, `block_on`, dropped at the end — what `#[tokio::main]` expands to.
//!
//! `cg-rmcp-client MODE PROGRAM [ARGS…]`, the server spawned with the adapter's defaults from
//! a `tokio::process::Command`:
//! - `start`: `transport.serve(())`; on a failure prints `error: {StartError}` on stdout and
//!   exits 1; else prints `started` and closes with rmcp's `cancel()`.
//! - `drop-exit`: serves, lists the tools, prints `pid PID cgroup PATH members P,Q,…` (the
//!   launcher, its cgroup — `-` if none — and the cgroup's processes), then drops the client
//!   and returns from `main` at once.
//!
//! Anything else exits 2. A watchdog exits 3 after 60 s.

use std::io::Write;
use std::time::Duration;

use childguard_rmcp::ChildTransport;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() -> std::process::ExitCode {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(60));
        say("WATCHDOG");
        std::process::exit(3);
    });
    let mut args = std::env::args().skip(1);
    let (Some(mode), Some(program)) = (args.next(), args.next()) else {
        eprintln!("usage: cg-rmcp-client start|drop-exit PROGRAM [ARGS…]");
        return std::process::ExitCode::from(2);
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let code: u8 = runtime.block_on(async move {
        let transport = match ChildTransport::spawn(cmd) {
            Ok(t) => t,
            Err(e) => {
                say(&format!("error: {e}"));
                return 1;
            }
        };
        let pid = transport.id().expect("a child");
        match mode.as_str() {
            "start" => match transport.serve(()).await {
                Ok(client) => {
                    say("started");
                    let _ = client.cancel().await;
                    0
                }
                Err(e) => {
                    say(&format!("error: {e}"));
                    1
                }
            },
            "drop-exit" => {
                let client = transport.serve(()).await.expect("initialize");
                client
                    .list_tools(Default::default())
                    .await
                    .expect("tools/list");
                // The tree as it is now, before anything is dropped: the launcher's cgroup and
                // its members.
                let cgroup = childguard_tests::cgroups::cgroup_of(pid)
                    .filter(|c| c.contains("childguard-"))
                    .unwrap_or_else(|| "-".into());
                let members = std::fs::read_to_string(
                    childguard_tests::cgroups::cgroup_mount()
                        .join(cgroup.trim_start_matches('/'))
                        .join("cgroup.procs"),
                )
                .unwrap_or_default()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(",");
                let members = if members.is_empty() {
                    "-".into()
                } else {
                    members
                };
                say(&format!("pid {pid} cgroup {cgroup} members {members}"));
                drop(client);
                0
            }
            other => {
                eprintln!("unknown mode {other:?}");
                2
            }
        }
    });
    // As at the end of `#[tokio::main]`: the runtime is dropped, then `main` returns.
    drop(runtime);
    std::process::ExitCode::from(code)
}
