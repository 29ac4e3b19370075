//! The close path against slowserver, one test per row of the core issue.

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ending, Ladder, Signal, SocketMode};
use childguard_tests::*;

fn term_signal(report: &childguard::CloseReport) -> Option<i32> {
    report.status.and_then(|s| s.signal())
}

#[test]
fn exits_on_eof() {
    let (handle, ready) = spawn_slow(&[], "EOF:10s,KILL:1s", false);
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, Ending::Eof, "{report}");
    assert!(report.signals.is_empty(), "{report}");
    assert_eq!(report.status.unwrap().code(), Some(0));
    assert!(report.reaped.is_some() && !report.handed_to_reaper);
    // Slack for a slow machine; a close that missed the exit would wait out the 10 s EOF grace.
    assert!(report.total < Duration::from_secs(5), "{report}");
    assert_eq!(
        proc_state(ready.pid),
        None,
        "reaped child must be gone from /proc"
    );
}

#[test]
fn ignores_hup_then_term_ends_it() {
    // NOSKIP: the ignored HUP is sent and its grace spent (skipping it: skip_ignored.rs).
    let (handle, ready) = spawn_slow(
        &["--ignore", "HUP", "--ignore-eof"],
        "NOSKIP,HUP:100ms,TERM:10s,KILL:2s",
        false,
    );
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(1, Signal::TERM), "{report}");
    assert_eq!(term_signal(&report), Some(libc::SIGTERM));
    let sent: Vec<Signal> = report.signals.iter().map(|s| s.signal).collect();
    assert_eq!(sent, [Signal::HUP, Signal::TERM]);
    // TERM went out once HUP's grace ran out, not before.
    assert!(
        report.signals[1].at >= report.signals[0].at + Duration::from_millis(100),
        "{report}"
    );
    // Slack for a slow machine; a close that missed the exit would wait out TERM's 10 s.
    assert!(report.total < Duration::from_secs(5), "{report}");
    assert_eq!(proc_state(ready.pid), None);
}

#[test]
fn ignores_hup_and_term_kill_ends_it() {
    let (handle, ready) = spawn_slow(
        &["--ignore", "HUP,TERM", "--ignore-eof"],
        "NOSKIP,HUP:50ms,TERM:50ms,KILL:10s",
        false,
    );
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(2, Signal::KILL), "{report}");
    assert_eq!(term_signal(&report), Some(libc::SIGKILL));
    assert_eq!(report.signals.len(), 3);
    assert!(!report.outlived_ladder);
    assert_eq!(proc_state(ready.pid), None);
}

#[test]
fn stopped_server_ends_at_first_rung() {
    let (handle, ready) = spawn_slow(&["--stop-self", "--ignore-eof"], "HUP:10s,KILL:2s", false);
    assert!(
        eventually(Duration::from_secs(5), || proc_state(ready.pid)
            == Some('T')),
        "server never stopped"
    );
    let report = handle.close().unwrap();
    // HUP alone would stay pending in a stopped process; the SIGCONT after it lets it act.
    assert_eq!(report.ended_by, rung(0, Signal::HUP), "{report}");
    assert_eq!(term_signal(&report), Some(libc::SIGHUP));
    // Slack for a slow machine; a HUP left pending would wait out its 10 s grace.
    assert!(report.total < Duration::from_secs(5), "{report}");
}

#[test]
fn grandchild_holding_socket_does_not_survive_with_process_group() {
    // The server exits on EOF at once; its worker keeps the socket and ignores EOF. The EOF
    // grace (waited out in full while the worker lives) leaves a slow machine time to see the
    // leader exit on EOF: with 50 ms it sometimes got HUP first (ended by rung 0, not EOF).
    let (handle, ready) = spawn_slow(&["--fork-grandchild"], "EOF:2s,HUP:5s,KILL:5s", true);
    assert!(ready.grandchild > 0 && is_alive(ready.grandchild));
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, Ending::Eof, "{report}");
    assert_eq!(
        report.signals.first().map(|s| (s.signal, s.to_group)),
        Some((Signal::HUP, true)),
        "{report}"
    );
    assert!(report.group_survivors.is_empty(), "{report}");
    assert!(!report.socket_may_be_held, "{report}");
    assert!(
        !is_alive(ready.grandchild),
        "grandchild {} survived: {report}",
        ready.grandchild
    );
}

