//! `Ready::check_once`: one attempt at a condition from outside any spawn (what `childguard
//! init --ready-file` polls): a real Unix listener, real probe commands, and the kinds that
//! need the spawn refused with the reason.

use std::os::unix::net::UnixListener;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use childguard::{ExecCheck, Ready};
use childguard_tests::*;

/// One test at a time. A probe the exec test spawns is a copy of this process until its exec:
/// it holds every fd of ours — the connect test's listener among them — until the exec closes
/// them (close-on-exec). The connect test dropping its listener in that window still found it
/// accepting ("the listener is gone" failed once in a flake hunt: a race with the scheduler).
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

#[test]
fn connect_holds_exactly_while_something_listens() {
    let _serial = serial();
    let dir = fresh_dir("check-once-connect");
    let path = dir.join("s");
    let ready = Ready::connect(path.as_path());
    assert!(!ready.check_once().unwrap(), "no socket yet");
    let listener = UnixListener::bind(&path).unwrap();
    assert!(ready.check_once().unwrap());
    drop(listener);
    assert!(!ready.check_once().unwrap(), "the listener is gone");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn exec_holds_when_the_probe_exits_0_and_an_overrunning_probe_is_killed() {
    let _serial = serial();
    assert!(Ready::exec(["true"]).unwrap().check_once().unwrap());
    assert!(!Ready::exec(["false"]).unwrap().check_once().unwrap());
    let slow = Ready::Exec(
        ExecCheck::new(["sleep", "600"])
            .unwrap()
            .attempt_timeout(Duration::from_millis(200)),
    );
    let began = Instant::now();
    assert!(!slow.check_once().unwrap());
    // Its attempt timeout, then KILL: far below the probe's 600 s.
    assert!(
        began.elapsed() < Duration::from_secs(60),
        "{:?}",
        began.elapsed()
    );
    let missing = Ready::exec(["/nonexistent/probe"]).unwrap().check_once();
    assert!(missing.is_err(), "{missing:?}");
    assert!(all_of_and_any_of_combine());
}

fn all_of_and_any_of_combine() -> bool {
    let yes = || Ready::exec(["true"]).unwrap();
    let no = || Ready::exec(["false"]).unwrap();
    Ready::any([no(), yes()]).check_once().unwrap()
        && !Ready::all([yes(), no()]).check_once().unwrap()
        && Ready::all([yes(), yes()]).check_once().unwrap()
}

#[test]
fn kinds_that_need_the_spawn_are_refused_with_the_reason() {
    for (ready, needs) in [
        (Ready::Notify, "NOTIFY_SOCKET"),
        (Ready::output("up"), "captured output"),
    ] {
        let e = ready.check_once().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
        assert!(e.to_string().contains(needs), "{e}");
    }
}
