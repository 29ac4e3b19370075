//! Issue 31 item 4: the rmcp adapter (`childguard-rmcp`) against real stdio MCP servers — the
//! reference "everything" server through `npx` (`npx` → `npm exec` → `sh` → `node`), and the
//! stubborn fixture (ignores EOF and TERM, a `setsid` worker holding stdout). rmcp's client
//! runs over our async stdio; its close (and the transport's drop) runs our ladder on the
//! whole tree, and the close report is reachable afterwards.

use std::future::Future;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use childguard::{CloseReport, Ending, Signal};
use childguard_rmcp::ChildTransport;
use childguard_tests::cgroups::{cgroup_mount, cgroup_of};
use childguard_tests::stdio_peers::{fixture, npx};
use childguard_tests::*;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::{RoleClient, ServiceExt};

/// Far above any wait here (an `npx` start on a loaded machine included): only a hang gets
/// there.
const GENEROUS: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    childguard_tests::multi_thread_runtime()
}

async fn within<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(GENEROUS, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {GENEROUS:?}"))
}

/// The server's cgroup, found from its pid before rmcp takes the transport: its members are
/// the whole tree (the spawn must have contained it — `Containment::BestEffort` on a machine
/// with a writable cgroup v2, as CI's).
struct Tree {
    procs: std::path::PathBuf,
}

impl Tree {
    fn of(transport: &ChildTransport) -> Tree {
        let pid = transport.id().expect("a child");
        let cgroup = cgroup_of(pid).expect("the server runs");
        assert!(
            cgroup.contains("childguard-"),
            "the server was not contained in a cgroup of its own ({cgroup}): this test needs \
             a writable cgroup v2 (CI runs as root)"
        );
        Tree {
            procs: cgroup_mount()
                .join(cgroup.trim_start_matches('/'))
                .join("cgroup.procs"),
        }
    }

    /// Every process in it now.
    fn members(&self) -> Vec<u32> {
        std::fs::read_to_string(&self.procs)
            .unwrap_or_else(|e| panic!("{}: {e}", self.procs.display()))
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }
}

/// The close left nothing: every pid of `tree` is gone (`/proc` State, not `kill(pid, 0)`)
/// and the cgroup was emptied and removed.
fn assert_nothing_left(tree: &[u32], report: &CloseReport) {
    let alive: Vec<u32> = tree.iter().copied().filter(|&p| is_alive(p)).collect();
    assert!(alive.is_empty(), "left alive: {alive:?}: {report}");
    let cg = report.cgroup.as_ref().expect("contained");
    assert!(
        cg.removed && !cg.path.exists() && cg.members_left == 0,
        "{report}"
    );
    assert!(report.escaped.is_empty(), "{report}");
    assert!(report.reaped.is_some(), "{report}");
}

/// The echo tool's argument object.
fn args(pairs: &[(&str, serde_json::Value)]) -> serde_json::Map<String, serde_json::Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

