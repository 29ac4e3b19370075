//! `childguard with --watchdog DUR` (issue 23 item 4): a server that stops sending
//! `WATCHDOG=1` is closed with its ladder and fails the run, saying why; one that keeps
//! sending it lets CMD finish.

use std::time::Duration;

use childguard_tests::command::{childguard, childguard_within, exited_saying, stderr};
use childguard_tests::*;

/// `childguard with --ready notify --watchdog WATCHDOG LADDER -- slowserver PINGING -- sleep
/// SLEEP`.
fn with_pinging(watchdog: &str, ladder: &[&str], pinging: &[&str], sleep: &str) -> Vec<String> {
    let slow = bin("cg-slowserver").display().to_string();
    ["with", "--ready", "notify", "--watchdog", watchdog]
        .iter()
        .chain(ladder)
        .map(|s| s.to_string())
        .chain(["--".into(), slow])
        .chain(pinging.iter().map(|s| s.to_string()))
        .chain(["--", "sleep", sleep].map(String::from))
        .collect()
}

#[test]
fn a_server_that_stops_pinging_fails_the_run_naming_the_miss() {
    let args = with_pinging(
        "300ms",
        &["--ladder", "TERM:5s,KILL:1s"],
        &pinging(Some("200ms")),
        "60",
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = childguard_within(Duration::from_secs(30), &args);
    exited_saying(&o, 125, &["watchdog missed at +", "exited while CMD ran"]);
}

#[test]
fn a_server_that_keeps_pinging_lets_the_command_finish() {
    let args = with_pinging("2s", &[], &pinging(None), "3");
    let o = childguard(&args.iter().map(String::as_str).collect::<Vec<_>>());
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
