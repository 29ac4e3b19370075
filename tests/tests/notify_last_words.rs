//! A server under a watchdog says `STOPPING=1` and exits: the close report has it, however late
//! the event loop (which reads the notify socket for the watchdog) gets to the datagram. Made
//! certain, not left to the scheduler, by the `failpoints` hook that keeps the loop from
//! reading a watchdog's socket until the handle is done with it — the slowest loop there can
//! be. (Old code: the close read only what the loop had queued, and `stopping` was `None` —
//! redis under a missed watchdog, 5 times in 60 under two CPU hogs.) A test process of its own:
//! the hook is process-wide, armed by every test here and never disarmed.

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use childguard::{ChildHandle, Ready};
use childguard_tests::*;

/// `READY=1`, then — once a line comes on stdin — `STOPPING=1` and `STATUS=last words`, and
/// exit 0: one process throughout (each step execs the next), so `NotifyAccess::Main` would
/// take it too.
fn last_words_server() -> std::process::Command {
    let notify = bin("cg-notify").display().to_string();
    let mut cmd = sh(&format!(
        "exec '{notify}' READY=1 -- sh -c \"read line; exec '{notify}' STOPPING=1 \
         'STATUS=last words' -- true\""
    ));
    cmd.stdin(Stdio::piped());
    cmd
}

/// The server exits by itself: the close finds it gone and reports what it said last.
#[test]
fn last_words_before_an_exit_of_its_own_are_in_the_report() {
    childguard::failpoint::set_watchdog_reads_last(true);
    let mut handle = ChildHandle::builder(last_words_server())
        .ready(Ready::Notify)
        // Far away: no miss, and the server never pings; the loop reads the socket all the same.
        .watchdog(Duration::from_secs(600))
        .ladder(ladder("TERM:10s,KILL:5s"))
        .spawn()
        .expect("spawn");
    let server = Pin::new(handle.id().unwrap());
    writeln!(handle.stdin().expect("piped stdin"), "go").unwrap();
    assert!(
        server.gone_within(Duration::from_secs(30)),
        "the server did not exit within 30 s"
    );
    let report = handle.close().expect("close");
    let notify = report.notify.clone().expect("a notify report");
    assert!(notify.stopping.is_some(), "STOPPING=1 unheard: {notify:?}");
    assert_eq!(notify.status.as_deref(), Some("last words"), "{notify:?}");
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    assert!(report.signals.is_empty(), "{report}");
}

/// The close's own climb: the server ignores nothing, TERM is its cue — it says `STOPPING=1`
/// as it goes, heard by the climb itself (the loop no longer reads once the close began).
#[test]
fn last_words_during_the_close_are_in_the_report() {
    childguard::failpoint::set_watchdog_reads_last(true);
    let notify = bin("cg-notify").display().to_string();
    let script = format!(
        "exec '{notify}' READY=1 -- sh -c \"trap \\\"exec '{notify}' STOPPING=1 \
         'STATUS=last words' -- true\\\" TERM; while :; do sleep 0.05; done\""
    );
    let handle = ChildHandle::builder(sh(&script))
        .ready(Ready::Notify)
        .watchdog(Duration::from_secs(600))
        .ladder(ladder("TERM:10s,KILL:5s"))
        .spawn()
        .expect("spawn");
    let pid = handle.id().unwrap();
    // The trap is set once the shell that runs it ignores nothing but has TERM caught.
    assert!(
        eventually(Duration::from_secs(30), || {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("SigCgt:"))
                    .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
                    .is_some_and(|caught| caught & (1 << (libc::SIGTERM - 1)) != 0)
            })
        }),
        "the server's TERM trap was not set within 30 s"
    );
    let report = handle.close().expect("close");
    let notify = report.notify.clone().expect("a notify report");
    assert!(notify.stopping.is_some(), "STOPPING=1 unheard: {notify:?}");
    assert_eq!(notify.status.as_deref(), Some("last words"), "{notify:?}");
    assert_eq!(
        report.ended_by,
        rung(0, childguard::Signal::TERM),
        "{report}"
    );
}
