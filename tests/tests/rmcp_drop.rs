//! Issue 52 item 3: what ends an rmcp adapter's server when its client is dropped — in a
//! running runtime, right before the runtime shuts down, outside any runtime, and right
//! before the process exits — against real servers: server-everything through `npx` (exits
//! on its stdin's EOF, in a few hundred milliseconds) and the stubborn fixture (ignores EOF
//! and TERM, a `setsid` worker holding its stdout: only the ladder's KILL ends it).
//!
//! The everything runs use `EOF:10s`: what they check is that the server was given its EOF
//! grace and ended by itself (ended by EOF, exit 0, no signal), which a loaded machine can
//! make take longer than the MCP close's 2 s.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use childguard::{CloseReport, Ending, Signal};
use childguard_rmcp::{ChildTransport, Closed};
use childguard_tests::cgroups::{cgroup_mount, cgroup_of};
use childguard_tests::stdio_peers::{fixture, npx, tests_dir};
use childguard_tests::*;

/// Far above any wait here: only a hang gets there.
const GENEROUS: Duration = Duration::from_secs(60);

/// server-everything through `npx`, with the adapter's settings but a 10 s EOF grace.
fn everything(test: &str) -> Option<ChildTransport> {
    let cmd = npx(test, "mcp-server-everything", &[])?;
    let handle = childguard_rmcp::settings::stdio_server(cmd)
        .ladder(ladder("EOF:10s,TERM:2s,KILL:5s"))
        .spawn()
        .expect("spawn npx");
    Some(ChildTransport::new(handle).expect("piped stdio"))
}

/// Every process in the transport's cgroup now (the server must be contained: CI's cgroup v2
/// is writable).
fn members(transport: &ChildTransport) -> Vec<u32> {
    members_of(transport.id().expect("a child"))
}

