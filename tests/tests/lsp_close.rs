//! Issue 52 item 4: the LSP close as a user calls it — `childguard_lsp::close` and
//! `close_async`, the published crate's API only — against real language servers pinned by
//! `tests/package.json` (pyright, typescript-language-server) and a server that ignores
//! `exit` (`tests/fixtures/stuck_lsp.py`). Each server spawned with
//! `ChildHandle::stdio_server` (contained), its cgroup's members pinned by pidfd before the
//! close and every one checked gone after it.
//!
//! Times are printed (`--nocapture`), and only generous bounds asserted: the figures are the
//! bench's business.

mod lsp_close_util;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::{Duration, Instant};

use childguard::{Disposition, Ending, Signal};
use childguard_lsp::{Ended, Exit, LspClose, LspCloseReport, Shutdown};
use childguard_tests::lsp::file_uri;
use childguard_tests::stdio_peers::{fixture, npm_bin};
use childguard_tests::*;
use lsp_close_util::*;
use serde_json::json;

/// Generous steps: a loaded machine must not turn an answer into a timeout.
const PATIENT: LspClose = LspClose {
    shutdown_timeout: ANSWER,
    exit_grace: ANSWER,
};

/// The report of a server that the protocol ended: `shutdown` answered, gone after `exit`,
/// exit status 0, and the close sent nothing to anything of its tree.
fn assert_closed_by_the_protocol(report: &LspCloseReport) {
    assert_eq!(report.shutdown, Shutdown::Answered, "{report}");
    assert_eq!(report.exit, Exit::Sent, "{report}");
    assert_eq!(report.ended_by, Ended::Exit, "{report}");
    assert!(report.is_clean(), "{report}");
    assert!(
        report.close.signals.is_empty() && report.close.skipped.is_empty(),
        "{report}"
    );
    assert_eq!(
        report.close.status.and_then(|s| s.code()),
        Some(0),
        "{report}"
    );
    assert!(report.total < ANSWER, "{report}");
}

/// pyright, in a workspace of one file it has analysed (`documentSymbol` answered).
fn pyright_serving(test: &str) -> Option<(childguard::ChildHandle, std::path::PathBuf)> {
    let pyright = npm_bin(test, "pyright-langserver")?;
    let root = fresh_dir(test);
    let file = root.join("a.py");
    let source = "def greet(name: str) -> str:\n    return 'hi ' + name\n";
    std::fs::write(&file, source).unwrap();
    let mut cmd = Command::new(pyright);
    cmd.arg("--stdio");
    let mut handle = spawn(cmd, None);
    let mut lsp = client(&mut handle);
    initialize(&mut handle, &mut lsp, &root);
    let uri = file_uri(&file);
    let stdin = handle.stdin().unwrap();
    let doc = json!({"uri": uri, "languageId": "python", "version": 1, "text": source});
    lsp.notify(stdin, "textDocument/didOpen", json!({"textDocument": doc}))
        .unwrap();
    let symbols = lsp
        .request(
            stdin,
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": uri}}),
            ANSWER,
        )
        .unwrap_or_else(|e| panic!("documentSymbol: {e}"));
    assert!(symbols.to_string().contains("greet"), "{symbols}");
    // Idle, as an editor's server is when it is closed: its analysis of the file published.
    let published = |m: &serde_json::Value| m["method"] == "textDocument/publishDiagnostics";
    let deadline = Instant::now() + ANSWER;
    while !lsp.notifications.iter().any(published) {
        let message = lsp
            .read_message(deadline)
            .unwrap_or_else(|e| panic!("waiting for pyright's diagnostics: {e}"));
        lsp.notifications.push(message);
    }
    Some((handle, root))
}

/// The blocking close: `shutdown` answered, `exit`, gone — nothing signalled, nothing left.
#[test]
fn pyright_is_closed_by_shutdown_and_exit_with_nothing_sent_and_nothing_left() {
    let test = "lsp_close_pyright";
    let Some((handle, root)) = pyright_serving(test) else {
        return;
    };
    let (dir, members) = tree(&handle);
    let began = Instant::now();
    let report = childguard_lsp::close(handle, PATIENT).unwrap();
    let took = began.elapsed();
    eprintln!(
        "{test}: tree {:?}; the LSP close took {took:?}: {report}",
        pids(&members)
    );
    assert_closed_by_the_protocol(&report);
    assert_nothing_left(&report.close, &dir, &members);
    let _ = std::fs::remove_dir_all(&root);
}

