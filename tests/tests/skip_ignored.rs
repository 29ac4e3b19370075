//! Issue 23 item 1, the disposition-aware ladder, against real peers: a rung whose signal the
//! server ignores (`SigIgn`) is skipped at once, its grace not spent, and the report names it;
//! a rung the server has no handler for is reported as ended by the default action; `KILL` and
//! the last rung are never skipped; `Builder::skip_ignored_rungs(false)` and `NOSKIP,` send
//! every rung; the blocking close, the background reaper, `close_async` and the CLI (`run`,
//! `with`, `timeout`) all skip through the one climb.
//!
//! Time bounds are generous (the suite runs beside CPU hogs): an upper bound is a grace that a
//! skip must not have spent, a lower bound one that sending every rung must have spent. The
//! figures are the bench's (`childguard-bench skip`).

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use childguard::{
    Capture, ChildHandle, CloseReport, Disposition, Ladder, Ready, Reap, Signal, SkippedRung,
    SocketMode,
};
use childguard_tests::*;

/// The signals of the rungs skipped, in order.
fn skipped(report: &CloseReport) -> Vec<(usize, Signal)> {
    let pair = |s: &SkippedRung| (s.rung, s.signal);
    report.skipped.iter().map(pair).collect()
}

/// The signals sent, with their rung, in order.
fn sent(report: &CloseReport) -> Vec<(usize, Signal)> {
    report.signals.iter().map(|s| (s.rung, s.signal)).collect()
}