/// [`ChildTransport`], recording what rmcp sends over it (to see a cancel go out).
struct Recording {
    inner: ChildTransport,
    sent: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Transport<RoleClient> for Recording {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.sent
            .lock()
            .unwrap()
            .push(serde_json::to_value(&item).unwrap());
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// initialize, tools/list, tools/call `echo` through `npx`; then rmcp's `cancel()` closes the
/// transport: the server reads EOF and exits on its own (no signal), nothing of the npx tree
/// is left, and the report is there.
#[test]
fn everything_server_initialize_list_echo_then_close_ends_by_eof() {
    let name = "everything_server_initialize_list_echo_then_close_ends_by_eof";
    let Some(cmd) = npx(name, "mcp-server-everything", &[]) else {
        return;
    };
    runtime().block_on(async {
        // The adapter's settings with a generous EOF wait: under load node can take longer than
        // the MCP close's 2 s to go, and the test is about what ends it (EOF), not how fast.
        let handle = childguard_rmcp::settings::stdio_server(cmd)
            .ladder(ladder("EOF:10s,TERM:2s,KILL:5s"))
            .spawn()
            .expect("spawn npx");
        let transport = ChildTransport::new(handle).expect("piped stdio");
        let closed = transport.closed();
        let tree = Tree::of(&transport);
        let client = within("initialize", ().serve(transport))
            .await
            .expect("initialize");
        let info = client.peer_info().expect("the server's initialize result");
        let server_name = info.server_info.as_ref().map(|i| i.name.as_str());
        assert!(
            server_name.is_some_and(|n| n.contains("everything")),
            "{info:?}"
        );
        let tools = within("tools/list", client.list_tools(Default::default()))
            .await
            .expect("tools/list");
        assert!(tools.tools.iter().any(|t| t.name == "echo"), "{tools:?}");
        let echo = CallToolRequestParams::new("echo")
            .with_arguments(args(&[("message", "through childguard".into())]));
        let answer = within("tools/call echo", client.call_tool(echo))
            .await
            .expect("tools/call");
        let text = serde_json::to_string(&answer.content).unwrap();
        assert!(text.contains("Echo: through childguard"), "{text}");
        assert!(closed.now().is_none(), "closed before the close");
        // The tree, now that npx started node (which answered).
        let members = tree.members();
        assert!(members.len() >= 2, "npx and node at least: {members:?}");
        let quit = within("cancel", client.cancel()).await.expect("cancel");
        assert!(
            matches!(quit, rmcp::service::QuitReason::Cancelled),
            "{quit:?}"
        );
        let report = within("the report", closed.report())
            .await
            .expect("a report");
        eprintln!("{report}");
        assert_eq!(report.ended_by, Ending::Eof, "{report}");
        assert!(report.signals.is_empty(), "{report}");
        assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
        assert_nothing_left(&members, &report);
    });
}

/// A long `tools/call` cancelled by dropping its future: rmcp sends
/// `notifications/cancelled` for its id over our stdin, the client goes on working (an echo
/// answers), and the close still ends the whole npx tree (the cancelled operation's timer
/// keeps node alive past EOF, so a rung may be what ends it) with its report.
#[test]
fn everything_server_cancelled_call_then_close_leaves_nothing() {
    let name = "everything_server_cancelled_call_then_close_leaves_nothing";
    let Some(cmd) = npx(name, "mcp-server-everything", &[]) else {
        return;
    };
    runtime().block_on(async {
        let transport = ChildTransport::spawn(cmd).expect("spawn npx");
        let closed = transport.closed();
        let tree = Tree::of(&transport);
        let sent = Arc::new(Mutex::new(Vec::new()));
        let recording = Recording {
            inner: transport,
            sent: Arc::clone(&sent),
        };
        let client = within("initialize", ().serve(recording))
            .await
            .expect("initialize");
        let long = CallToolRequestParams::new("trigger-long-running-operation")
            .with_arguments(args(&[("duration", 60.into()), ("steps", 60.into())]));
        let cancelled = tokio::time::timeout(Duration::from_millis(300), client.call_tool(long));
        assert!(
            cancelled.await.is_err(),
            "a 60 s operation answered within 300 ms"
        );
        let echo = CallToolRequestParams::new("echo")
            .with_arguments(args(&[("message", "after the cancel".into())]));
        let answer = within("echo after the cancel", client.call_tool(echo))
            .await
            .expect("tools/call");
        assert!(serde_json::to_string(&answer.content)
            .unwrap()
            .contains("after the cancel"));
        let messages = sent.lock().unwrap().clone();
        let call_id = messages
            .iter()
            .find(|m| {
                m["method"] == "tools/call"
                    && m["params"]["name"] == "trigger-long-running-operation"
            })
            .map(|m| m["id"].clone())
            .unwrap_or_else(|| panic!("no long tools/call sent: {messages:?}"));
        assert!(
            messages
                .iter()
                .any(|m| m["method"] == "notifications/cancelled"
                    && m["params"]["requestId"] == call_id),
            "no notifications/cancelled for {call_id}: {messages:?}"
        );
        let members = tree.members();
        assert!(members.len() >= 2, "npx and node at least: {members:?}");
        drop(within("cancel", client.cancel()).await.expect("cancel"));
        let report = within("the report", closed.report())
            .await
            .expect("a report");
        eprintln!("{report}");
        assert!(
            !matches!(report.ended_by, Ending::Outlived | Ending::InBackground),
            "{report}"
        );
        assert_nothing_left(&members, &report);
    });
}

/// `python3 tests/fixtures/stubborn_mcp.py --pidfile PATH`: its server and worker pids once
/// both run.
fn stubborn(name: &str) -> (Command, std::path::PathBuf) {
    let pidfile = scratch(&format!("{name}.pids"));
    let _ = std::fs::remove_file(&pidfile);
    let mut cmd = Command::new("python3");
    cmd.arg(fixture("stubborn_mcp.py"))
        .arg("--pidfile")
        .arg(&pidfile);
    (cmd, pidfile)
}

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

/// The MCP close of a server that ignores EOF and TERM, with a `setsid` worker holding its
/// stdout: rmcp's `cancel()` closes the transport; EOF (2 s) is ignored, TERM is skipped (the
/// server ignores it), KILL ends it — the worker too (the cgroup), nothing left — and rmcp's close returns once the
/// ladder is climbed, with the report (KILL, the stderr tail) reachable.
#[test]
fn stubborn_server_is_ended_by_the_ladder_worker_included() {
    let name = "stubborn_server_is_ended_by_the_ladder_worker_included";
    let (cmd, pidfile) = stubborn(name);
    runtime().block_on(async {
        let transport = ChildTransport::spawn(cmd).expect("spawn the stubborn fixture");
        let closed = transport.closed();
        let tree = Tree::of(&transport);
        let client = within("initialize", ().serve(transport))
            .await
            .expect("initialize");
        let echo =
            CallToolRequestParams::new("echo").with_arguments(args(&[("text", "stubborn".into())]));
        let answer = within("tools/call", client.call_tool(echo))
            .await
            .expect("tools/call");
        assert!(serde_json::to_string(&answer.content)
            .unwrap()
            .contains("stubborn"));
        let (server, worker) = read_pids(&pidfile);
        let members = tree.members();
        assert!(
            members.contains(&server) && members.contains(&worker),
            "server {server} and worker {worker} in the cgroup: {members:?}"
        );
        // The pidfile is written after the fork, the worker's setsid() may come just after.
        assert!(
            eventually(GENEROUS, || proc_sid(worker) != proc_sid(server)),
            "precondition: the worker {worker} never left the server's session"
        );
        let started = std::time::Instant::now();
        drop(within("cancel", client.cancel()).await.expect("cancel"));
        let took = started.elapsed();
        let report = within("the report", closed.report())
            .await
            .expect("a report");
        eprintln!("{report}");
        assert_eq!(report.ended_by, rung(1, Signal::KILL), "{report}");
        // TERM is ignored by the server (SigIgn): the ladder skips it rather than wait 2 s
        // for nothing (`Builder::skip_ignored_rungs`, on by default); KILL comes after EOF's 2 s.
        let signals: Vec<Signal> = report.signals.iter().map(|s| s.signal).collect();
        assert_eq!(signals, [Signal::KILL], "{report}");
        let skipped: Vec<Signal> = report.skipped.iter().map(|s| s.signal).collect();
        assert_eq!(skipped, [Signal::TERM], "{report}");
        // EOF's 2 s before the KILL; the ladder's bound (9 s) plus slack after.
        assert!(
            took >= Duration::from_secs(2),
            "closed in {took:?}: {report}"
        );
        assert!(
            took < Duration::from_secs(9 + 20),
            "closed in {took:?}: {report}"
        );
        let tail = report.output_tail.as_deref().unwrap_or_default();
        assert!(tail.contains("stdin EOF, staying"), "stderr tail: {tail:?}");
        assert_nothing_left(&members, &report);
        assert!(
            !is_alive(worker),
            "the setsid worker {worker} outlived the close"
        );
    });
    let _ = std::fs::remove_file(&pidfile);
}

/// The transport dropped without rmcp (never served, or its task aborted): inside a runtime
/// the drop starts the same close in a task, and the report reaches `Closed`; outside any
/// runtime the drop closes in place. Either way the ladder ends the tree, worker included.
#[test]
fn dropped_transport_runs_the_ladder_inside_and_outside_a_runtime() {
    let name = "dropped_transport_runs_the_ladder";
    for in_runtime in [true, false] {
        let (cmd, pidfile) = stubborn(&format!("{name}-{in_runtime}"));
        let transport = ChildTransport::spawn(cmd).expect("spawn the stubborn fixture");
        let closed = transport.closed();
        let (server, worker) = read_pids(&pidfile);
        let members = Tree::of(&transport).members();
        assert!(members.contains(&worker), "{members:?}");
        let rt = runtime();
        if in_runtime {
            rt.block_on(async move { drop(transport) });
        } else {
            drop(transport);
        }
        let report = rt
            .block_on(within("the report", closed.report()))
            .unwrap_or_else(|| panic!("in_runtime {in_runtime}: no report"));
        eprintln!("in_runtime {in_runtime}: {report}");
        assert_eq!(report.ended_by, rung(1, Signal::KILL), "{report}");
        assert_nothing_left(&members, &report);
        assert!(!is_alive(server) && !is_alive(worker), "{report}");
        let _ = std::fs::remove_file(&pidfile);
    }
}

/// A handle whose stdio is not piped is refused with a clear error, and given back.
#[test]
fn a_handle_without_piped_stdio_is_refused_and_given_back() {
    let handle = childguard::ChildHandle::builder(sh("exec sleep 30"))
        .ladder(ladder("KILL:5s"))
        .spawn()
        .unwrap();
    let refused = ChildTransport::new(handle).expect_err("no piped stdio");
    let text = refused.to_string();
    assert!(
        text.contains("stdin and stdout") && text.contains("Stdio::piped()"),
        "{text}"
    );
    let report = refused.handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::KILL), "{report}");
}