/// The same through the tokio face, on a current-thread runtime.
#[test]
fn pyright_is_closed_by_close_async_with_nothing_sent_and_nothing_left() {
    let test = "lsp_close_pyright_async";
    let Some((handle, root)) = pyright_serving(test) else {
        return;
    };
    let (dir, members) = tree(&handle);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let began = Instant::now();
    let report = runtime
        .block_on(childguard_lsp::close_async(handle, PATIENT))
        .unwrap();
    let took = began.elapsed();
    eprintln!(
        "{test}: tree {:?}; close_async took {took:?}: {report}",
        pids(&members)
    );
    assert_closed_by_the_protocol(&report);
    assert_nothing_left(&report.close, &dir, &members);
    let _ = std::fs::remove_dir_all(&root);
}

/// typescript-language-server runs tsserver processes of its own (node children): after
/// `exit` they go with it, and the close still finds every process of the tree gone.
#[test]
fn typescript_language_server_and_its_tsservers_are_closed_by_shutdown_and_exit() {
    let test = "lsp_close_typescript";
    let Some(server) = npm_bin(test, "typescript-language-server") else {
        return;
    };
    let root = fresh_dir(test);
    let file = root.join("a.ts");
    let source = "export function greet(name: string): string {\n  return 'hi ' + name;\n}\n";
    std::fs::write(&file, source).unwrap();
    let mut cmd = Command::new(server);
    cmd.arg("--stdio");
    // The tsservers exit once their parent has: the EOF wait (until the cgroup is empty) is
    // long only as a bound for a loaded machine.
    let mut handle = spawn(cmd, Some("EOF:60s,TERM:2s,KILL:5s"));
    let mut lsp = client(&mut handle);
    initialize(&mut handle, &mut lsp, &root);
    let uri = file_uri(&file);
    let stdin = handle.stdin().unwrap();
    let doc = json!({"uri": uri, "languageId": "typescript", "version": 1, "text": source});
    lsp.notify(stdin, "textDocument/didOpen", json!({"textDocument": doc}))
        .unwrap();
    let hover = json!({"textDocument": {"uri": uri}, "position": {"line": 0, "character": 17}});
    let hover = lsp
        .request(stdin, "textDocument/hover", hover, ANSWER)
        .unwrap_or_else(|e| panic!("hover: {e}"));
    assert!(hover.to_string().contains("greet"), "{hover}");
    drop(lsp);
    let (dir, members) = tree(&handle);
    assert!(
        members.len() >= 2,
        "tsserver runs beside the server: {:?}",
        pids(&members)
    );
    let began = Instant::now();
    let report = childguard_lsp::close(handle, PATIENT).unwrap();
    let took = began.elapsed();
    eprintln!(
        "{test}: tree {:?}; the LSP close took {took:?}: {report}",
        pids(&members)
    );
    assert_closed_by_the_protocol(&report);
    assert_nothing_left(&report.close, &dir, &members);
    let _ = std::fs::remove_dir_all(&root);
}

/// The stuck server (never answers `shutdown`, ignores `exit`, EOF, SIGTERM; a worker
/// process) with short steps and a ladder without an EOF wait: `shutdown` times out, `exit`
/// changes nothing, the exit grace runs out, TERM is skipped (ignored), KILL ends the tree.
#[test]
fn a_server_that_ignores_exit_is_ended_by_the_ladder_tree_and_all() {
    let mut cmd = Command::new("python3");
    cmd.arg(fixture("stuck_lsp.py")).args(["--term", "ignore"]);
    let mut handle = spawn(cmd, Some("TERM:300ms,KILL:5s"));
    let root = fresh_dir("lsp_close_stuck");
    let mut lsp = client(&mut handle);
    let init = initialize(&mut handle, &mut lsp, &root);
    drop(lsp);
    let worker = init["fixture"]["worker"]
        .as_u64()
        .expect("the worker's pid") as u32;
    let (dir, members) = tree(&handle);
    assert!(pids(&members).contains(&worker), "{:?}", pids(&members));
    let how = LspClose {
        shutdown_timeout: Duration::from_millis(300),
        exit_grace: Duration::from_millis(300),
    };
    let report = childguard_lsp::close(handle, how).unwrap();
    eprintln!("stuck, TERM ignored: {report}");
    assert_eq!(report.shutdown, Shutdown::TimedOut, "{report}");
    assert_eq!(report.exit, Exit::Sent, "{report}");
    let kill = Ended::Ladder(Ending::Rung {
        index: 1,
        signal: Signal::KILL,
    });
    assert_eq!(report.ended_by, kill, "{report}");
    let skipped: Vec<_> = report.close.skipped.iter().map(|s| s.signal).collect();
    assert_eq!(skipped, [Signal::TERM], "{report}");
    assert_eq!(
        report.close.status.and_then(|s| s.signal()),
        Some(libc::SIGKILL),
        "{report}"
    );
    // Each step waited its whole time: 300 ms for the answer, 300 ms after `exit`.
    let exit_sent = report.exit_sent.expect("exit was sent");
    assert!(exit_sent >= Duration::from_millis(300), "{report}");
    assert!(
        report.total >= exit_sent + Duration::from_millis(300),
        "{report}"
    );
    assert!(report.total < Duration::from_secs(10), "{report}");
    assert_nothing_left(&report.close, &dir, &members);
    let _ = std::fs::remove_dir_all(&root);
}