/// Every process in the cgroup of `pid`.
fn members_of(pid: u32) -> Vec<u32> {
    let cgroup = cgroup_of(pid).expect("the server runs");
    assert!(
        cgroup.contains("childguard-"),
        "the server was not contained in a cgroup of its own ({cgroup}): this test needs a \
         writable cgroup v2 (CI runs as root)"
    );
    let procs = cgroup_mount()
        .join(cgroup.trim_start_matches('/'))
        .join("cgroup.procs");
    std::fs::read_to_string(&procs)
        .unwrap_or_else(|e| panic!("{}: {e}", procs.display()))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// The report in `closed`, waited for without a runtime.
fn report_of(closed: &Closed, what: &str) -> CloseReport {
    assert!(
        eventually(GENEROUS, || closed.now().is_some()),
        "{what}: no report within {GENEROUS:?}"
    );
    match &*closed.now().unwrap() {
        Ok(report) => report.clone(),
        Err(e) => panic!("{what}: the close failed: {e}"),
    }
}

/// Ended by itself at the EOF (the grace was kept), and nothing of the tree is left.
fn assert_ended_by_eof(what: &str, report: &CloseReport, tree: &[u32]) {
    eprintln!("{what}: {report}");
    assert_eq!(report.ended_by, Ending::Eof, "{what}: {report}");
    assert!(report.signals.is_empty(), "{what}: {report}");
    assert_eq!(
        report.status.and_then(|s| s.code()),
        Some(0),
        "{what}: {report}"
    );
    assert_nothing_left(what, report, tree);
}

fn assert_nothing_left(what: &str, report: &CloseReport, tree: &[u32]) {
    let alive: Vec<u32> = tree.iter().copied().filter(|&p| is_alive(p)).collect();
    assert!(alive.is_empty(), "{what}: left alive {alive:?}: {report}");
    let cg = report.cgroup.as_ref().expect("contained");
    assert!(cg.removed && cg.members_left == 0, "{what}: {report}");
}

/// Serves `transport` (initialize, tools/list) in `rt`, and gives the client back with the
/// tree as it is then (npx, and node which answered).
fn served(
    rt: &tokio::runtime::Runtime,
    transport: ChildTransport,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, ()>,
    Vec<u32>,
) {
    let pid = transport.id().expect("a child");
    rt.block_on(async {
        let client = tokio::time::timeout(GENEROUS, transport.serve(()))
            .await
            .expect("initialize within 60 s")
            .expect("initialize");
        tokio::time::timeout(GENEROUS, client.list_tools(Default::default()))
            .await
            .expect("tools/list within 60 s")
            .expect("tools/list");
        (client, members_of(pid))
    })
}

/// Case 1: the client dropped in a running runtime. rmcp's task closes the transport; the
/// close thread climbs: EOF, the server exits by itself; the report reaches `Closed`.
#[test]
fn dropped_in_a_running_runtime_ends_by_eof_with_a_report() {
    let Some(transport) = everything("dropped_in_a_running_runtime_ends_by_eof_with_a_report")
    else {
        return;
    };
    let closed = transport.closed();
    let rt = multi_thread_runtime();
    let (client, tree) = served(&rt, transport);
    let report = rt.block_on(async {
        drop(client);
        tokio::time::timeout(GENEROUS, closed.report())
            .await
            .expect("a report within 60 s")
            .expect("a report")
    });
    assert_ended_by_eof("dropped in a running runtime", &report, &tree);
}

/// Case 2: the client dropped, then the runtime shut down at once (as at the end of
/// `#[tokio::main]`), the process going on. The runtime drops rmcp's task (mid-close, or
/// before it ran); the close is on a thread no runtime owns, which climbs on: EOF kept, the
/// report in `Closed`. Then the stubborn server: the same thread climbs the rungs to KILL,
/// its `setsid` worker gone too.
#[test]
fn dropped_then_runtime_shut_down_the_thread_climbs_and_reports() {
    let name = "dropped_then_runtime_shut_down_the_thread_climbs_and_reports";
    let Some(transport) = everything(name) else {
        return;
    };
    let closed = transport.closed();
    let rt = multi_thread_runtime();
    let (client, tree) = served(&rt, transport);
    assert!(tree.len() >= 2, "npx and node at least: {tree:?}");
    rt.block_on(async { drop(client) });
    drop(rt);
    let report = report_of(&closed, "everything");
    assert_ended_by_eof("dropped then runtime shut down", &report, &tree);

    let (cmd, pidfile) = stubborn(name);
    let transport = ChildTransport::spawn(cmd).expect("spawn the stubborn fixture");
    let closed = transport.closed();
    let (server, worker) = read_pids(&pidfile);
    let tree = members(&transport);
    assert!(tree.contains(&server) && tree.contains(&worker), "{tree:?}");
    let rt = multi_thread_runtime();
    let (client, _) = served(&rt, transport);
    let started = Instant::now();
    rt.block_on(async { drop(client) });
    drop(rt);
    let report = report_of(&closed, "stubborn");
    eprintln!("stubborn, dropped then runtime shut down: {report}");
    assert_eq!(report.ended_by, rung(1, Signal::KILL), "{report}");
    let skipped: Vec<Signal> = report.skipped.iter().map(|s| s.signal).collect();
    assert_eq!(skipped, [Signal::TERM], "ignored by the server: {report}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the EOF grace: {report}"
    );
    assert_nothing_left("stubborn", &report, &tree);
    let _ = std::fs::remove_file(&pidfile);
}

/// Case 3: the transport dropped outside any runtime (spawned and never served): the blocking
/// close runs in the drop, which returns with the server gone — ended by itself at its EOF
/// (npx may still be starting node; node then reads the EOF at once) — and the report
/// already in `Closed`.
#[test]
fn dropped_outside_a_runtime_closes_in_the_drop() {
    let Some(transport) = everything("dropped_outside_a_runtime_closes_in_the_drop") else {
        return;
    };
    assert!(
        tokio::runtime::Handle::try_current().is_err(),
        "precondition: no runtime here"
    );
    let closed = transport.closed();
    let tree = members(&transport);
    drop(transport);
    let outcome = closed
        .now()
        .expect("the drop outside a runtime returned with the report");
    let report = outcome.as_ref().as_ref().expect("close ok");
    assert_ended_by_eof("dropped outside a runtime", report, &tree);
}

/// Case 4: the client dropped, then `main` returns at once (`cg-rmcp-client drop-exit`). No
/// thread of that process can climb any more: `exit_with_parent` ends the tree — the
/// kernel's SIGKILL to npx, the guardian's `cgroup.kill` — within 2 s of the exit, nothing
/// left, the cgroup removed.
#[test]
fn dropped_then_main_returns_the_tree_goes_with_the_process() {
    let name = "dropped_then_main_returns_the_tree_goes_with_the_process";
    if npx(name, "mcp-server-everything", &[]).is_none() {
        return;
    }
    let mut child = Command::new(bin("cg-rmcp-client"))
        .args(["drop-exit", "npx", "--no-install", "mcp-server-everything"])
        .current_dir(tests_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run cg-rmcp-client");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let words: Vec<&str> = first.split_whitespace().collect();
    let ["pid", pid, "cgroup", cgroup, "members", members] = words[..] else {
        panic!("cg-rmcp-client said {first:?}, not `pid PID cgroup PATH members P,Q,…`");
    };
    let pid: u32 = pid.parse().unwrap();
    assert_ne!(
        cgroup, "-",
        "the server was not contained: needs a writable cgroup v2"
    );
    let dir: PathBuf = cgroup_mount().join(cgroup.trim_start_matches('/'));
    // Read by the client before it dropped anything (the tree may be going already).
    let tree: Vec<u32> = members.split(',').filter_map(|p| p.parse().ok()).collect();
    assert!(
        tree.contains(&pid) && tree.len() >= 2,
        "npx {pid} and node at least: {tree:?}"
    );
    let status = child.wait().expect("cg-rmcp-client exits");
    let exited = Instant::now();
    assert!(status.success(), "cg-rmcp-client: {status}");
    assert!(
        eventually(Duration::from_secs(2), || !dir.exists()
            && tree.iter().all(|&p| !is_alive(p))),
        "2 s after the client's exit: left {:?}, cgroup {} {}",
        tree.iter().filter(|&&p| is_alive(p)).collect::<Vec<_>>(),
        dir.display(),
        if dir.exists() {
            "still there"
        } else {
            "removed"
        }
    );
    eprintln!("tree {tree:?} gone {:?} after the exit", exited.elapsed());
}

/// `python3 tests/fixtures/stubborn_mcp.py --pidfile PATH`.
fn stubborn(name: &str) -> (std::process::Command, PathBuf) {
    let pidfile = scratch(&format!("{name}.pids"));
    let _ = std::fs::remove_file(&pidfile);
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(fixture("stubborn_mcp.py"))
        .arg("--pidfile")
        .arg(&pidfile);
    (cmd, pidfile)
}

/// The stubborn fixture's server and worker pids, once both run and the worker left the
/// server's session.
fn read_pids(pidfile: &std::path::Path) -> (u32, u32) {
    assert!(
        eventually(GENEROUS, || pidfile.exists()),
        "the stubborn fixture never wrote {}",
        pidfile.display()
    );
    let text = std::fs::read_to_string(pidfile).unwrap();
    let mut it = text.split_whitespace().map(|p| p.parse::<u32>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}
