//! Issue 23 item 4: `ChildHandle::reload` (systemd's `Type=notify-reload`) against slowserver
//! `--reload`: done when `READY=1` follows `RELOADING=1`; a timeout, an exit during the
//! reload, an interrupt and a handle without a notify socket are clear errors.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, ErrorKind, Interrupt, Ready, Signal};
use childguard_tests::*;

fn spawn_reloading(reload: &str) -> ChildHandle {
    ChildHandle::builder(slowserver(&[
        "--notify",
        "--reload",
        reload,
        "--ignore-eof",
    ]))
    .ready(Ready::Notify)
    .ladder(ladder("TERM:5s,KILL:1s"))
    .spawn()
    .expect("spawn")
}

#[test]
fn reload_returns_once_ready_follows_reloading_and_the_server_keeps_running() {
    let mut handle = spawn_reloading("300ms");
    let pid = handle.id().unwrap();
    for round in 0..2 {
        let began = Instant::now();
        let took = handle
            .reload(Signal::HUP, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("reload {round}: {e}"));
        // slowserver sends READY=1 300 ms after RELOADING=1, which follows the HUP.
        assert!(
            took >= Duration::from_millis(300),
            "round {round}: {took:?}"
        );
        assert!(took <= began.elapsed(), "round {round}: {took:?}");
        assert!(is_alive(pid), "round {round}: a reload is not an exit");
    }
    let report = handle.close().expect("close");
    let notify = report.notify.clone().expect("a notify report");
    assert_eq!(notify.status.as_deref(), Some("reloaded"), "{notify:?}");
    assert!(notify.ignored.is_empty(), "{notify:?}");
}

#[test]
fn a_reload_without_ready_times_out_with_a_clear_error() {
    let mut handle = spawn_reloading("never");
    let began = Instant::now();
    let err = handle
        .reload(Signal::HUP, Duration::from_millis(500))
        .expect_err("no READY=1 ever");
    assert!(began.elapsed() >= Duration::from_millis(500));
    assert_eq!(err.kind(), ErrorKind::Ready, "{err}");
    assert_eq!(err.io_kind(), std::io::ErrorKind::TimedOut, "{err}");
    assert!(
        err.to_string()
            .contains("no READY=1 after RELOADING=1 within 500ms of HUP"),
        "{err}"
    );
    assert!(is_alive(handle.id().unwrap()));
    let _report = handle.close().expect("close");
}

#[test]
fn a_server_that_exits_during_the_reload_is_an_error_naming_its_status() {
    let mut handle = spawn_reloading("exit");
    let err = handle
        .reload(Signal::HUP, Duration::from_secs(20))
        .expect_err("the server exits instead of reloading");
    assert_eq!(err.kind(), ErrorKind::Ready, "{err}");
    let text = err.to_string();
    assert!(text.contains("exited during the reload"), "{text}");
    assert!(text.contains("exit status: 3"), "{text}");
    let _report = handle.close().expect("close");
}

#[test]
fn a_reload_honours_the_callers_interrupt() {
    let mut handle = spawn_reloading("never");
    let stop = Arc::new(AtomicBool::new(true));
    let began = Instant::now();
    let err = handle
        .reload_interruptible(Signal::HUP, Duration::from_secs(60), &Interrupt::flag(stop))
        .expect_err("interrupted");
    assert_eq!(err.kind(), ErrorKind::Interrupted, "{err}");
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    let _report = handle.close().expect("close");
}

#[test]
fn a_reload_needs_a_notify_socket() {
    let mut handle = ChildHandle::builder(slowserver(&["--ignore-eof"]))
        .ready(Ready::output("READY"))
        .spawn()
        .expect("spawn");
    let err = handle
        .reload(Signal::HUP, Duration::from_secs(1))
        .expect_err("no notify socket");
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(
        err.to_string().contains("reload needs Ready::Notify"),
        "{err}"
    );
    let _report = handle.close().expect("close");
}