/// The `SigIgn` mask of `pid`.
fn sig_ign(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .unwrap();
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

fn ignores(pid: u32, signo: i32) -> bool {
    sig_ign(pid) & (1u64 << (signo - 1)) != 0
}

const HUP: i32 = libc::SIGHUP;

// ---- redis: it ignores SIGHUP ------------------------------------------------------------

fn redis(test: &str) -> Option<PathBuf> {
    let candidates = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let install = "apt-get install -y redis-server (or run tests/run.sh)";
    childguard_tests::postgres::find_peer(test, "redis-server", candidates, install)
}

/// A redis on a Unix socket only, persisting nothing, ready once it accepts there.
fn spawn_redis(redis: &Path, name: &str, skip_ignored: bool) -> (ChildHandle, PathBuf) {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("redis.sock");
    let mut cmd = Command::new(redis);
    cmd.args(["--port", "0", "--unixsocket"])
        .arg(&socket)
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(&dir)
        .stdout(Stdio::null());
    let handle = ChildHandle::builder(cmd)
        .ready(Ready::connect(socket.as_path()))
        .ready_timeout(Duration::from_secs(60))
        .skip_ignored_rungs(skip_ignored)
        .spawn()
        .expect("redis-server");
    let pid = handle.id().unwrap();
    assert!(
        ignores(pid, HUP),
        "precondition: redis-server (pid {pid}) does not ignore SIGHUP here (SigIgn {:#x}): \
         these tests assume redis 7's SIG_IGN for HUP",
        sig_ign(pid)
    );
    (handle, dir)
}

#[test]
fn redis_closed_by_the_default_ladder_skips_the_hup_it_ignores() {
    let test = "redis_closed_by_the_default_ladder_skips_the_hup_it_ignores";
    require_signals_not_ignored(test, &[libc::SIGTERM]);
    let Some(redis) = redis(test) else { return };
    let (handle, dir) = spawn_redis(&redis, "skip-redis-on", true);
    let report = handle.close().unwrap();
    eprintln!("{report}");
    assert_eq!(skipped(&report), [(0, Signal::HUP)], "{report}");
    assert_eq!(sent(&report), [(1, Signal::TERM)], "{report}");
    assert_eq!(report.signals[0].disposition, Some(Disposition::Caught));
    assert_eq!(report.ended_by, rung(1, Signal::TERM), "{report}");
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    assert!(!report.default_action, "{report}");
    // TERM went out at once, not after HUP's 1 s grace (it goes out in microseconds; half the
    // grace is slack for a loaded machine), and the close ended within that grace.
    assert!(
        report.signals[0].at < Duration::from_millis(500),
        "{report}"
    );
    assert!(report.total < Duration::from_secs(1), "{report}");
    let line = report.to_string();
    assert!(line.contains("HUP +") && line.contains("skipped: ignored by the server"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn redis_without_skipping_spends_the_hup_grace() {
    let test = "redis_without_skipping_spends_the_hup_grace";
    require_signals_not_ignored(test, &[libc::SIGTERM]);
    let Some(redis) = redis(test) else { return };
    let (handle, dir) = spawn_redis(&redis, "skip-redis-off", false);
    let report = handle.close().unwrap();
    eprintln!("{report}");
    assert!(report.skipped.is_empty(), "{report}");
    assert_eq!(
        sent(&report),
        [(0, Signal::HUP), (1, Signal::TERM)],
        "{report}"
    );
    assert_eq!(report.signals[0].disposition, Some(Disposition::Ignored));
    assert_eq!(report.ended_by, rung(1, Signal::TERM), "{report}");
    assert!(report.signals[1].at >= Duration::from_secs(1), "{report}");
    assert!(report.total >= Duration::from_secs(1), "{report}");
    let _ = std::fs::remove_dir_all(dir);
}

// ---- slowserver --------------------------------------------------------------------------

#[test]
fn slowserver_ignoring_hup_has_it_skipped_alone_and_as_a_group_leader() {
    let test = "slowserver_ignoring_hup_has_it_skipped_alone_and_as_a_group_leader";
    require_signals_not_ignored(test, &[libc::SIGTERM]);
    for group in [false, true] {
        let args = ["--ignore", "HUP", "--ignore-eof"];
        let (handle, ready) = spawn_slow(&args, "HUP:10s,TERM:10s,KILL:5s", group);
        assert!(ignores(ready.pid, HUP));
        let report = handle.close().unwrap();
        assert_eq!(
            skipped(&report),
            [(0, Signal::HUP)],
            "group {group}: {report}"
        );
        assert_eq!(
            sent(&report),
            [(1, Signal::TERM)],
            "group {group}: {report}"
        );
        assert_eq!(report.signals[0].to_group, group, "{report}");
        assert_eq!(report.ended_by, rung(1, Signal::TERM), "{report}");
        // slowserver without --log has no TERM handler: the kernel's default action ended it.
        assert_eq!(report.signals[0].disposition, Some(Disposition::Default));
        assert_eq!(report.status.and_then(|s| s.signal()), Some(libc::SIGTERM));
        assert!(report.default_action, "{report}");
        assert!(
            report.total < Duration::from_secs(10),
            "HUP's grace spent: {report}"
        );
        assert!(!is_alive(ready.pid));
    }
}

#[test]
fn a_server_without_a_handler_is_reported_ended_by_the_default_action() {
    let test = "a_server_without_a_handler_is_reported_ended_by_the_default_action";
    require_signals_not_ignored(test, &[HUP]);
    let (handle, ready) = spawn_slow(&["--ignore-eof"], "HUP:10s,KILL:5s", false);
    assert!(!ignores(ready.pid, HUP));
    let report = handle.close().unwrap();
    assert!(report.skipped.is_empty(), "{report}");
    assert_eq!(report.ended_by, rung(0, Signal::HUP), "{report}");
    assert_eq!(report.signals[0].disposition, Some(Disposition::Default));
    assert_eq!(report.status.and_then(|s| s.signal()), Some(HUP));
    assert!(report.default_action, "{report}");
    assert!(
        report
            .to_string()
            .contains("ended by rung 0 HUP: default action, no handler ran"),
        "{report}"
    );

    // The same death by HUP, but through a handler (`--log` installs one, which logs, then
    // re-raises HUP with its default action): a handler ran, so no such claim.
    let log = scratch("skip-default-action-log");
    let _ = std::fs::remove_file(&log);
    let log_text = log.display().to_string();
    let (handle, _) = spawn_slow(
        &["--ignore-eof", "--log", &log_text],
        "HUP:10s,KILL:5s",
        false,
    );
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::HUP), "{report}");
    assert_eq!(report.signals[0].disposition, Some(Disposition::Caught));
    assert_eq!(report.status.and_then(|s| s.signal()), Some(HUP));
    assert!(!report.default_action, "{report}");
    assert!(!report.to_string().contains("default action"), "{report}");
    assert!(std::fs::read_to_string(&log).unwrap().contains("HUP"));
    let _ = std::fs::remove_file(&log);
}

#[test]
fn hup_then_kill_on_a_hup_ignoring_server_goes_straight_to_kill() {
    let args = ["--ignore", "HUP,TERM", "--ignore-eof"];
    let (handle, ready) = spawn_slow(&args, "HUP:1s,KILL", false);
    let report = handle.close().unwrap();
    assert_eq!(skipped(&report), [(0, Signal::HUP)], "{report}");
    assert_eq!(sent(&report), [(1, Signal::KILL)], "{report}");
    // KILL is never looked at: no process can ignore or catch it.
    assert_eq!(report.signals[0].disposition, None, "{report}");
    assert!(
        report.signals[0].at < Duration::from_millis(500),
        "{report}"
    );
    assert_eq!(report.ended_by, rung(1, Signal::KILL), "{report}");
    assert_eq!(report.status.and_then(|s| s.signal()), Some(libc::SIGKILL));
    assert!(
        !report.default_action,
        "KILL has no handler to skip: {report}"
    );
    assert!(!is_alive(ready.pid));

    // KILL before an ignored rung is sent too (a rung, not the last: only its signal decides).
    let (handle, _) = spawn_slow(&args, "HUP:10s,KILL:5s,TERM:5s", false);
    let report = handle.close().unwrap();
    assert_eq!(skipped(&report), [(0, Signal::HUP)], "{report}");
    assert_eq!(sent(&report), [(1, Signal::KILL)], "{report}");
}

#[test]
fn the_last_rung_is_sent_and_waited_for_even_if_ignored() {
    // TERM (not last) is skipped; HUP, the last rung, is sent: its grace is the close's bound.
    let args = ["--ignore", "HUP,TERM", "--ignore-eof"];
    let (handle, ready) = spawn_slow(&args, "TERM:10s,HUP:300ms", false);
    let report = handle.close().unwrap();
    assert_eq!(skipped(&report), [(0, Signal::TERM)], "{report}");
    assert_eq!(sent(&report), [(1, Signal::HUP)], "{report}");
    assert_eq!(report.signals[0].disposition, Some(Disposition::Ignored));
    assert!(
        report.outlived_ladder && report.handed_to_reaper,
        "{report}"
    );
    assert!(report.total >= Duration::from_millis(300), "{report}");
    assert!(report.total < Duration::from_secs(10), "{report}");
    let pin = pidfd(ready.pid);
    sigkill(ready.pid);
    assert!(exited_within(&pin, Duration::from_secs(30)));
}

#[test]
fn noskip_in_the_ladder_text_sends_every_rung() {
    let args = ["--ignore", "HUP", "--ignore-eof"];
    let (handle, _) = spawn_slow(&args, "NOSKIP,HUP:300ms,TERM:10s,KILL:5s", false);
    let report = handle.close().unwrap();
    assert!(report.skipped.is_empty(), "{report}");
    assert_eq!(
        sent(&report),
        [(0, Signal::HUP), (1, Signal::TERM)],
        "{report}"
    );
    assert_eq!(report.signals[0].disposition, Some(Disposition::Ignored));
    assert!(
        report.signals[1].at >= Duration::from_millis(300),
        "{report}"
    );
}

#[test]
fn the_background_reaper_skips_an_ignored_rung_too() {
    // The close returns during the EOF wait; the reaper climbs: HUP (ignored) is skipped at
    // once, TERM ends it — long before HUP's 60 s grace would have run out.
    let handle = ChildHandle::builder(slowserver(&["--ignore", "HUP", "--ignore-eof"]))
        .socket(SocketMode::Stdio)
        .ladder(ladder("EOF:200ms,HUP:60s,TERM:60s,KILL:5s"))
        .reap(Reap::Background)
        .spawn()
        .unwrap();
    let ready = read_ready(&handle);
    let pin = pidfd(ready.pid);
    let report = handle.close().unwrap();
    assert!(
        report.handed_to_reaper && report.signals.is_empty(),
        "{report}"
    );
    assert!(
        exited_within(&pin, Duration::from_secs(30)),
        "the reaper did not skip the ignored HUP"
    );
    assert!(eventually(Duration::from_secs(30), || !is_our_child(
        ready.pid
    )));
}

#[test]
fn close_async_skips_an_ignored_rung_too() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let args = ["--ignore", "HUP", "--ignore-eof"];
    let (handle, _) = spawn_slow(&args, "HUP:10s,TERM:10s,KILL:5s", false);
    let report = runtime.block_on(handle.close_async()).unwrap();
    assert_eq!(skipped(&report), [(0, Signal::HUP)], "{report}");
    assert_eq!(sent(&report), [(1, Signal::TERM)], "{report}");
    assert_eq!(report.ended_by, rung(1, Signal::TERM), "{report}");
    assert!(report.total < Duration::from_secs(10), "{report}");
}

#[test]
fn output_skips_an_ignored_rung_too() {
    // Ready once slowserver said READY (after its `--ignore`): see the CLI's note below.
    let mut cmd = slowserver(&["--ignore", "HUP", "--ignore-eof"]);
    cmd.stdin(Stdio::null()).stderr(Stdio::piped());
    let handle = ChildHandle::builder(cmd)
        .capture(Capture::stdout())
        .ready(Ready::output("READY"))
        .ladder(ladder("HUP:10s,TERM:10s,KILL:5s"))
        .spawn()
        .unwrap();
    let out = handle.output(Duration::from_millis(100)).unwrap();
    assert!(out.timed_out);
    let report = out.report;
    assert_eq!(skipped(&report), [(0, Signal::HUP)], "{report}");
    assert_eq!(sent(&report), [(1, Signal::TERM)], "{report}");
}

#[test]
fn a_ladder_is_skipping_unless_told_otherwise() {
    assert!(Ladder::default().skips_ignored());
    assert!(!Ladder::default().skip_ignored(false).skips_ignored());
}

// ---- the CLI ----------------------------------------------------------------------------
//
// The ladder starts only once slowserver said READY (after its `--ignore`): a close that
// began earlier would read HUP's disposition before slowserver set it to SIG_IGN, and send it
// (the race named in `process/disposition.rs`). `run` and `timeout` are told with SIGALRM
// (`run`: a signal it does not forward climbs the ladder as written; `timeout`: its timer
// firing); `with` waits for the line itself (`--ready line:READY`).

fn childguard(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("cg-childguard"));
    cmd.args(args).stdin(Stdio::null());
    cmd
}

