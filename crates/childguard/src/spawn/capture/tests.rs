//! The handle's side of line assembly: what the tail and the sink get, whatever the reads.

use super::*;

fn shared(tail_bytes: usize, watch: Option<&str>) -> Shared {
    Shared {
        state: Mutex::new(State {
            tail: Tail::new(tail_bytes, usize::MAX),
            lines: [Assembler::default(), Assembler::default()],
            cut: [0, 0],
            open: [true, true],
            synced: 0,
            watch: watch.map(Watch::new),
        }),
        bells: Mutex::new(Vec::new()),
        sync_asked: AtomicU64::new(0),
    }
}

/// Short lines, an empty one, a line of 2.5 × the bound, one of exactly the bound, and a last
/// line without its `\n`.
fn output() -> Vec<u8> {
    let mut text = b"one\n\ntwo\n".to_vec();
    text.extend(std::iter::repeat_n(b'a', 5 * MAX_LINE_BYTES / 2));
    text.extend(b"\nthree\n");
    text.extend(std::iter::repeat_n(b'b', MAX_LINE_BYTES));
    text.extend(b"\nlast");
    text
}

#[test]
fn the_tail_is_the_output_as_written_whatever_the_reads_and_whoever_looks() {
    let text = output();
    for size in [1, 7, 4096, MAX_LINE_BYTES, MAX_LINE_BYTES + 3, 1 << 20] {
        for collect in [false, true] {
            let s = shared(1 << 20, None);
            let mut lines = Vec::new();
            for chunk in text.chunks(size) {
                lines.extend(s.feed(OutputStream::Stderr, chunk, collect));
            }
            let captured = Captured {
                shared: Arc::new(s),
                sink: None,
            };
            assert!(
                captured.tail_text().as_bytes() == text,
                "reads of {size}, collect {collect}: the tail differs"
            );
            lines.extend(captured.shared.last_line(OutputStream::Stderr, collect));
            let lengths: Vec<usize> = lines.iter().map(Vec::len).collect();
            if collect {
                let m = MAX_LINE_BYTES;
                assert_eq!(
                    lengths,
                    [3, 0, 3, m, m, m / 2, 5, m, 0, 4],
                    "reads of {size}"
                );
                assert_eq!(captured.shared.lock().cut, [0, 2]);
            } else {
                assert!(lines.is_empty());
                assert_eq!(captured.shared.lock().cut, [0, 0], "nobody looked");
            }
            let mut report = CloseReport::new(None, None);
            captured.report_into(&mut report);
            // At EOF the last line got its `\n`.
            assert_eq!(
                report.output_tail.map(String::into_bytes),
                Some([&text[..], b"\n"].concat())
            );
            assert_eq!(
                report.notes,
                if collect {
                    vec![
                        "stderr: 2 line(s) longer than 64 KiB (MAX_LINE_BYTES) passed on in pieces",
                    ]
                } else {
                    vec![]
                } as Vec<&str>
            );
        }
    }
}

#[test]
fn a_watch_sees_its_text_in_a_line_split_across_reads_with_no_tail() {
    let s = shared(0, Some("listening on port"));
    s.feed(OutputStream::Stdout, b"listening on ", false);
    assert!(!s.lock().watch.as_ref().unwrap().seen);
    s.feed(OutputStream::Stdout, b"port 5432\n", false);
    assert!(s.lock().watch.as_ref().unwrap().seen);
}

#[test]
fn the_lines_still_held_follow_the_tail_each_on_a_line_of_its_own() {
    let s = shared(1000, None);
    s.feed(OutputStream::Stdout, b"done\nout-partial", false);
    s.feed(OutputStream::Stderr, b"err-partial", false);
    let captured = Captured {
        shared: Arc::new(s),
        sink: None,
    };
    assert_eq!(captured.tail_text(), "done\nout-partial\nerr-partial");
}
