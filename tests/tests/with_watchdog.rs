//! `childguard with --watchdog DUR` (issue 23 item 4): a server that stops sending
//! `WATCHDOG=1` is closed with its ladder and fails the run, saying why; one that keeps
//! sending it lets CMD finish.

use std::time::Duration;

use childguard_tests::command::{childguard, childguard_within, exited_saying, stderr};
use childguard_tests::*;

#[test]
fn a_server_that_stops_pinging_fails_the_run_naming_the_miss() {
    let slow = bin("cg-slowserver");
    let o = childguard_within(
        Duration::from_secs(30),
        &[
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
        ],
    );
    exited_saying(&o, 125, &["watchdog missed at +", "exited while CMD ran"]);
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
    exited_saying(&o, 0, &[]);
    assert!(!stderr(&o).contains("watchdog"), "{}", stderr(&o));
}

#[test]
fn watchdog_usage_errors() {
    let o = childguard(&["with", "--watchdog", "0", "--", "true", "--", "true"]);
    exited_saying(&o, 125, &["invalid value for --watchdog"]);
    let o = childguard(&["with", "--watchdog", "1s", "--", "true", "--", "true"]);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("watchdog needs Ready::Notify"),
        "{}",
        stderr(&o)
    );
}
