//! Issue 14, part 2: a panicking line callback. In a test binary of its own: the panic hook
//! (a backtrace, with `RUST_BACKTRACE`) runs on the capture thread that every handle of the
//! process shares, and under load it kept that thread from reading for seconds — longer than
//! a close's 1 s wait for the last words — so the tests of `capture.rs` running beside it lost
//! their output (`a_start_up_error_carries_the_output_tail` failed 3 of 4 runs under two CPU
//! hogs). A slow callback delaying every handle's capture is the documented cost of the shared
//! thread (`Capture::on_line`).

use std::time::Duration;

use childguard::{Capture, ChildHandle};
use childguard_tests::*;

/// A panicking callback is caught: the shared thread lives on and serves the next handle.
#[test]
fn a_panicking_line_callback_does_not_stop_the_capture() {
    let handle = ChildHandle::builder(sh("echo a; echo b; echo c"))
        .capture(Capture::stdout().on_line(|_, _| panic!("callback panics on purpose")))
        .spawn()
        .expect("spawn");
    // The panic hook (a backtrace, with RUST_BACKTRACE) runs on the capture thread: give it
    // time rather than the close's short wait for the last words.
    assert!(
        eventually(Duration::from_secs(30), || handle
            .output_tail()
            .is_some_and(|t| t == "a\nb\nc\n")),
        "{:?}",
        handle.output_tail()
    );
    let report = exited_then_closed(handle);
    assert_eq!(report.output_tail.as_deref(), Some("a\nb\nc\n"));
    let handle = ChildHandle::builder(sh("echo after"))
        .capture(Capture::stdout())
        .spawn()
        .expect("spawn");
    // The hook may still be printing its backtrace (seconds on a loaded machine, longer than
    // the close's 1 s wait for the last words): the thread serves this handle once it is done.
    assert!(
        eventually(Duration::from_secs(60), || handle
            .output_tail()
            .is_some_and(|t| t == "after\n")),
        "the capture thread never served the next handle: {:?}",
        handle.output_tail()
    );
    let report = exited_then_closed(handle);
    assert_eq!(report.output_tail.as_deref(), Some("after\n"));
}
