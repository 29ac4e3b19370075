//! The Rust interrupt API (`childguard::Interrupt`): what an interrupted spawn, wait and close
//! return, and what they leave. The interrupt's check is what says "now": each test's check
//! fails only once the precondition it names holds (the server wrote its pid), so no test
//! depends on when a thread or timer runs.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use childguard::{ChildHandle, CloseControl, ErrorKind, Interrupt, Ready};
use childguard_tests::{exited_within, is_alive, ladder, pidfd, proc_state, scratch, sh};

/// The server's pid and a pidfd pinning it, taken by the interrupt's check before it fires.
type Pinned = Arc<Mutex<Option<(u32, OwnedFd)>>>;

/// An interrupt that fires once `path` holds a complete pid line; it pins that pid first
/// (`Pinned`): the interrupted spawn's server is closed and reaped at once, its pid then free
/// for another process.
fn fires_once_pid_written(path: std::path::PathBuf) -> (Interrupt, Pinned) {
    let pinned: Pinned = Arc::default();
    let keep = Arc::clone(&pinned);
    let interrupt = Interrupt::new(move || match std::fs::read_to_string(&path) {
        Ok(text) if text.ends_with('\n') => {
            let pid: u32 = text.trim().parse().expect("a pid");
            keep.lock()
                .unwrap()
                .get_or_insert_with(|| (pid, pidfd(pid)));
            Err(std::io::Error::other("test interrupt"))
        }
        _ => Ok(()),
    });
    (interrupt, pinned)
}

/// The process `pid` (our child, pinned by `pin`) exits and is reaped (no `/proc` entry, or a
/// zombie of someone else's) within 30 s.
fn assert_ends_and_is_reaped(pin: &std::os::fd::OwnedFd, pid: u32, what: &str) {
    assert!(
        exited_within(pin, Duration::from_secs(30)),
        "{what}: it kept running"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while proc_state(pid).is_some_and(|s| s != 'Z') || childguard_tests::is_our_child(pid) {
        assert!(
            Instant::now() < deadline,
            "{what}: never reaped ({:?})",
            proc_state(pid)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_interrupted_spawn_returns_at_once_and_its_server_is_closed_in_the_background() {
    for ready in [
        Ready::output("never printed"),
        Ready::connect(scratch("never.sock")),
    ] {
        let pidfile = scratch("pid");
        let script = format!(
            "echo $$ > {p}.tmp && mv {p}.tmp {p} && exec sleep 1000",
            p = pidfile.display()
        );
        let (interrupt, pinned) = fires_once_pid_written(pidfile.clone());
        let started = Instant::now();
        let err = ChildHandle::builder(sh(&script))
            .ladder(ladder("TERM:2s,KILL:5s"))
            .ready(ready.clone())
            .ready_timeout(Duration::from_secs(120))
            .interrupt(interrupt)
            .spawn()
            .expect_err("the spawn was not interrupted");
        let took = started.elapsed();
        assert_eq!(err.kind(), ErrorKind::Interrupted, "{ready:?}: {err}");
        assert!(err.to_string().contains("test interrupt"), "{err}");
        assert!(took < Duration::from_secs(60), "{ready:?}: took {took:?}");
        let report = err.close_report().expect("the close report");
        assert!(report.handed_to_reaper, "{ready:?}: {report}");
        let (pid, pin) = pinned
            .lock()
            .unwrap()
            .take()
            .expect("the check pinned the server");
        assert_ends_and_is_reaped(&pin, pid, "the interrupted spawn's server");
        let _ = std::fs::remove_file(&pidfile);
    }
}

#[test]
fn an_interrupted_wait_leaves_the_server_running() {
    let stop = Arc::new(AtomicBool::new(true));
    let mut handle = ChildHandle::builder(sh("exec sleep 1000"))
        .ladder(ladder("KILL:10s"))
        .spawn()
        .expect("spawning sleep");
    let pid = handle.id().expect("a pid");
    let started = Instant::now();
    let err = handle
        .wait_timeout_interruptible(Duration::from_secs(60), &Interrupt::flag(stop.clone()))
        .expect_err("the wait was not interrupted");
    assert_eq!(err.kind(), ErrorKind::Interrupted, "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(is_alive(pid), "the server did not keep running");
    assert!(handle.try_wait().expect("try_wait").is_none());
    // Unset: the same call waits out its timeout.
    stop.store(false, Ordering::SeqCst);
    let waited = handle
        .wait_timeout_interruptible(Duration::from_millis(30), &Interrupt::flag(stop))
        .expect("an uninterrupted wait");
    assert!(waited.is_none());
    let report = handle.close().expect("close");
    assert!(!report.handed_to_reaper, "{report}");
}

#[test]
fn an_interrupted_close_returns_and_the_reaper_finishes_the_ladder() {
    // TERM ignored (set before the pid file is written): only the KILL rung, 3 s after TERM,
    // ends it.
    let pidfile = scratch("pid");
    let script = format!(
        "trap '' TERM; echo $$ > {p}.tmp && mv {p}.tmp {p} && exec sleep 1000",
        p = pidfile.display()
    );
    let handle = ChildHandle::builder(sh(&script))
        .ladder(ladder("TERM:3s,KILL:10s"))
        .spawn()
        .expect("spawning sh");
    let pid = handle.id().expect("a pid");
    let pin = pidfd(pid);
    assert!(
        childguard_tests::eventually(Duration::from_secs(30), || pidfile.exists()),
        "the server never wrote its pid"
    );
    let _ = std::fs::remove_file(&pidfile);
    let started = Instant::now();
    let err = handle
        .close_with(CloseControl::new().interrupt(Interrupt::new(|| {
            Err(std::io::Error::other("test interrupt"))
        })))
        .expect_err("the close was not interrupted");
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Interrupted, "{err}");
    assert!(
        took < Duration::from_millis(2500),
        "the close waited {took:?}"
    );
    let report = err.close_report().expect("the report so far");
    assert!(report.handed_to_reaper, "{report}");
    assert_eq!(report.signals.len(), 1, "{report}");
    assert_ends_and_is_reaped(&pin, pid, "the interrupted close's server");
}
