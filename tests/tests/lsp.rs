//! Issue 31 item 7: language servers. The LSP's own close — `shutdown` request, its response,
//! `exit` notification, the server exits 0 — against a real server (pyright, pinned in
//! `tests/package.json`), directly and through the `npx` launcher chain; then our ladder for
//! a server stuck in `shutdown` (`tests/fixtures/stuck_lsp.py`), which ignores `exit`, EOF
//! and `SIGTERM`.
//!
//! Each server is contained (`Containment::BestEffort`, asserted to have got its cgroup): the
//! tree is every member of the cgroup, listed and pinned by pidfd before the close, and after
//! it every one has exited and the cgroup is gone.

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use childguard::{Capture, ChildHandle, CloseReport, Containment, Disposition, Ending, Signal};
use childguard_tests::cgroups::{cgroup_mount, cgroup_of};
use childguard_tests::lsp::{file_uri, LspClient, LspError};
use childguard_tests::stdio_peers::{fixture, npm_bin, npx};
use childguard_tests::*;
use serde_json::{json, Value};

/// How long a request may take to be answered: only a guard against a server that never
/// answers. pyright's first `documentSymbol` took 2 s on an idle machine (it loads its
/// typeshed stubs), and a node start is much slower under two CPU hogs.
const ANSWER: Duration = Duration::from_secs(60);

/// The Python file the servers are shown.
const SOURCE: &str =
    "def greet(name: str) -> str:\n    return \"hi \" + name\n\n\nclass Box:\n    size: int = 3\n";

/// A workspace directory holding `a.py`; returns (dir, a.py).
fn workspace(name: &str) -> (PathBuf, PathBuf) {
    let dir = fresh_dir(name);
    let file = dir.join("a.py");
    std::fs::write(&file, SOURCE).unwrap();
    (dir, file)
}

/// Spawns `cmd` with piped stdin and stdout, contained, with `ladder`; stderr captured (its
/// tail is in the close report). Returns the handle and a client reading the stdout.
fn spawn_lsp(mut cmd: Command, ladder_text: &str) -> (ChildHandle, LspClient<ChildStdout>) {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut handle = ChildHandle::builder(cmd)
        .contain(Containment::BestEffort)
        .ladder(ladder(ladder_text))
        .capture(Capture::stderr())
        .spawn()
        .expect("spawning the language server");
    let stdout = handle.take_stdout().expect("stdout was piped");
    (handle, LspClient::new(stdout))
}

/// `initialize` with `root` as the workspace, then `initialized`; returns the result.
fn initialize(handle: &mut ChildHandle, lsp: &mut LspClient<ChildStdout>, root: &Path) -> Value {
    let params = json!({
        "processId": std::process::id(),
        "clientInfo": {"name": "childguard-tests"},
        "rootUri": file_uri(root),
        "workspaceFolders": [{"uri": file_uri(root), "name": "ws"}],
        "capabilities": {},
    });
    let stdin = handle.stdin().expect("stdin kept in the handle");
    let result = lsp
        .request(stdin, "initialize", params, ANSWER)
        .unwrap_or_else(|e| panic!("initialize: {e}"));
    lsp.notify(stdin, "initialized", json!({})).unwrap();
    result
}

/// The processes in the child's cgroup now, each pinned by a pidfd (a pid alone may be
/// reused once the process is reaped by someone else). Fails loudly if the child got no
/// cgroup: every assertion of "nothing left" below rests on it.
fn cgroup_tree(handle: &ChildHandle) -> (PathBuf, Vec<(u32, OwnedFd)>) {
    let pid = handle.id().expect("a child");
    let path = cgroup_of(pid).expect("the child's /proc/PID/cgroup");
    assert!(
        path.rsplit('/')
            .next()
            .unwrap_or_default()
            .starts_with("childguard-"),
        "precondition: the server was not contained in a cgroup of its own (it is in {path}); \
         these tests need cgroup v2 with write access to this process's cgroup (root)"
    );
    let dir = cgroup_mount().join(path.trim_start_matches('/'));
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    let tree = procs
        .lines()
        .map(|p| p.parse::<u32>().unwrap())
        .map(|p| (p, pidfd(p)))
        .collect();
    (dir, tree)
}