#[test]
fn grandchild_without_process_group_is_reported() {
    let (handle, ready) = spawn_slow(&["--fork-grandchild"], "EOF:10s,KILL:1s", false);
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, Ending::Eof, "{report}");
    assert!(report.socket_may_be_held, "{report}");
    assert!(
        is_alive(ready.grandchild),
        "without a group the worker is not ours to signal"
    );
    sigkill(ready.grandchild);
}

#[test]
fn exits_before_any_request_gives_clean_report() {
    let handle = ChildHandle::builder(slowserver(&["--exit-immediately", "3"]))
        .socket(SocketMode::Stdio)
        .ladder("HUP:1s,KILL:1s".parse().unwrap())
        .spawn()
        .unwrap();
    let pid = handle.id().unwrap();
    assert!(
        eventually(Duration::from_secs(5), || proc_state(pid) == Some('Z')),
        "child never exited"
    );
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, Ending::BeforeClose, "{report}");
    assert_eq!(report.status.unwrap().code(), Some(3));
    assert!(report.signals.is_empty(), "{report}");
    assert!(report.notes.is_empty(), "{report}");
    assert_eq!(proc_state(pid), None);
}

#[test]
fn kill_term_then_drop_sends_no_second_signal() {
    let log = scratch("signals.log");
    let log_arg = log.to_str().unwrap();
    let (mut handle, ready) = spawn_slow(
        &["--log", log_arg, "--ignore-eof"],
        "HUP:10s,TERM:10s,KILL:10s",
        false,
    );
    let status = handle.kill(Signal::TERM, Duration::ZERO).unwrap();
    assert!(status.is_none() || status.unwrap().signal() == Some(libc::SIGTERM));
    let started = Instant::now();
    drop(handle);
    // Slack for a slow machine (the child handles TERM on a thread of its own); well below the
    // 10 s a rung's grace would take.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "drop waited for a rung it should have skipped"
    );
    assert_eq!(proc_state(ready.pid), None, "drop must reap");
    let logged = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(logged.lines().any(|l| l == "TERM"), "{logged:?}");
    assert!(
        !logged.lines().any(|l| l == "HUP"),
        "a second signal reached the child: {logged:?}"
    );
}

#[test]
fn kill_then_close_reports_the_kill_and_kill_is_idempotent() {
    let (mut handle, _ready) = spawn_slow(&["--ignore-eof"], "HUP:1s,KILL:1s", false);
    let status = handle
        .kill(Signal::TERM, Duration::from_secs(30))
        .unwrap()
        .expect("TERM ends slowserver");
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    let again = handle.kill(Signal::KILL, Duration::ZERO).unwrap();
    assert_eq!(
        again,
        Some(status),
        "kill after exit returns the same status, sends nothing"
    );
    let report = handle.close().unwrap();
    assert_eq!(
        report.ended_by,
        Ending::Kill {
            signal: Signal::TERM
        },
        "{report}"
    );
    assert!(report.signals.is_empty(), "{report}");
}

#[test]
fn kill_with_grace_returns_none_while_alive() {
    let (mut handle, ready) = spawn_slow(&["--ignore", "HUP", "--ignore-eof"], "KILL:1s", false);
    let started = Instant::now();
    assert_eq!(
        handle
            .kill(Signal::HUP, Duration::from_millis(100))
            .unwrap(),
        None
    );
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(is_alive(ready.pid));
    assert_eq!(handle.try_wait().unwrap(), None);
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::KILL), "{report}");
}

