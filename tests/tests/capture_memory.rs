//! Issue 14, part 2: a server writing 50 MB of stderr with nobody reading — alone in its test
//! binary, so that the RSS it measures is this capture's and no other test's.

use std::process::Command;
use std::time::Duration;

use childguard::{Capture, ChildHandle};
use childguard_tests::vm_rss_kib;

/// 50 MB of stderr and nobody reading it: without the drain the server blocks at 64 KiB and
/// never exits; with it, it finishes, the tail is the last 64 KiB, and our memory stays flat.
#[test]
fn fifty_megabytes_of_stderr_never_block_and_keep_a_bounded_tail() {
    let rss_before = vm_rss_kib();
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "yes 0123456789 | head -c 49999994 >&2; echo last line >&2; exit 0",
    ]);
    let mut handle = ChildHandle::builder(cmd)
        .capture(Capture::stderr().tail_lines(usize::MAX))
        .ladder("TERM:1s,KILL:1s".parse().unwrap())
        .spawn()
        .expect("spawn");
    assert!(handle.stderr().is_none(), "a captured stream is ours");
    let status = handle.wait_timeout(Duration::from_secs(120)).unwrap();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "the writer blocked: {:?}",
        status
    );
    let report = handle.close().unwrap();
    let tail = report.output_tail.expect("a tail in the report");
    assert_eq!(tail.len(), childguard::DEFAULT_TAIL_BYTES);
    assert!(
        tail.ends_with("0123456789\nlast line\n"),
        "{:?}",
        &tail[tail.len() - 40..]
    );
    let grown = vm_rss_kib().saturating_sub(rss_before);
    assert!(
        grown < 20 * 1024,
        "RSS grew by {grown} KiB for a 64 KiB tail"
    );
}