/// After the close: the cgroup is reported removed and is gone, and every process of `tree`
/// has exited.
fn assert_nothing_left(report: &CloseReport, dir: &Path, tree: &[(u32, OwnedFd)]) {
    let cgroup = report
        .cgroup
        .as_ref()
        .expect("a contained close reports its cgroup");
    assert!(cgroup.removed && cgroup.members_left == 0, "{report}");
    assert!(!dir.exists(), "{} is still there: {report}", dir.display());
    for (pid, pin) in tree {
        assert!(
            exited_within(pin, Duration::ZERO),
            "process {pid} of the server's tree is still alive (state {:?}): {report}",
            proc_state(*pid)
        );
    }
}

/// The LSP close as vscode-languageclient's `stop()` does it: `shutdown`, its (null) response,
/// `exit`.
fn shutdown_exit(handle: &mut ChildHandle, lsp: &mut LspClient<ChildStdout>) {
    let stdin = handle.stdin().expect("stdin kept in the handle");
    let result = lsp
        .request(stdin, "shutdown", Value::Null, ANSWER)
        .unwrap_or_else(|e| panic!("shutdown: {e}"));
    assert_eq!(result, Value::Null, "shutdown's result is null");
    lsp.notify(stdin, "exit", Value::Null).unwrap();
}

/// [`shutdown_exit`], then the wait for the server to exit by itself (up to 60 s). Returns
/// how long it took after `exit`.
fn lsp_close(handle: &mut ChildHandle, lsp: &mut LspClient<ChildStdout>) -> Duration {
    shutdown_exit(handle, lsp);
    let sent = Instant::now();
    let status = handle.wait_timeout(ANSWER).unwrap();
    let status = status.expect("the server did not exit within 60 s of `exit`");
    assert_eq!(
        status.code(),
        Some(0),
        "an LSP server exits 0 on `exit` after `shutdown`: {status:?}"
    );
    sent.elapsed()
}

/// The report of a server that ended by the LSP close before ours began: nothing sent.
fn assert_ended_by_itself(report: &CloseReport) {
    assert_eq!(report.ended_by, Ending::BeforeClose, "{report}");
    assert!(report.signals.is_empty(), "{report}");
    assert!(report.skipped.is_empty(), "{report}");
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
}

#[test]
fn pyright_serves_then_the_lsp_close_ends_it_with_nothing_sent_and_nothing_left() {
    let test = "pyright_serves_then_the_lsp_close_ends_it";
    let Some(pyright) = npm_bin(test, "pyright-langserver") else {
        return;
    };
    let (root, file) = workspace("lsp-pyright");
    let mut cmd = Command::new(pyright);
    cmd.arg("--stdio");
    let (mut handle, mut lsp) = spawn_lsp(cmd, "EOF:2s,TERM:2s,KILL:5s");
    let init = initialize(&mut handle, &mut lsp, &root);
    assert!(
        init["capabilities"]["documentSymbolProvider"].as_bool() == Some(true)
            || init["capabilities"]["documentSymbolProvider"].is_object(),
        "pyright's capabilities: {init}"
    );
    // It serves: the file's symbols, and a hover on `greet`.
    let uri = file_uri(&file);
    let stdin = handle.stdin().unwrap();
    let open =
        json!({"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": SOURCE}});
    lsp.notify(stdin, "textDocument/didOpen", open).unwrap();
    let symbols = lsp
        .request(
            stdin,
            "textDocument/documentSymbol",
            json!({"textDocument": {"uri": uri}}),
            ANSWER,
        )
        .unwrap_or_else(|e| panic!("documentSymbol: {e}"));
    let names: Vec<&str> = symbols
        .as_array()
        .unwrap_or_else(|| panic!("documentSymbol's result is not a list: {symbols}"))
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert!(
        names.contains(&"greet") && names.contains(&"Box"),
        "{names:?}"
    );
    let hover = json!({"textDocument": {"uri": uri}, "position": {"line": 0, "character": 5}});
    let hover = lsp
        .request(stdin, "textDocument/hover", hover, ANSWER)
        .unwrap_or_else(|e| panic!("hover: {e}"));
    let text = hover["contents"]["value"].as_str().unwrap_or_default();
    assert!(text.contains("def greet(name: str) -> str"), "{hover}");

    let (dir, tree) = cgroup_tree(&handle);
    let exit_took = lsp_close(&mut handle, &mut lsp);
    let report = handle.close().unwrap();
    eprintln!(
        "{test}: exited {exit_took:?} after `exit`; tree {:?}; {report}",
        pids(&tree)
    );
    assert_ended_by_itself(&report);
    assert_nothing_left(&report, &dir, &tree);
    let _ = std::fs::remove_dir_all(&root);
}