/// The session id of `pid`.
fn proc_sid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(3)?.parse().ok()
}

/// A send parked on a full pipe (the server never reads its stdin) when the transport is
/// closed: the close does not wait for it (rmcp's writer lock is held by that send), closes
/// stdin under it — the send fails with `BrokenPipe` — and climbs the ladder (TERM ends
/// `sleep` after EOF's 2 s).
#[test]
fn close_is_not_held_up_by_a_send_parked_on_a_full_pipe() {
    runtime().block_on(async {
        let mut transport = ChildTransport::spawn(sh("exec sleep 600")).expect("spawn");
        let closed = transport.closed();
        // 2 MB in one message: more than a pipe can hold (64 KiB by default, 1 MiB at most).
        let big: TxJsonRpcMessage<RoleClient> = serde_json::from_value(serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": { "requestId": 1, "reason": "x".repeat(2_000_000) }
        }))
        .expect("a client notification");
        let send = tokio::spawn(transport.send(big));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !send.is_finished(),
            "2 MB cannot fit in a pipe nobody reads"
        );
        within("the close", transport.close()).await.expect("close");
        let err = within("the parked send", send)
            .await
            .unwrap()
            .expect_err("the send cannot have completed");
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe, "{err}");
        let report = closed.now().expect("published by the close");
        let report = report.as_ref().as_ref().expect("close ok");
        assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    });
}
