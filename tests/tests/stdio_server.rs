//! `ChildHandle::stdio_server` (issue 31 item 1) against real MCP servers behind launchers:
//! `npx` (→ `npm exec` → `sh -c` → `node`), `sh -c` in front of a Python server, and the
//! stubborn fixture (ignores EOF and TERM, leaves a `setsid` worker holding stdout).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use childguard::{ChildHandle, Ending, Signal, StdioChannel};
use childguard_cli::procs::descendants_of;
use childguard_tests::{eventually, fresh_dir, is_alive, ladder, stdio_peers};

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"childguard-test","version":"1"}}}"#;

/// One JSON-RPC request written, one line read back: the server is up and speaking.
fn round_trip(to: &mut impl Write, from: &mut impl Read) -> String {
    writeln!(to, "{INITIALIZE}").expect("write initialize");
    to.flush().expect("flush");
    let mut line = String::new();
    BufReader::new(from)
        .read_line(&mut line)
        .expect("read the answer");
    let answer: serde_json::Value = serde_json::from_str(&line).expect("a JSON-RPC answer");
    assert!(
        answer["id"] == 1 && answer["result"]["protocolVersion"].is_string(),
        "{line:?}"
    );
    line
}

/// The server's tree (the launcher and everything below it), seen before the close.
fn tree(handle: &ChildHandle) -> Vec<u32> {
    let main = handle.id().expect("pid");
    let mut pids = vec![main];
    pids.extend(descendants_of(main));
    pids
}

fn assert_none_left(pids: &[u32], report: &childguard::CloseReport) {
    let left: Vec<u32> = pids.iter().copied().filter(|&p| is_alive(p)).collect();
    assert!(
        left.is_empty(),
        "left alive: {left:?} of {pids:?}: {report}"
    );
    if let Some(cgroup) = &report.cgroup {
        assert!(cgroup.removed && cgroup.members_left == 0, "{report}");
    }
}

#[test]
fn the_default_is_the_mcp_close_on_the_contained_tree() {
    let handle = ChildHandle::stdio_server(Command::new("cat"))
        .spawn()
        .expect("spawn cat");
    assert_eq!(handle.ladder().to_string(), "EOF:2s,TERM:2s,KILL:5s");
    let report = handle.close().expect("close");
    assert_eq!(report.ended_by, Ending::Eof, "cat exits on EOF: {report}");
    assert!(report.signals.is_empty(), "{report}");
    assert!(
        report.containment.is_some() || report.containment_fallback.is_some(),
        "the report says whether the tree was contained: {report}"
    );
}

#[test]
fn npx_everything_is_closed_by_eof_with_nothing_left() {
    let test = "npx_everything_is_closed_by_eof_with_nothing_left";
    let Some(npx) = stdio_peers::npx(test, "mcp-server-everything", &[]) else {
        return;
    };
    // A generous EOF wait: under load node takes longer than the default 2 s to go, and the
    // test is about what ends it (EOF), not how fast (the figure: 95 ms here, alone).
    let mut server = ChildHandle::stdio_server(npx)
        .ladder(ladder("EOF:10s,TERM:2s,KILL:5s"))
        .spawn()
        .expect("spawn npx");
    let (stdin, stdout) = (server.take_stdin(), server.take_stdout());
    let (mut stdin, mut stdout) = (stdin.expect("stdin"), stdout.expect("stdout"));
    round_trip(&mut stdin, &mut stdout);
    let pids = tree(&server);
    assert!(pids.len() >= 3, "npx → … → node: {pids:?}");
    // The close's EOF is our end of stdin closed: taken out above, so closed by us here.
    drop(stdin);
    let report = server.close().expect("close");
    assert_eq!(report.ended_by, Ending::Eof, "{report}");
    assert!(report.signals.is_empty(), "no signal needed: {report}");
    assert!(report.cgroup.is_some(), "contained (root here): {report}");
    assert_none_left(&pids, &report);
    eprintln!("npx everything closed by EOF: {report}");
}

#[test]
fn a_python_server_behind_sh_c_on_a_socketpair_is_closed_by_eof() {
    let test = "a_python_server_behind_sh_c_on_a_socketpair_is_closed_by_eof";
    let Some(python) = stdio_peers::mcp_python(test) else {
        return;
    };
    let script = stdio_peers::fixture("mcp_python_server.py");
    let line = format!("exec '{}' '{}'", python.display(), script.display());
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &format!("{line}; exit 3")]);
    let server = ChildHandle::stdio_server(cmd)
        .stdio_channel(StdioChannel::Socketpair)
        // The SDK's server took up to 4.7 s to exit on EOF under two CPU hogs.
        .ladder(ladder("EOF:10s,TERM:2s,KILL:5s"))
        .spawn()
        .expect("spawn sh -c python");
    let socket = server.socket().expect("socketpair");
    round_trip(&mut &*socket, &mut &*socket);
    let pids = tree(&server);
    let report = server.close().expect("close");
    assert_eq!(report.ended_by, Ending::Eof, "{report}");
    assert!(report.signals.is_empty(), "{report}");
    assert_none_left(&pids, &report);
}

/// Waits for the stubborn fixture's pidfile: `SERVER_PID WORKER_PID`.
fn stubborn_pids(pidfile: &Path) -> (u32, u32) {
    assert!(
        eventually(Duration::from_secs(20), || pidfile.exists()),
        "the stubborn fixture wrote no pidfile"
    );
    let text = std::fs::read_to_string(pidfile).expect("pidfile");
    let mut pids = text
        .split_whitespace()
        .map(|p| p.parse::<u32>().expect("pid"));
    (pids.next().expect("server"), pids.next().expect("worker"))
}

#[test]
fn the_stubborn_server_and_its_setsid_worker_are_ended_by_the_ladder() {
    let dir = fresh_dir("stdio-server-stubborn");
    let pidfile = dir.join("pids");
    let mut cmd = Command::new("python3");
    cmd.arg(stdio_peers::fixture("stubborn_mcp.py"))
        .arg("--pidfile")
        .arg(&pidfile);
    let mut server = ChildHandle::stdio_server(cmd)
        .ladder(ladder("EOF:300ms,TERM:300ms,KILL:2s"))
        .spawn()
        .expect("spawn the stubborn server");
    let (_, worker) = stubborn_pids(&pidfile);
    {
        let (stdin, stdout) = (server.take_stdin(), server.take_stdout());
        let (mut stdin, mut stdout) = (stdin.expect("stdin"), stdout.expect("stdout"));
        round_trip(&mut stdin, &mut stdout);
        // stdin closed here: the stubborn server stays (it ignores EOF), the ladder must act.
    }
    let mut pids = tree(&server);
    pids.push(worker);
    let report = server.close().expect("close");
    // TERM is ignored (SigIgn): skipped at once; the KILL rung, to the whole cgroup, ends it.
    assert_eq!(
        report.ended_by,
        Ending::Rung {
            index: 1,
            signal: Signal::KILL
        },
        "{report}"
    );
    assert!(
        report.skipped.iter().any(|s| s.signal == Signal::TERM),
        "TERM skipped, ignored by the server: {report}"
    );
    assert!(
        report
            .output_tail
            .as_deref()
            .is_some_and(|t| t.contains("stubborn_mcp: server")),
        "{report}"
    );
    assert_none_left(&pids, &report);
    assert!(
        !is_alive(worker),
        "the setsid worker {worker} left: {report}"
    );
}