#[test]
fn drop_is_bounded_by_ladder_total_and_survivor_goes_to_reaper() {
    // TERM and HUP ignored and no KILL rung: the child outlives the whole ladder.
    let (handle, ready) = spawn_slow(
        &["--ignore", "HUP,TERM", "--ignore-eof"],
        "HUP:100ms,TERM:100ms",
        false,
    );
    let total = handle.ladder().total_grace();
    let started = Instant::now();
    drop(handle);
    let took = started.elapsed();
    // The bound is the ladder's total plus a few system calls (and the reaper thread's start);
    // 2 s of slack for a slow machine. A drop that waited for this child would never return.
    assert!(
        took < total + Duration::from_secs(2),
        "drop took {took:?}, ladder total {total:?}"
    );
    assert!(
        is_alive(ready.pid),
        "the child was meant to outlive the ladder"
    );
    assert!(childguard::reaper::in_flight() >= 1);
    // Once it dies, the background reaper reaps it: no zombie left.
    sigkill(ready.pid);
    assert!(
        eventually(Duration::from_secs(5), || proc_state(ready.pid).is_none()),
        "reaper did not reap {}",
        ready.pid
    );
}

#[test]
fn close_reports_outlived_ladder() {
    let (handle, ready) = spawn_slow(&["--ignore", "HUP", "--ignore-eof"], "HUP:20ms", false);
    let report = handle.close().unwrap();
    assert!(
        report.outlived_ladder && report.handed_to_reaper,
        "{report}"
    );
    assert_eq!(report.ended_by, Ending::Outlived);
    assert_eq!(report.status, None);
    sigkill(ready.pid);
    assert!(eventually(Duration::from_secs(5), || proc_state(ready.pid).is_none()));
}

#[test]
fn from_socket_never_signals() {
    let log = scratch("from-socket.log");
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let theirs = std::os::fd::OwnedFd::from(theirs);
    let mut cmd = slowserver(&["--log", log.to_str().unwrap()]);
    cmd.stdin(theirs.try_clone().unwrap()).stdout(theirs);
    let mut server = cmd.spawn().unwrap();
    drop(cmd);
    let handle = ChildHandle::from_socket(ours);
    assert_eq!(handle.id(), None);
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, Ending::NoChild);
    assert!(
        report.signals.is_empty() && report.shutdown.is_some(),
        "{report}"
    );
    // The server saw EOF and left on its own, having received no signal.
    let status = server.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert_eq!(logged, "", "a socket-only handle signalled someone");
}

#[test]
fn from_socket_kill_is_an_error_not_a_signal() {
    let (ours, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut handle = ChildHandle::from_socket(ours);
    let err = handle.kill(Signal::KILL, Duration::ZERO).unwrap_err();
    assert!(err.to_string().contains("no child"), "{err}");
}

#[test]
fn spawned_from_exiting_thread_with_exit_with_parent_lives_on() {
    let handle = std::thread::spawn(|| {
        ChildHandle::builder(slowserver(&["--ignore-eof"]))
            .socket(SocketMode::Stdio)
            .exit_with_parent(true)
            .ladder("KILL:2s".parse().unwrap())
            .spawn()
            .unwrap()
    })
    .join()
    .unwrap();
    let ready = read_ready(&handle);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        is_alive(ready.pid),
        "PDEATHSIG fired when the spawning thread exited"
    );
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::KILL));
}

