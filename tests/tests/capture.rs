//! Issue 14, part 2: output capture — drained by the one event loop thread, a bounded tail in the
//! handle, the errors and the report, lines passed on.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use childguard::{Capture, ChildHandle, ErrorKind, OutputStream, Signal, SocketMode};
use childguard_tests::*;

#[test]
fn the_tail_keeps_the_last_lines_and_the_report_has_the_last_words() {
    // `up` goes to stdout after the lines: the order of two pipes' reads is not the order of
    // their writes (epoll may report the pipe written last first), so a line on stderr could
    // be read before the last ones on stdout. `goodbye` is on stderr: it is written only after
    // the TERM, which is sent once the tail shows everything before it was read.
    let script = "trap 'echo goodbye >&2; exit 0' TERM; i=0; \
                  while [ $i -lt 50 ]; do echo \"line $i\"; i=$((i+1)); done; \
                  echo up; while :; do sleep 0.05; done";
    let handle = ChildHandle::builder(sh(script))
        .capture(Capture::both().tail_lines(3))
        .ladder(ladder("TERM:10s,KILL:1s"))
        .spawn()
        .expect("spawn");
    assert!(
        eventually(Duration::from_secs(20), || handle
            .output_tail()
            .is_some_and(|t| t.ends_with("up\n"))),
        "{:?}",
        handle.output_tail()
    );
    assert_eq!(handle.output_tail().unwrap(), "line 48\nline 49\nup\n");
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    assert_eq!(
        report.output_tail.as_deref(),
        Some("line 49\nup\ngoodbye\n")
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["output_tail"], "line 49\nup\ngoodbye\n");
}

#[test]
fn lines_are_passed_on_in_order_with_their_stream() {
    let seen: Arc<Mutex<Vec<(OutputStream, String)>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let cmd = sh("echo one; echo two >&2; printf 'no newline'");
    let handle = ChildHandle::builder(cmd)
        .capture(Capture::both().on_line(move |stream, line| {
            sink.lock()
                .unwrap()
                .push((stream, String::from_utf8_lossy(line).into_owned()));
        }))
        .spawn()
        .expect("spawn");
    let report = exited_then_closed(handle);
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    // An unterminated last line is in the report's tail at once (where, among the other
    // stream's lines, depends on which pipe was read first)…
    let tail = report.output_tail.clone().unwrap();
    assert!(tail.contains("no newline"), "{tail:?}");
    // …and a line for the callback at EOF, which a fork elsewhere in this process (another
    // test's spawn, before its exec closes the inherited copy) may delay a little.
    assert!(eventually(Duration::from_secs(20), || seen
        .lock()
        .unwrap()
        .len()
        == 3));
    let mut lines = seen.lock().unwrap().clone();
    // The two streams are separate pipes: their relative order is the reading order, not the
    // writing order. Within each stream order is kept.
    lines.sort_by_key(|(s, _)| *s == OutputStream::Stderr);
    assert_eq!(
        lines,
        [
            (OutputStream::Stdout, "one".to_owned()),
            (OutputStream::Stdout, "no newline".to_owned()),
            (OutputStream::Stderr, "two".to_owned()),
        ]
    );
}

/// A server that dies during start-up: the error carries what it said.
#[test]
fn a_start_up_error_carries_the_output_tail() {
    let cmd = sh("echo 'FATAL: data directory is missing' >&2; exit 1");
    let err = ChildHandle::builder(cmd)
        .socket(SocketMode::Activation { name: None })
        .capture(Capture::stderr())
        .spawn()
        .expect_err("the server exits before accepting");
    assert_eq!(err.kind(), ErrorKind::Connect);
    assert_eq!(
        err.output_tail(),
        Some("FATAL: data directory is missing\n")
    );
    let text = err.to_string();
    assert!(
        text.contains("last output:\n  FATAL: data directory is missing"),
        "{text}"
    );
}

#[test]
fn capturing_stdout_that_is_the_socket_is_a_config_error() {
    let err = ChildHandle::builder(sh("true"))
        .socket(SocketMode::Stdio)
        .capture(Capture::both())
        .spawn()
        .expect_err("stdout is the socket");
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("Capture::stderr"), "{err}");
}

/// Many handles, one thread (the event loop): every server's output is drained, none waits on
/// another's.
#[test]
fn one_loop_thread_serves_many_handles() {
    let began = Instant::now();
    let handles: Vec<ChildHandle> = (0..8)
        .map(|i| {
            let script = format!("yes {i} | head -c 2000000 >&2; echo done {i} >&2");
            ChildHandle::builder(sh(&script))
                .capture(Capture::stderr())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let threads = |name: &str| {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim() == name)
            .count()
    };
    assert_eq!(
        threads("childguard-loop"),
        1,
        "one event loop thread for all handles"
    );
    assert_eq!(
        threads("childguard-capt"),
        0,
        "no capture thread of its own"
    );
    for (i, mut handle) in handles.into_iter().enumerate() {
        let status = handle.wait_timeout(Duration::from_secs(120)).unwrap();
        assert!(
            status.is_some(),
            "writer {i} blocked after {:?}",
            began.elapsed()
        );
        let report = handle.close().unwrap();
        let tail = report.output_tail.unwrap();
        assert!(tail.ends_with(&format!("{i}\ndone {i}\n")), "{i}: {tail:?}");
    }
}
