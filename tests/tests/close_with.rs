//! `ChildHandle::close_with`: the library's one climb, told things by its caller — the ladder
//! to climb, "go to the next rung now" through a readable fd, and each rung before it is sent.
//! (The CLI drives its closes through it: see cli.rs's `a_second_ctrl_c_skips_to_the_next_rung`.)

use std::cell::RefCell;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use childguard::{CloseControl, Rung, Signal};
use childguard_tests::*;

/// Drains everything waiting on the non-blocking `rx`; returns whether there was anything.
fn drain(mut rx: &UnixStream) -> bool {
    let mut buf = [0u8; 64];
    let mut got = false;
    while matches!(rx.read(&mut buf), Ok(n) if n > 0) {
        got = true;
    }
    got
}

/// The fd turns readable while HUP's 30 s grace runs (rung 0's announcement writes to it, so
/// it is readable before the wait begins, whatever the scheduler does): KILL goes out at once.
/// The control's ladder replaces the handle's.
#[test]
fn a_readable_fd_skips_to_the_next_rung() {
    let (handle, ready) = spawn_slow(&["--ignore", "HUP", "--ignore-eof"], "TERM:1s", false);
    let (rx, tx) = UnixStream::pair().unwrap();
    rx.set_nonblocking(true).unwrap();
    let announced = RefCell::new(Vec::<(usize, Rung)>::new());
    let woke = RefCell::new(0);
    let started = Instant::now();
    let report = handle
        .close_with(
            CloseControl::new()
                // NOSKIP: HUP is ignored, and sent all the same (the fd must cut its grace).
                .ladder(ladder("NOSKIP,HUP:30s,KILL:10s"))
                .skip_when_readable(rx.as_fd(), || {
                    *woke.borrow_mut() += 1;
                    drain(&rx)
                })
                .on_rung(|index, rung| {
                    announced.borrow_mut().push((index, rung));
                    if index == 0 {
                        (&tx).write_all(b"x").unwrap();
                    }
                }),
        )
        .unwrap();
    assert_eq!(report.ended_by, rung(1, Signal::KILL), "{report}");
    let sent: Vec<Signal> = report.signals.iter().map(|s| s.signal).collect();
    assert_eq!(sent, [Signal::HUP, Signal::KILL], "{report}");
    let announced: Vec<(usize, Signal)> = announced
        .borrow()
        .iter()
        .map(|(i, r)| (*i, r.signal))
        .collect();
    assert_eq!(announced, [(0, Signal::HUP), (1, Signal::KILL)]);
    assert!(*woke.borrow() >= 1);
    assert!(started.elapsed() < Duration::from_secs(10), "{report}");
    assert!(
        report.reaped.is_some() && !report.handed_to_reaper,
        "{report}"
    );
    assert_eq!(proc_state(ready.pid), None);
}

/// The last rung has no next one: however often the fd says "skip", its grace is waited out
/// (a skip never makes a close give up early), and the child is handed to the reaper.
#[test]
fn the_last_rungs_grace_is_never_cut() {
    let (handle, ready) = spawn_slow(&["--ignore", "HUP", "--ignore-eof"], "TERM:1s", false);
    let (rx, tx) = UnixStream::pair().unwrap();
    rx.set_nonblocking(true).unwrap();
    let woke = RefCell::new(0);
    let report = handle
        .close_with(
            CloseControl::new()
                .ladder(ladder("HUP:400ms"))
                .skip_when_readable(rx.as_fd(), || {
                    *woke.borrow_mut() += 1;
                    drain(&rx)
                })
                .on_rung(|_, _| (&tx).write_all(b"x").unwrap()),
        )
        .unwrap();
    assert!(*woke.borrow() >= 1, "the fd was never watched");
    assert!(
        report.outlived_ladder && report.handed_to_reaper,
        "{report}"
    );
    assert!(report.total >= Duration::from_millis(400), "{report}");
    // Ours to end: it ignores HUP, and the ladder is used up.
    sigkill(ready.pid);
    assert!(childguard::reaper::drain(
        Instant::now() + Duration::from_secs(10)
    ));
    assert_eq!(proc_state(ready.pid), None);
}

/// `hand_off_when`: asked before each wait and at least every `every` during one; its `true`
/// stops the closing thread, which returns with the report so far, and the reaper climbs the
/// rest of the ladder on its schedule (here: KILL after HUP's 1 s) and reaps.
#[test]
fn hand_off_when_gives_the_rest_of_the_close_to_the_reaper() {
    let (handle, ready) = spawn_slow(&["--ignore", "HUP", "--ignore-eof"], "TERM:1s", false);
    let pin = pidfd(ready.pid);
    let asked = RefCell::new(0);
    let started = Instant::now();
    let report = handle
        .close_with(
            CloseControl::new()
                // NOSKIP: HUP is ignored, and sent all the same (its grace is what is cut).
                .ladder(ladder("NOSKIP,HUP:1s,KILL:10s"))
                // Asked before the first wait (0) and after each 10 ms of HUP's grace: the
                // third time says stop — about 20 ms in, long before the 1 s grace ends.
                .hand_off_when(Duration::from_millis(10), || {
                    *asked.borrow_mut() += 1;
                    *asked.borrow() >= 3
                }),
        )
        .unwrap();
    assert_eq!(*asked.borrow(), 3, "{report}");
    assert!(started.elapsed() < Duration::from_millis(900), "{report}");
    assert_eq!(
        report.ended_by,
        childguard::Ending::InBackground,
        "{report}"
    );
    assert!(
        report.handed_to_reaper && report.reaped.is_none(),
        "{report}"
    );
    let sent: Vec<Signal> = report.signals.iter().map(|s| s.signal).collect();
    assert_eq!(sent, [Signal::HUP], "{report}");
    // The child ignores HUP: only the reaper's KILL ends it.
    assert!(exited_within(&pin, Duration::from_secs(30)), "never killed");
    assert!(childguard::reaper::drain(
        Instant::now() + Duration::from_secs(30)
    ));
    assert_eq!(proc_state(ready.pid), None);
}

/// A `stop` that says `true` at once makes the close a background one: the first due rung is
/// sent and the close returns without waiting.
#[test]
fn hand_off_when_true_at_once_waits_for_nothing() {
    let (handle, ready) = spawn_slow(&["--ignore-eof"], "TERM:1s", false);
    let started = Instant::now();
    let report = handle
        .close_with(
            CloseControl::new()
                .ladder(ladder("TERM:30s,KILL:10s"))
                .hand_off_when(Duration::from_secs(60), || true),
        )
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "{report}");
    let sent: Vec<Signal> = report.signals.iter().map(|s| s.signal).collect();
    assert_eq!(sent, [Signal::TERM], "{report}");
    assert!(childguard::reaper::drain(
        Instant::now() + Duration::from_secs(30)
    ));
    assert_eq!(proc_state(ready.pid), None);
}