fn supervisor_killed_child_is_gone(extra: &[&str]) {
    let mut args = vec![bin("cg-slowserver").to_str().unwrap().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.extend(["--", "--ignore", "HUP,TERM", "--ignore-eof"].map(String::from));
    let mut sup = std::process::Command::new(bin("cg-supervisor"))
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(sup.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let pid: u32 = line
        .trim()
        .strip_prefix("CHILD ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    std::thread::sleep(Duration::from_millis(200));
    assert!(is_alive(pid), "child died before its supervisor");
    sup.kill().unwrap();
    sup.wait().unwrap();
    // The design's bound is 1 s (PDEATHSIG is sent as the supervisor exits); 5 s is slack for
    // the child to be scheduled and die on a slow machine. Without PDEATHSIG it would never
    // die: it ignores HUP, TERM and EOF.
    let gone = eventually(Duration::from_secs(5), || !is_alive(pid));
    if !gone {
        sigkill(pid);
    }
    assert!(
        gone,
        "child {pid} outlived its SIGKILLed supervisor by more than 5 s"
    );
}

#[test]
fn supervisor_sigkilled_child_gone_within_1s() {
    supervisor_killed_child_is_gone(&["--exit-with-parent"]);
}

#[test]
fn supervisor_sigkilled_child_spawned_from_thread_gone_within_1s() {
    supervisor_killed_child_is_gone(&["--exit-with-parent", "--from-thread"]);
}

#[test]
fn portable_mechanism_climbs_the_same_ladder() {
    let handle = ChildHandle::builder(slowserver(&["--ignore", "HUP", "--ignore-eof"]))
        .socket(SocketMode::Stdio)
        .ladder("HUP:100ms,TERM:10s".parse().unwrap())
        .force_portable(true)
        .spawn()
        .unwrap();
    let ready = read_ready(&handle);
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(1, Signal::TERM), "{report}");
    // Slack for a slow machine; a lost SIGCHLD wake-up would wait out TERM's 10 s grace.
    assert!(
        report.total < Duration::from_secs(5),
        "SIGCHLD did not wake the wait: {report}"
    );
    assert_eq!(proc_state(ready.pid), None);
}

#[test]
fn delayed_read_in_flight_closes_fast() {
    let (handle, ready) = spawn_slow(&["--delay-read", "30s"], "HUP:10s,TERM:2s,KILL:5s", false);
    handle.socket().unwrap().write_all(b"READ 1\n").unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::HUP), "{report}");
    // Slack for a slow machine; a close held up by the read in flight would take HUP's 10 s.
    assert!(report.total < Duration::from_secs(5), "{report}");
    assert_eq!(proc_state(ready.pid), None);
}

#[test]
fn report_display_and_json() {
    // NOSKIP: the ignored HUP is sent, so both signals are in the report.
    let (handle, _ready) = spawn_slow(
        &["--ignore", "HUP", "--ignore-eof"],
        "NOSKIP,HUP:30ms,KILL:1s",
        false,
    );
    let report = handle.close().unwrap();
    let line = report.to_string();
    assert!(!line.contains('\n'));
    for part in [
        "shutdown +",
        "HUP +",
        "KILL +",
        "exited +",
        "signal KILL",
        "rung 1 KILL",
        "reaped +",
    ] {
        assert!(line.contains(part), "{part:?} missing from {line:?}");
    }
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["ended_by"]["kind"], "rung");
    assert_eq!(json["ended_by"]["signal"], "KILL");
    assert_eq!(json["signals"][0]["signal"], "HUP");
    assert_eq!(json["status"]["signal"], libc::SIGKILL);
    assert!(json["reaped_ms"].as_f64().unwrap() >= json["exited_ms"].as_f64().unwrap());
}

#[test]
fn ladder_from_env_and_errors() {
    // Parse errors name the bad part (the env var itself is exercised in a subprocess-free way
    // by parsing the same text the variable would hold).
    let err = "HUP:1s,TERM:2x".parse::<Ladder>().unwrap_err();
    assert_eq!(err.part(), "TERM:2x");
    assert!(err.to_string().contains("TERM:2x"));
    let l: Ladder = "sighup:1s,15:2s,KILL:5s".parse().unwrap();
    assert_eq!(l, Ladder::default());
    assert_eq!(l.to_string().parse::<Ladder>().unwrap(), l);
}
