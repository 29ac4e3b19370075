//! Issue 23 item 4: what the server says on its `NOTIFY_SOCKET` reaches the report —
//! `STATUS=` (the last one), `ERRNO=`, `EXIT_STATUS=` — and `BARRIER=1` is answered
//! (`sd_notify_barrier(3)`), against slowserver `--notify-send` and `--barrier`.

use std::time::Duration;

use childguard::{ChildHandle, ErrorKind, Ready};
use childguard_tests::*;

#[test]
fn the_last_status_and_exit_status_are_in_the_report_and_bad_values_are_noted() {
    let handle = ChildHandle::builder(slowserver(&[
        "--notify",
        "--notify-send",
        "STATUS=starting\\nEXIT_STATUS=0",
        "--notify-send",
        "EXIT_STATUS=300\\nEXIT_STATUS=lots\\nMONOTONIC_USEC=soon",
        "--ignore-eof",
    ]))
    .ready(Ready::Notify)
    .spawn()
    .expect("spawn");
    let report = handle.close().expect("close");
    let notify = report.notify.expect("a notify report");
    // slowserver's READY=1 comes with STATUS=ready, after STATUS=starting.
    assert_eq!(notify.status.as_deref(), Some("ready"), "{notify:?}");
    assert_eq!(notify.exit_status, Some(0), "{notify:?}");
    assert_eq!(notify.errno, None, "{notify:?}");
    for bad in [
        "EXIT_STATUS=\"300\"",
        "EXIT_STATUS=\"lots\"",
        "MONOTONIC_USEC=\"soon\"",
    ] {
        assert!(
            notify.ignored.iter().any(|i| i.starts_with(bad)),
            "{bad}: {notify:?}"
        );
    }
}

#[test]
fn errno_at_start_up_fails_the_spawn_and_the_report_has_errno_exit_status_and_status() {
    let err = ChildHandle::builder(slowserver(&[
        "--notify",
        "--no-ready",
        "--notify-send",
        "STATUS=cannot open the data directory\\nEXIT_STATUS=71\\nERRNO=13",
        "--ignore-eof",
    ]))
    .ready(Ready::Notify)
    .ready_timeout(Duration::from_secs(20))
    .spawn()
    .expect_err("ERRNO= is a failure");
    assert_eq!(err.kind(), ErrorKind::Ready, "{err}");
    let report = err.close_report().expect("the close's report");
    let notify = report.notify.clone().expect("a notify report");
    assert_eq!(notify.errno, Some(13), "{notify:?}");
    assert_eq!(notify.exit_status, Some(71), "{notify:?}");
    assert_eq!(
        notify.status.as_deref(),
        Some("cannot open the data directory"),
        "{notify:?}"
    );
}

#[test]
fn barrier_is_answered() {
    // slowserver sends BARRIER=1 with a pipe's write end before READY=1 and exits 1 unless our
    // copy of it is closed within 20 s: a spawn that returns ready means it was.
    let handle = ChildHandle::builder(slowserver(&["--notify", "--barrier", "--ignore-eof"]))
        .ready(Ready::Notify)
        .ready_timeout(Duration::from_secs(30))
        .spawn()
        .expect("BARRIER=1 answered, then READY=1");
    let report = handle.close().expect("close");
    let notify = report.notify.expect("a notify report");
    assert!(notify.ignored.is_empty(), "{notify:?}");
}

#[test]
fn reload_is_heard_while_the_watchdog_reads_the_socket() {
    // With a watchdog the event loop reads the socket from readiness on and the handle reads
    // the loop's queue (woken by its bell): RELOADING=1 … READY=1 must still end the reload.
    let mut handle = ChildHandle::builder(slowserver(&[
        "--notify",
        "--reload",
        "100ms",
        "--watchdog-every",
        "20ms",
        "--ignore-eof",
    ]))
    .ready(Ready::Notify)
    .watchdog(Duration::from_secs(30))
    .spawn()
    .expect("spawn");
    let took = handle
        .reload(childguard::Signal::HUP, Duration::from_secs(20))
        .expect("a reload heard through the event loop's reading");
    assert!(took >= Duration::from_millis(100), "{took:?}");
    assert_eq!(handle.watchdog_missed(), None);
    let report = handle.close().expect("close");
    let notify = report.notify.expect("a notify report");
    assert!(notify.ignored.is_empty(), "{notify:?}");
}
