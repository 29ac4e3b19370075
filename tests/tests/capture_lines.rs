//! Issue 22, item 5: lines are assembled whole up to `MAX_LINE_BYTES`, whatever the tail's
//! size — a line that reaches us in two reads is one line for `on_line`, `Ready::output` and
//! the tail, with no tail (`tail_bytes(0)`) or a small one.
//!
//! Each child writes its line in parts, each only once the part before has been read
//! (`childguard_tests::paced`): the split across reads happens every run, not by chance.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use childguard::{Capture, ChildHandle, CloseReport, Ready, MAX_LINE_BYTES};
use childguard_tests::paced::Paced;
use childguard_tests::*;

type Lines = Arc<Mutex<Vec<Vec<u8>>>>;

/// A capture of stdout keeping `tail` bytes, its lines collected.
fn collecting(tail: usize) -> (Capture, Lines) {
    let lines: Lines = Arc::default();
    let sink = Arc::clone(&lines);
    let capture = Capture::stdout()
        .tail_bytes(tail)
        .on_line(move |_, line| sink.lock().unwrap().push(line.to_vec()));
    (capture, lines)
}

fn texts(lines: &Lines) -> Vec<String> {
    let lines = lines.lock().unwrap();
    lines
        .iter()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect()
}

/// `listening on `, read; then `port 5432\n`; then the child stays alive. Returns what
/// `on_line` got (once it got a line) and the close report.
fn two_reads(name: &str, tail: usize, ready: Option<&str>) -> (Vec<String>, CloseReport) {
    let (paced, cmd) = Paced::new(
        name,
        &["printf 'listening on '", "printf 'port 5432\\n'"],
        "exec sleep 600",
    );
    let pacing = paced.pace();
    let (capture, lines) = collecting(tail);
    let mut builder = ChildHandle::builder(cmd)
        .capture(capture)
        .ladder(ladder("KILL:10s"));
    if let Some(text) = ready {
        builder = builder
            .ready(Ready::output(text))
            .ready_timeout(Duration::from_secs(30));
    }
    let handle = builder.spawn().expect("spawn");
    pacing.join().expect("the handshake");
    assert!(
        eventually(Duration::from_secs(30), || texts(&lines)
            .iter()
            .any(|l| l.contains("5432"))),
        "no line with the port: {:?}",
        texts(&lines)
    );
    let report = handle.close().unwrap();
    (texts(&lines), report)
}

#[test]
fn with_no_tail_a_line_in_two_reads_is_one_line() {
    let (lines, report) = two_reads("no-tail", 0, None);
    assert_eq!(lines, ["listening on port 5432"], "{report}");
    assert_eq!(report.output_tail.as_deref(), Some(""), "no tail kept");
}

#[test]
fn with_no_tail_ready_output_sees_a_line_in_two_reads() {
    let (lines, _) = two_reads("no-tail-ready", 0, Some("listening on port"));
    assert_eq!(lines, ["listening on port 5432"]);
}

#[test]
fn with_a_small_tail_a_line_in_two_reads_is_one_line() {
    let (lines, report) = two_reads("small-tail", 8, None);
    assert_eq!(lines, ["listening on port 5432"], "{report}");
    // The tail: the line's last 8 bytes, its `\n` included.
    assert_eq!(report.output_tail.as_deref(), Some("rt 5432\n"));
}

#[test]
fn with_a_small_tail_ready_output_sees_a_line_in_two_reads() {
    let (lines, _) = two_reads("small-tail-ready", 8, Some("listening on port"));
    assert_eq!(lines, ["listening on port 5432"]);
}

#[test]
fn a_last_line_without_a_newline_is_passed_on_whole_at_eof() {
    let (paced, cmd) = Paced::new("eof", &["printf 'last '", "printf 'words'"], "exit 0");
    let pacing = paced.pace();
    let (capture, lines) = collecting(0);
    let handle = ChildHandle::builder(cmd)
        .capture(capture)
        .spawn()
        .expect("spawn");
    pacing.join().expect("the handshake");
    let report = exited_then_closed(handle);
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    // EOF, and so the last line, may come a little after the close: a fork elsewhere in this
    // process (another test's spawn, until its exec) may hold a copy of the write end.
    assert!(
        eventually(Duration::from_secs(30), || texts(&lines)
            .iter()
            .any(|l| l.contains("words"))),
        "{:?}",
        texts(&lines)
    );
    assert_eq!(texts(&lines), ["last words"]);
}

/// A line of 3 × `MAX_LINE_BYTES` + 100 bytes: `on_line` gets three pieces of exactly the
/// bound, then the rest; the tail keeps the line as written (no `\n` where it was cut); the
/// report's notes count it.
#[test]
fn a_line_longer_than_the_bound_comes_in_pieces_of_the_bound_and_is_counted() {
    let rest = 3 * MAX_LINE_BYTES + 100 - "start:".len();
    let big = format!("head -c {rest} /dev/zero | tr '\\0' x; printf '\\nafter\\n'");
    let (paced, cmd) = Paced::new("long", &["printf 'start:'", &big], "exec sleep 600");
    let pacing = paced.pace();
    let (capture, lines) = collecting(childguard::DEFAULT_TAIL_BYTES);
    let handle = ChildHandle::builder(cmd)
        .capture(capture.tail_lines(usize::MAX))
        .ladder(ladder("KILL:10s"))
        .spawn()
        .expect("spawn");
    pacing.join().expect("the handshake");
    assert!(
        eventually(Duration::from_secs(30), || texts(&lines)
            .last()
            .is_some_and(|l| l == "after")),
        "no `after` line"
    );
    let report = handle.close().unwrap();
    let got = lines.lock().unwrap().clone();
    let lengths: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(
        lengths,
        [MAX_LINE_BYTES, MAX_LINE_BYTES, MAX_LINE_BYTES, 100, 5],
        "the pieces' lengths"
    );
    assert!(got[0].starts_with(b"start:xxx"));
    assert_eq!(got[4], b"after");
    let tail = report.output_tail.clone().unwrap();
    assert_eq!(tail.len(), childguard::DEFAULT_TAIL_BYTES);
    assert_eq!(
        tail.matches('\n').count(),
        2,
        "the cut line is whole in the tail: {:?}",
        &tail[tail.len() - 40..]
    );
    assert!(
        tail.ends_with("xxx\nafter\n"),
        "{:?}",
        &tail[tail.len() - 40..]
    );
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.starts_with("stdout: 1 line(s) longer than 64 KiB")),
        "{:?}",
        report.notes
    );
}