/// Runs `cmd` (which runs slowserver), waits for slowserver's READY line on its stdout, sends
/// childguard SIGALRM, and returns its output and how long it took from the signal.
fn alarmed_after_ready(cmd: &mut Command) -> (Output, Duration) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running cg-childguard");
    let mut line = String::new();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut line).expect("READY line");
    assert!(line.starts_with("READY "), "expected READY, got {line:?}");
    let start = Instant::now();
    let status = Command::new("kill")
        .args(["-ALRM", &child.id().to_string()])
        .status()
        .expect("kill(1)");
    assert!(status.success());
    let out = child.wait_with_output().expect("waiting for cg-childguard");
    (out, start.elapsed())
}

fn json_report(out: &Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with('{'));
    serde_json::from_str(line.unwrap_or_else(|| panic!("no JSON report: {err}"))).unwrap()
}

fn names(report: &serde_json::Value, key: &str) -> Vec<String> {
    let list = report[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key}: {report}"));
    list.iter()
        .map(|s| s["signal"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn cli_run_skips_an_ignored_rung_unless_no_skip_ignored() {
    require_signals_not_ignored("cli_run_skips", &[libc::SIGTERM]);
    let slow = bin("cg-slowserver").display().to_string();
    let server = [slow.as_str(), "--ignore", "HUP", "--ignore-eof"];
    let args = |extra: &[&'static str]| {
        let mut args = vec!["run", "--report", "json"];
        args.extend(extra);
        args.push("--");
        args.extend(server);
        args
    };
    // Skipped: HUP's 60 s grace is not spent (the close takes about a millisecond; 30 s of
    // slack for a loaded machine).
    let ladder = ["--ladder", "HUP:60s,TERM:5s,KILL:5s"];
    let (out, _) = alarmed_after_ready(&mut childguard(&args(&ladder)));
    let report = json_report(&out);
    assert_eq!(names(&report, "skipped"), ["HUP"], "{report}");
    assert_eq!(names(&report, "signals"), ["TERM"], "{report}");
    assert_eq!(report["default_action"], true, "{report}");
    assert!(report["total_ms"].as_f64().unwrap() < 30_000.0, "{report}");

    // Sent: `--no-skip-ignored`, or `NOSKIP,` in the ladder; HUP's 1 s grace is spent.
    for off in [
        &["--no-skip-ignored", "--ladder", "HUP:1s,TERM:5s,KILL:5s"][..],
        &["--ladder", "NOSKIP,HUP:1s,TERM:5s,KILL:5s"],
    ] {
        let (out, _) = alarmed_after_ready(&mut childguard(&args(off)));
        let report = json_report(&out);
        assert_eq!(names(&report, "skipped"), Vec::<String>::new(), "{report}");
        assert_eq!(
            names(&report, "signals"),
            ["HUP", "TERM"],
            "{off:?}: {report}"
        );
        assert!(report["total_ms"].as_f64().unwrap() >= 1000.0, "{report}");
    }
}

#[test]
fn cli_timeout_sends_every_signal_unless_skip_ignored() {
    let slow = bin("cg-slowserver").display().to_string();
    let timeout = |extra: &[&'static str], kill_after: &'static str| {
        let mut args = vec!["timeout", "-s", "HUP", "-k", kill_after];
        args.extend(extra);
        args.extend(["600", slow.as_str(), "--ignore", "HUP", "--ignore-eof"]);
        childguard(&args)
    };
    // GNU's semantics: HUP is sent (and ignored), KILL follows after -k's second.
    let (out, took) = alarmed_after_ready(&mut timeout(&[], "1"));
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert!(took >= Duration::from_secs(1), "{took:?}");
    // Asked: HUP is skipped, KILL goes out at once instead of after -k's 60 s.
    let (out, took) = alarmed_after_ready(&mut timeout(&["--skip-ignored"], "60"));
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[test]
fn cli_with_skips_an_ignored_rung_unless_no_skip_ignored() {
    require_signals_not_ignored("cli_with_skips", &[libc::SIGTERM]);
    let slow = bin("cg-slowserver").display().to_string();
    let with = |extra: &[&'static str], ladder: &'static str| {
        let mut args = vec!["with", "--ready", "line:READY", "--ladder", ladder];
        args.extend(extra);
        args.extend([
            "--",
            slow.as_str(),
            "--ignore",
            "HUP",
            "--ignore-eof",
            "--",
            "true",
        ]);
        let mut cmd = childguard(&args);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        cmd
    };
    let timed = |mut cmd: Command| {
        let start = Instant::now();
        let status = cmd.status().expect("running cg-childguard");
        (status, start.elapsed())
    };
    // Skipped: HUP's 60 s grace is not spent (the whole run takes well under a second; 30 s
    // of slack for a loaded machine).
    let (status, took) = timed(with(&[], "HUP:60s,TERM:5s,KILL:5s"));
    assert_eq!(status.code(), Some(0));
    assert!(
        took < Duration::from_secs(30),
        "HUP's grace spent: {took:?}"
    );
    // Sent: HUP's 1 s grace is spent before TERM.
    let (status, took) = timed(with(&["--no-skip-ignored"], "HUP:1s,TERM:5s,KILL:5s"));
    assert_eq!(status.code(), Some(0));
    assert!(took >= Duration::from_secs(1), "{took:?}");
}
