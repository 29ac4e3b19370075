//! `Ready::output` watches the child's output from its first byte. In a process of its own:
//! the test arms a failpoint that delays every readiness wait of the process.

use std::time::{Duration, Instant};

use childguard::{failpoint, Capture, ChildHandle, Ready};
use childguard_tests::*;

/// The spawning thread is slow to start its wait (the failpoint: 500 ms, as a preempted
/// thread on a loaded machine), and by then the server has written its ready line and 50
/// more, which a 3-line tail no longer holds. The line is still seen: the watch was set when
/// the capture started, before the capture thread read a byte. Seen failing with the watch
/// set when the wait starts (as before): `not ready after 20s: awaited an output line
/// containing "up"`.
#[test]
fn a_ready_line_written_before_the_wait_starts_is_seen() {
    failpoint::set_ready_wait_delay(Some(Duration::from_millis(500)));
    let began = Instant::now();
    let handle = ChildHandle::builder(sh(
        "echo up >&2; i=0; while [ $i -lt 50 ]; do echo \"after $i\" >&2; i=$((i+1)); done; \
         exec sleep 600",
    ))
    .capture(Capture::stderr().tail_lines(3))
    .ready(Ready::output("up"))
    .ready_timeout(Duration::from_secs(20))
    .ladder("TERM:5s,KILL:5s".parse().unwrap())
    .spawn();
    failpoint::set_ready_wait_delay(None);
    let handle = handle.unwrap_or_else(|e| panic!("after {:?}: {e}", began.elapsed()));
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "ready only after {:?}",
        began.elapsed()
    );
    let report = handle.close().unwrap();
    assert!(report.reaped.is_some(), "{report}");
}
