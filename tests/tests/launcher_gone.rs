//! No grace waited for a launcher gone (issue 31 item 2): when the main process (a launcher:
//! `sh -c`, `npx`) exits on a rung that did not reach the others in its cgroup, the others get
//! that rung at once, its grace counted from then, and the rest of the ladder follows — the
//! close does not wait out graces for signals sent to nobody.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Containment, Ending, Signal};
use childguard_cli::procs::descendants_of;
use childguard_tests::{eventually, is_alive, ladder, left_after, sh, stdio_peers};

/// Spawns `script` under `sh -c`, contained (`KillMode::Mixed`, the default: catchable rungs
/// to the main process only), and waits until the launcher's child is the server: `sleep` run
/// (its exec done), ignoring the signals in `ignores` (`SigIgn` read in `/proc`) — so the test
/// never closes a server still being set up.
fn contained_launcher(script: &str, ladder_text: &str, ignores: &[i32]) -> (ChildHandle, Vec<u32>) {
    let handle = ChildHandle::builder(sh(script))
        .contain(Containment::Cgroup)
        .ladder(ladder(ladder_text))
        .spawn()
        .expect("contained spawn (needs a writable cgroup v2: run as root or delegate one)");
    let main = handle.id().expect("pid");
    let wanted = childguard_tests::init::set_of(ignores);
    let server_up = |pid: u32| {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        comm.trim() == "sleep"
            && status.contains("SigIgn:")
            && childguard_tests::init::sig_sets(&status).0 & wanted == wanted
    };
    assert!(
        eventually(Duration::from_secs(20), || {
            let rest = descendants_of(main);
            !rest.is_empty() && rest.iter().all(|&p| server_up(p))
        }),
        "the launcher's server never came up: {:?}",
        descendants_of(main)
    );
    (handle, descendants_of(main))
}

#[test]
fn the_rung_that_ended_the_launcher_goes_to_the_server_at_once() {
    // sh dies of HUP (default action); sleep, its child, never got it from the rung.
    let (handle, rest) = contained_launcher("sleep 60 & wait", "HUP:3s,TERM:3s,KILL:5s", &[]);
    let report = handle.close().expect("close");
    assert_eq!(
        report.ended_by,
        Ending::Rung {
            index: 0,
            signal: Signal::HUP
        },
        "{report}"
    );
    let passed: Vec<_> = report.signals.iter().filter(|s| s.to_rest).collect();
    assert_eq!(passed.len(), 1, "one HUP passed on to those left: {report}");
    assert_eq!(passed[0].signal, Signal::HUP, "{report}");
    assert!(passed[0].reached.is_some_and(|n| n >= 1), "{report}");
    assert!(
        !report
            .signals
            .iter()
            .any(|s| s.signal == Signal::TERM || s.signal == Signal::KILL),
        "sleep died of the HUP passed on: no TERM, no KILL: {report}"
    );
    // Without the pass-on the close waits out HUP's 3 s and TERM's 3 s (a TERM to the launcher,
    // gone) and ends at the cgroup's KILL: at least 6 s.
    assert!(report.total < Duration::from_millis(2500), "{report}");
    let cgroup = report.cgroup.as_ref().expect("contained");
    assert!(cgroup.removed && cgroup.members_left == 0, "{report}");
    for pid in rest {
        assert!(!is_alive(pid), "server {pid} left: {report}");
    }
}

#[test]
fn a_server_that_ignores_the_passed_rung_gets_the_next_after_its_grace_from_then() {
    // The server ignores HUP (set in its subshell before exec), sh does not.
    let (handle, rest) = contained_launcher(
        "(trap '' HUP; exec sleep 60) & wait",
        "HUP:300ms,TERM:3s,KILL:5s",
        &[libc::SIGHUP],
    );
    let report = handle.close().expect("close");
    let sent: Vec<_> = report
        .signals
        .iter()
        .map(|s| (s.signal, s.to_rest, s.to_cgroup))
        .collect();
    assert_eq!(
        sent,
        vec![
            (Signal::HUP, false, false),
            (Signal::HUP, true, true),
            (Signal::TERM, false, true),
        ],
        "HUP to the launcher, HUP passed on, then TERM to those left (not to the launcher, \
         gone): {report}"
    );
    let (hup, term) = (report.signals[1].at, report.signals[2].at);
    assert!(
        term >= hup + Duration::from_millis(300),
        "TERM only after HUP's grace, counted from the pass-on: {report}"
    );
    // Without the pass-on: 300 ms, then TERM to the launcher (gone) and its 3 s, then KILL.
    assert!(report.total < Duration::from_millis(2500), "{report}");
    assert_eq!(
        report.cgroup.as_ref().map(|c| c.members_left),
        Some(0),
        "{report}"
    );
    for pid in rest {
        assert!(!is_alive(pid), "server {pid} left: {report}");
    }
}

/// `childguard run MODE -- npx --no-install mcp-server-everything`, stdin kept open: one MCP
/// round trip, then TERM to childguard (forwarded in place of the first rung). Returns the
/// JSON report and the tree's pids seen before the close.
fn run_npx_everything(test: &str, mode: &str) -> Option<(serde_json::Value, Vec<u32>, Duration)> {
    let npx = stdio_peers::npx(test, "mcp-server-everything", &[])?;
    let mut cmd = Command::new(childguard_tests::bin("cg-childguard"));
    cmd.args(["run", mode, "--report", "json", "--"])
        .arg(npx.get_program())
        .args(npx.get_args())
        .current_dir(stdio_peers::tests_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut run = cmd.spawn().expect("childguard run");
    let mut stdin = run.stdin.take().expect("stdin");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"test","version":"1"}}}}}}"#
    )
    .expect("write initialize");
    let mut line = String::new();
    BufReader::new(run.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the answer");
    assert!(line.contains(r#""id":1"#), "no initialize answer: {line:?}");
    let tree = descendants_of(run.id());
    assert!(tree.len() >= 2, "npx launched no server: {tree:?}");
    let asked = Instant::now();
    let pid = rustix::process::Pid::from_raw(run.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("TERM to childguard");
    let out = run.wait_with_output().expect("wait");
    let took = asked.elapsed();
    drop(stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let json = stderr
        .lines()
        .find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l.trim_start_matches("childguard: ")).ok()
        })
        .unwrap_or_else(|| panic!("no JSON report on stderr: {stderr}"));
    Some((json, tree, took))
}

fn assert_npx_closed_at_once(mode: &str, test: &str) {
    let Some((report, tree, took)) = run_npx_everything(test, mode) else {
        return;
    };
    // The 3 s this used to take were HUP's 1 s and TERM's 2 s waited for a launcher gone.
    assert!(
        took < Duration::from_millis(1500),
        "took {took:?}: {report}"
    );
    let left = left_after(&tree, Duration::from_secs(2));
    assert!(left.is_empty(), "left: {left:?} of {tree:?}: {report}");
}

#[test]
fn npx_everything_contained_closes_within_the_rung_that_ended_npx() {
    assert_npx_closed_at_once("--contain", "npx_everything_contained");
}

#[test]
fn npx_everything_in_a_group_closes_within_the_rung_that_ended_npx() {
    assert_npx_closed_at_once("--group", "npx_everything_in_a_group");
}
