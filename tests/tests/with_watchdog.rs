//! `childguard with --watchdog DUR` (issue 23 item 4): a server that stops sending
//! `WATCHDOG=1` is closed with its ladder and fails the run, saying why; one that keeps
//! sending it lets CMD finish.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use childguard_tests::*;

fn childguard(args: &[&str]) -> Output {
    Command::new(bin("cg-childguard"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running cg-childguard")
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_server_that_stops_pinging_fails_the_run_naming_the_miss() {
    let slow = bin("cg-slowserver");
    let start = Instant::now();
    let o = childguard(&[
        "with",
        "--ready",
        "notify",
        "--watchdog",
        "300ms",
        "--ladder",
        "TERM:5s,KILL:1s",
        "--",
        slow.to_str().unwrap(),
        "--notify",
        "--watchdog-every",
        "20ms",
        "--watchdog-for",
        "200ms",
        "--ignore-eof",
        "--",
        "sleep",
        "60",
    ]);
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(err(&o).contains("watchdog missed at +"), "{}", err(&o));
    assert!(err(&o).contains("exited while CMD ran"), "{}", err(&o));
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_server_that_keeps_pinging_lets_the_command_finish() {
    let slow = bin("cg-slowserver");
    let o = childguard(&[
        "with",
        "--ready",
        "notify",
        "--watchdog",
        "2s",
        "--",
        slow.to_str().unwrap(),
        "--notify",
        "--watchdog-every",
        "20ms",
        "--ignore-eof",
        "--",
        "sleep",
        "3",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(!err(&o).contains("watchdog"), "{}", err(&o));
}

#[test]
fn watchdog_usage_errors() {
    let o = childguard(&["with", "--watchdog", "0", "--", "true", "--", "true"]);
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    assert!(
        err(&o).contains("invalid value for --watchdog"),
        "{}",
        err(&o)
    );
    let o = childguard(&["with", "--watchdog", "1s", "--", "true", "--", "true"]);
    assert_ne!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        err(&o).contains("watchdog needs Ready::Notify"),
        "{}",
        err(&o)
    );
}
