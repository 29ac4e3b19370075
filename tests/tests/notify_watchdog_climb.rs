//! The climb a watchdog miss starts is the library's one climb (`close/climb.rs`, towards a
//! pidfd-pinned target), not a ladder loop of the watchdog's own: it skips the rungs the server
//! ignores, as a close does, and a close that begins while it goes on takes it over — resuming
//! behind the last rung the watchdog sent, never sending an earlier one again.

use std::time::Duration;

use childguard::{ChildHandle, Ending, Ready, Signal};
use childguard_tests::*;

/// Waits (up to 20 s) for `log` to hold the line `line`.
fn await_line(log: &std::path::Path, line: &str) {
    let seen = eventually(Duration::from_secs(20), || {
        std::fs::read_to_string(log).is_ok_and(|text| text.lines().any(|l| l == line))
    });
    assert!(seen, "{line} not logged by slowserver within 20 s");
}

#[test]
fn a_miss_skips_the_rung_the_server_ignores() {
    let log = scratch("watchdog-climb-skip.log");
    let mut args = pinging(Some("200ms"));
    args.extend(["--ignore", "HUP", "--log", log.to_str().unwrap()]);
    let handle = ChildHandle::builder(slowserver(&args))
        .ready(Ready::Notify)
        .watchdog(Duration::from_millis(300))
        // Were HUP sent, its 600 s grace would keep the server alive past the wait below.
        .ladder(ladder("HUP:600s,TERM:5s,KILL:1s"))
        .spawn()
        .expect("spawn");
    let pid = handle.id().unwrap();
    assert!(
        exited_within(&pidfd(pid), Duration::from_secs(30)),
        "the watchdog's climb did not skip the ignored HUP"
    );
    await_line(&log, "TERM");
    let report = handle.close().expect("close");
    let notify = report.notify.clone().expect("a notify report");
    assert_noted(
        &notify.watchdog,
        "watchdog: HUP skipped (the server ignores it)",
    );
    assert_noted(&notify.watchdog, "watchdog: sent TERM at +");
    assert!(
        !notify.watchdog.iter().any(|n| n.contains("sent HUP")),
        "{notify:?}"
    );
}

#[test]
fn a_close_during_the_miss_climb_resumes_behind_the_watchdogs_last_rung() {
    let log = scratch("watchdog-climb-takeover.log");
    let mut args = pinging(Some("200ms"));
    // HUP is caught and logged, then the server lingers: only KILL ends it.
    args.extend(["--slow-exit", "600s", "--log", log.to_str().unwrap()]);
    let handle = ChildHandle::builder(slowserver(&args))
        .ready(Ready::Notify)
        .watchdog(Duration::from_millis(300))
        .ladder(ladder("HUP:2s,KILL:1s"))
        .spawn()
        .expect("spawn");
    // The watchdog's climb sent HUP; its grace (2 s) runs while the close begins — or, on a
    // machine slow enough, ran out and the watchdog sent KILL itself. Either way the close
    // must not send HUP again: it resumes behind the watchdog's last rung.
    await_line(&log, "HUP");
    let report = handle.close().expect("close");
    let notify = report.notify.clone().expect("a notify report");
    assert_noted(&notify.watchdog, "watchdog: sent HUP at +");
    assert!(
        report
            .signals
            .iter()
            .all(|s| s.signal == Signal::KILL && s.rung == 1),
        "the close sent a rung the watchdog had sent already: {report}"
    );
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        report.status.and_then(|s| s.signal()),
        Some(libc::SIGKILL),
        "{report}"
    );
    // KILL came from the close (Rung 1), from the watchdog before the close began, or from the
    // watchdog's climb the close took over (Kill: a signal sent before the close).
    assert!(
        matches!(
            report.ended_by,
            Ending::Rung { index: 1, .. } | Ending::Kill { .. } | Ending::BeforeClose
        ),
        "{report}"
    );
}
