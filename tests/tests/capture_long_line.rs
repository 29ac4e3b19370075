//! Issue 22, item 5: a 50 MB line with no tail kept — alone in its test binary, so that the RSS
//! it measures is this capture's and no other test's.
//!
//! Lines are assembled up to `MAX_LINE_BYTES` whatever the tail's size; past it they are passed
//! on in pieces of exactly the bound, so what is held for a line stays within it however long
//! the line.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use childguard::{Capture, ChildHandle, MAX_LINE_BYTES};
use childguard_tests::paced::Paced;
use childguard_tests::*;

/// `start:` (read on its own), then 50 MB more of the same line and its `\n`: `on_line` gets
/// pieces of exactly `MAX_LINE_BYTES`, then the rest; our memory stays flat.
#[test]
fn a_fifty_megabyte_line_comes_in_pieces_and_memory_stays_bounded() {
    const PIECES: usize = 763; // 50 MB
    let rest = PIECES * MAX_LINE_BYTES + 100 - "start:".len();
    let big = format!("head -c {rest} /dev/zero | tr '\\0' x; printf '\\nafter\\n'");
    let rss_before = vm_rss_kib();
    let (paced, cmd) = Paced::new("fifty", &["printf 'start:'", &big], "exit 0");
    let pacing = paced.pace();
    // Lengths only: the test must not hold the line either.
    let lengths: Arc<Mutex<Vec<usize>>> = Arc::default();
    let sink = Arc::clone(&lengths);
    let handle = ChildHandle::builder(cmd)
        .capture(
            Capture::stdout()
                .tail_bytes(0)
                .on_line(move |_, line| sink.lock().unwrap().push(line.len())),
        )
        .spawn()
        .expect("spawn");
    pacing.join().expect("the handshake");
    let report = exited_then_closed(handle);
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    // The callback thread may fall behind the reads (1 MiB a read, the queue holds 1 MiB):
    // what it dropped is counted in the report, final once the close synced the pipe.
    let dropped = dropped_lines(&report);
    let calls = PIECES + 2 - dropped as usize;
    assert!(
        eventually(Duration::from_secs(60), || lengths.lock().unwrap().len()
            == calls),
        "{} calls, {calls} expected ({dropped} dropped)",
        lengths.lock().unwrap().len()
    );
    let grown = vm_rss_kib().saturating_sub(rss_before);
    assert!(
        grown < 20 * 1024,
        "RSS grew by {grown} KiB for a 50 MB line, a 64 KiB line bound and no tail"
    );
    // Pieces of exactly the bound, then the line's rest (100 bytes) and `after`, in order,
    // whichever were dropped.
    let got = lengths.lock().unwrap().clone();
    let mut want = vec![MAX_LINE_BYTES; PIECES];
    want.extend([100, 5]);
    let mut left = want.iter();
    assert!(
        got.iter().all(|n| left.any(|w| w == n)),
        "{} calls, first {:?}, last {:?}",
        got.len(),
        &got[..got.len().min(5)],
        &got[got.len().saturating_sub(3)..]
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