/// The same LSP close through the launcher chain users have: `npx` → `npm exec` → `sh -c`
/// → `node`, and `close()` at once after `exit`, as a host does: the EOF rung (our end of
/// the stdin closed) is the server's time to be gone. pyright exits 0 on `exit` (or on the
/// EOF, which after `shutdown` is also 0), then `sh`, then `npm exec` with it: the whole tree
/// ends by the protocol, and the close sends nothing. The EOF grace is 20 s here, only a
/// bound for a loaded machine; vscode-languageclient gives 2 s.
#[test]
fn pyright_through_npx_closed_right_after_exit_ends_launchers_and_all_with_nothing_sent() {
    let test = "pyright_through_npx_closed_right_after_exit";
    let Some(cmd) = npx(test, "pyright-langserver", &["--stdio"]) else {
        return;
    };
    let root = fresh_dir("lsp-npx");
    let (mut handle, mut lsp) = spawn_lsp(cmd, "EOF:20s,TERM:2s,KILL:5s");
    let init = initialize(&mut handle, &mut lsp, &root);
    assert!(init["capabilities"].is_object(), "{init}");
    let (dir, tree) = cgroup_tree(&handle);
    // The launchers and the server: npm exec (node), sh, node; at least a launcher and the
    // server, whatever npm's version does in between.
    assert!(tree.len() >= 2, "npx's tree: {:?}", pids(&tree));
    shutdown_exit(&mut handle, &mut lsp);
    let report = handle.close().unwrap();
    eprintln!("{test}: tree {:?}; {report}", pids(&tree));
    // Whether the tree was gone before the close began or during its EOF wait is the
    // scheduler's choice; either way nothing was sent.
    assert!(
        matches!(report.ended_by, Ending::BeforeClose | Ending::Eof),
        "{report}"
    );
    assert!(
        report.signals.is_empty() && report.skipped.is_empty(),
        "{report}"
    );
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    assert_nothing_left(&report, &dir, &tree);
    let _ = std::fs::remove_dir_all(&root);
}

/// `python3 tests/fixtures/stuck_lsp.py --term TERM`.
fn stuck_lsp(term: &str) -> Command {
    let mut cmd = Command::new("python3");
    cmd.arg(fixture("stuck_lsp.py")).args(["--term", term]);
    cmd
}

/// The ladder for a stuck server: EOF (our end of its stdin closed) 300 ms, TERM 300 ms,
/// KILL. Short graces, as a client that has already waited for `shutdown` gives.
const STUCK_LADDER: &str = "EOF:300ms,TERM:300ms,KILL:2s";

/// Spawns the stuck fixture, initializes it, and does the client's side of the LSP close:
/// `shutdown`, a 500 ms wait for its answer that runs out (as a client gives up), `exit`.
/// Returns the handle (the server still running: it ignores all of it), its cgroup and tree.
fn stuck_in_shutdown(term: &str) -> (ChildHandle, PathBuf, Vec<(u32, OwnedFd)>) {
    let root = fresh_dir("lsp-stuck");
    let (mut handle, mut lsp) = spawn_lsp(stuck_lsp(term), STUCK_LADDER);
    let init = initialize(&mut handle, &mut lsp, &root);
    let _ = std::fs::remove_dir_all(&root);
    let pid_of = |key: &str| -> u32 {
        init["fixture"][key]
            .as_u64()
            .unwrap_or_else(|| panic!("no fixture.{key} in {init}")) as u32
    };
    let (server, worker) = (pid_of("pid"), pid_of("worker"));
    assert_eq!(handle.id(), Some(server), "python3 is the server itself");
    let (dir, tree) = cgroup_tree(&handle);
    let mut members = pids(&tree);
    members.sort_unstable();
    let mut expected = vec![server, worker];
    expected.sort_unstable();
    assert_eq!(members, expected, "the stuck server's tree");

    let stdin = handle.stdin().expect("stdin kept in the handle");
    let id = lsp.send_request(stdin, "shutdown", Value::Null).unwrap();
    match lsp.response(stdin, id, Duration::from_millis(500)) {
        Err(LspError::Timeout(_)) => {}
        other => panic!("the stuck server answered `shutdown`: {other:?}"),
    }
    lsp.notify(stdin, "exit", Value::Null).unwrap();
    // Deterministic, not a race: the fixture never exits by itself.
    assert_eq!(handle.try_wait().unwrap(), None, "the stuck server exited");
    (handle, dir, tree)
}

