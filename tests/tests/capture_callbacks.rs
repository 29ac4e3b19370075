//! Issue 21, item 2: callbacks off the event loop's path. `on_line` and the passthrough run on
//! one callback thread; the loop only reads pipes. A slow or blocking callback never stops the
//! reading of any pipe, a callback may close or spawn handles (its own among them), and the
//! lines a callback falls behind on are dropped and counted in the close report.

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use childguard::{Capture, ChildHandle, Ready, Signal};
use childguard_tests::*;

/// The last `a N` line number in a tail, if any.
fn last_number(tail: &str) -> Option<u64> {
    tail.lines()
        .rev()
        .find_map(|l| l.strip_prefix("a ")?.parse().ok())
}

/// Server A's `on_line` blocks (until the test lets it go) while A writes without pause. B's
/// readiness line is still seen, B closes with its last words, and A itself keeps being read
/// (it never blocks on a full pipe). A's lines that found its queue full are counted in its
/// report. Before the fix the callback ran on the thread that read every pipe: B's spawn
/// waited out its readiness timeout.
#[test]
fn a_blocked_on_line_of_one_server_delays_neither_the_reading_nor_the_readiness_of_another() {
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let entered_tx = Mutex::new(entered_tx);
    let release_rx = Mutex::new(release_rx);
    let a = ChildHandle::builder(sh("i=0; while :; do echo \"a $i\"; i=$((i+1)); done"))
        .capture(Capture::stdout().on_line(move |_, _| {
            let _ = entered_tx.lock().unwrap().send(());
            // Blocks the callback thread until the test says so (or the test is gone).
            let _ = release_rx.lock().unwrap().recv();
        }))
        .ladder(ladder("KILL:10s"))
        .spawn()
        .expect("spawn A");
    entered_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("A's on_line was never called");
    // A goes on being read while its callback is blocked: far more lines than its queue holds.
    let past = childguard::CALLBACK_QUEUE_LINES as u64 * 3;
    assert!(
        eventually(Duration::from_secs(60), || a
            .output_tail()
            .and_then(|t| last_number(&t))
            .is_some_and(|n| n > past)),
        "A's pipe is no longer read while its callback blocks: tail ends {:?}",
        a.output_tail().map(|t| t.lines().last().map(str::to_owned))
    );
    let began = Instant::now();
    let b = ChildHandle::builder(sh("trap 'echo goodbye; exit 0' TERM; echo ready; \
                                     while :; do sleep 0.05; done"))
    .capture(Capture::stdout().on_line(|_, _| {}))
    .ready(Ready::output("ready"))
    .ready_timeout(Duration::from_secs(10))
    .ladder(ladder("TERM:10s,KILL:1s"))
    .spawn()
    .unwrap_or_else(|e| panic!("B, while A's callback blocks: {e}"));
    let report = b.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    assert!(
        report
            .output_tail
            .as_deref()
            .is_some_and(|t| t.ends_with("ready\ngoodbye\n")),
        "{report}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "B took {:?}",
        began.elapsed()
    );
    release_tx.send(()).unwrap();
    drop(release_tx); // every later call returns at once
    let report = a.close().unwrap();
    let dropped = dropped_lines(&report);
    assert!(
        dropped >= past - childguard::CALLBACK_QUEUE_LINES as u64,
        "{report}"
    );
}

/// An `on_line` that closes its own handle: the close returns with the whole report — the
/// tail ends with what the server wrote as it went down, read by the event loop while the
/// callback waited in the close. Before the fix the close waited on the capture thread from
/// the capture thread: its sync timed out after 1 s and the last words were missing.
#[test]
fn an_on_line_that_closes_its_own_handle_gets_its_last_words() {
    let (handle_tx, handle_rx) = mpsc::channel::<ChildHandle>();
    let (report_tx, report_rx) = mpsc::channel();
    let handle_rx = Mutex::new(handle_rx);
    let report_tx = Mutex::new(report_tx);
    let handle = ChildHandle::builder(sh("trap 'echo goodbye; exit 0' TERM; echo bye; \
                                          while :; do sleep 0.05; done"))
    .capture(Capture::stdout().on_line(move |_, line| {
        if line != b"bye" {
            return;
        }
        let own = handle_rx.lock().unwrap().recv().expect("the handle");
        let began = Instant::now();
        let report = own.close();
        let _ = report_tx.lock().unwrap().send((report, began.elapsed()));
    }))
    .ladder(ladder("TERM:10s,KILL:1s"))
    .spawn()
    .expect("spawn");
    handle_tx.send(handle).unwrap();
    let (report, took) = report_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("no report from the callback");
    let report = report.expect("close from on_line");
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    assert_eq!(
        report.output_tail.as_deref(),
        Some("bye\ngoodbye\n"),
        "took {took:?}: {report}"
    );
}

/// An `on_line` that spawns a handle awaiting `Ready::output`: the new server's line is read
/// (by the loop, not the callback thread) and the spawn returns ready. Before the fix the
/// readiness wait ran on the capture thread, which alone could read the line: the spawn
/// waited out its readiness timeout and failed.
#[test]
fn an_on_line_that_spawns_a_handle_with_ready_output_sees_it_ready() {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let a = ChildHandle::builder(sh("echo go; exec sleep 600"))
        .capture(Capture::stdout().on_line(move |_, line| {
            if line != b"go" {
                return;
            }
            let began = Instant::now();
            let b = ChildHandle::builder(sh("echo ready; exec sleep 600"))
                .capture(Capture::stdout())
                .ready(Ready::output("ready"))
                .ready_timeout(Duration::from_secs(10))
                .ladder(ladder("KILL:10s"))
                .spawn();
            let _ = tx.lock().unwrap().send((b, began.elapsed()));
        }))
        .ladder(ladder("KILL:10s"))
        .spawn()
        .expect("spawn A");
    let (b, took) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("A's on_line never spawned B");
    let b = b.unwrap_or_else(|e| panic!("B spawned from on_line, after {took:?}: {e}"));
    let report = b.close().unwrap();
    assert!(report.output_tail.unwrap().contains("ready"));
    let report = a.close().unwrap();
    assert!(report.status.is_some(), "{report}");
}

/// Passthrough into a stderr nobody reads (`childguard with … 2>&1 | less`, paused): in
/// `cg-passthrough`, whose stderr is a pipe this test holds and never reads, server A's
/// passthrough blocks the callback thread; A is still read to its end, server B still gets
/// ready (`Ready::output`) and closes, and A's report counts the lines not written. Before
/// the fix the passthrough write blocked the thread that read every pipe.
#[test]
fn a_passthrough_into_a_full_stderr_stops_no_capture_and_no_close() {
    use std::io::Read;
    let mut driver = std::process::Command::new(bin("cg-passthrough"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cg-passthrough");
    // Held, never read: the driver's stderr fills at 64 KiB.
    let _stderr = driver.stderr.take();
    let mut out = String::new();
    // The driver ends itself within 90 s (its watchdog).
    driver
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let _ = driver.kill();
    let _ = driver.wait();
    let line = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} line in:\n{out}"))
            .to_owned()
    };
    assert_eq!(line("A_DRAINED "), "ok", "{out}");
    assert_eq!(line("B_READY "), "ok", "{out}");
    assert_eq!(line("B_TAIL "), "ready goodbye", "{out}");
    let dropped: u64 = line("A_DROPPED ").parse().unwrap();
    assert!(dropped > 0, "{out}");
}