/// The same server catching SIGTERM, through the tokio face and the handle's own ladder
/// (`EOF:300ms,TERM:300ms,KILL:5s`): after the exit grace, the ladder's EOF wait, TERM (caught,
/// nothing ends), KILL.
#[test]
fn a_server_that_ignores_exit_and_catches_term_is_ended_by_kill_through_close_async() {
    let mut cmd = Command::new("python3");
    cmd.arg(fixture("stuck_lsp.py")).args(["--term", "catch"]);
    let mut handle = spawn(cmd, Some("EOF:300ms,TERM:300ms,KILL:5s"));
    let root = fresh_dir("lsp_close_stuck_async");
    let mut lsp = client(&mut handle);
    initialize(&mut handle, &mut lsp, &root);
    drop(lsp);
    let (dir, members) = tree(&handle);
    assert_eq!(members.len(), 2, "server and worker: {:?}", pids(&members));
    let how = LspClose {
        shutdown_timeout: Duration::from_millis(200),
        exit_grace: Duration::from_millis(200),
    };
    let runtime = multi_thread_runtime();
    let report = runtime
        .block_on(childguard_lsp::close_async(handle, how))
        .unwrap();
    eprintln!("stuck, TERM caught, async: {report}");
    assert_eq!(report.shutdown, Shutdown::TimedOut, "{report}");
    let kill = Ended::Ladder(Ending::Rung {
        index: 1,
        signal: Signal::KILL,
    });
    assert_eq!(report.ended_by, kill, "{report}");
    let sent: Vec<_> = report.close.signals.iter().map(|s| s.signal).collect();
    assert_eq!(sent, [Signal::TERM, Signal::KILL], "{report}");
    assert_eq!(
        report.close.signals[0].disposition,
        Some(Disposition::Caught),
        "{report}"
    );
    assert!(report.close.signals[1].to_cgroup, "{report}");
    assert!(
        report.close.signals[0].at >= Duration::from_millis(300),
        "{report}"
    );
    assert!(report.total < Duration::from_secs(10), "{report}");
    assert_nothing_left(&report.close, &dir, &members);
    let _ = std::fs::remove_dir_all(&root);
}

/// `close_async`'s future dropped mid-`shutdown` (a timeout around it): the handle, dropped in
/// the runtime, closes in the background — its ladder climbed by childguard's reaper — and the
/// stuck server's tree still ends.
#[test]
fn close_async_dropped_mid_shutdown_still_ends_the_tree() {
    let mut cmd = Command::new("python3");
    cmd.arg(fixture("stuck_lsp.py")).args(["--term", "ignore"]);
    let mut handle = spawn(cmd, Some("TERM:300ms,KILL:5s"));
    let root = fresh_dir("lsp_close_dropped");
    let mut lsp = client(&mut handle);
    initialize(&mut handle, &mut lsp, &root);
    drop(lsp);
    let (_dir, members) = tree(&handle);
    let runtime = multi_thread_runtime();
    let cut = runtime.block_on(async {
        let close = childguard_lsp::close_async(handle, PATIENT);
        tokio::time::timeout(Duration::from_millis(200), close).await
    });
    // Deterministic: the server never answers, and `shutdown_timeout` is a minute.
    assert!(cut.is_err(), "the close ended before the timeout: {cut:?}");
    for (pid, pin) in &members {
        assert!(
            exited_within(pin, ANSWER),
            "process {pid} of the tree outlived the dropped close"
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