/// The stuck server ignores `SIGTERM` (`SIG_IGN`): the close reads that before the TERM rung
/// and skips it (skip-ignored rungs, on by default) — its grace is not spent — and `SIGKILL`
/// goes to the whole cgroup at once, worker included. The EOF wait is spent in full: the
/// server ignores EOF.
#[test]
fn a_server_stuck_in_shutdown_that_ignores_term_is_killed_tree_and_all_term_skipped() {
    let (handle, dir, tree) = stuck_in_shutdown("ignore");
    let began = Instant::now();
    let report = handle.close().unwrap();
    let took = began.elapsed();
    eprintln!("stuck, TERM ignored: close took {took:?}: {report}");
    assert_eq!(report.ended_by, rung(1, Signal::KILL), "{report}");
    assert_eq!(
        report.status.and_then(|s| s.signal()),
        Some(libc::SIGKILL),
        "{report}"
    );
    let skipped: Vec<_> = report.skipped.iter().map(|s| (s.rung, s.signal)).collect();
    assert_eq!(skipped, [(0, Signal::TERM)], "{report}");
    let sent: Vec<_> = report.signals.iter().map(|s| (s.rung, s.signal)).collect();
    assert_eq!(sent, [(1, Signal::KILL)], "TERM must not be sent: {report}");
    let kill = &report.signals[0];
    assert!(kill.to_cgroup, "KILL goes to the whole cgroup: {report}");
    assert!(
        kill.at >= Duration::from_millis(300),
        "KILL before the EOF wait was over: {report}"
    );
    assert!(
        took < Duration::from_secs(5),
        "the close took {took:?}: {report}"
    );
    assert_nothing_left(&report, &dir, &tree);
}

/// The stuck server catches `SIGTERM` and carries on: the TERM rung is sent (the server could
/// have meant to exit on it), its grace is spent, and `SIGKILL` ends the tree.
#[test]
fn a_server_stuck_in_shutdown_that_catches_term_gets_term_then_kill_tree_and_all() {
    let (handle, dir, tree) = stuck_in_shutdown("catch");
    let began = Instant::now();
    let report = handle.close().unwrap();
    let took = began.elapsed();
    eprintln!("stuck, TERM caught: close took {took:?}: {report}");
    assert_eq!(report.ended_by, rung(1, Signal::KILL), "{report}");
    assert_eq!(
        report.status.and_then(|s| s.signal()),
        Some(libc::SIGKILL),
        "{report}"
    );
    assert!(report.skipped.is_empty(), "{report}");
    let sent: Vec<_> = report.signals.iter().map(|s| (s.rung, s.signal)).collect();
    assert_eq!(sent, [(0, Signal::TERM), (1, Signal::KILL)], "{report}");
    let (term, kill) = (&report.signals[0], &report.signals[1]);
    assert_eq!(term.disposition, Some(Disposition::Caught), "{report}");
    assert!(kill.to_cgroup, "KILL goes to the whole cgroup: {report}");
    assert!(
        term.at >= Duration::from_millis(300) && kill.at >= term.at + Duration::from_millis(300),
        "a grace was cut short: {report}"
    );
    assert!(
        took < Duration::from_secs(5),
        "the close took {took:?}: {report}"
    );
    assert_nothing_left(&report, &dir, &tree);
}

fn pids(tree: &[(u32, OwnedFd)]) -> Vec<u32> {
    tree.iter().map(|(p, _)| *p).collect()
}
