//! [`Tail`]: the last lines of a server's output, bounded in bytes and in lines.

use std::collections::VecDeque;

use super::OutputStream;

/// The last lines (each ending in `\n`, but for the piece of a long line still going on),
/// never more than `max_bytes` bytes nor `max_lines` lines. When a line pushes it over the
/// byte bound, the oldest bytes go, so the first line kept may be cut at its start (it is then
/// still the *end* of that line).
///
/// A line is kept as written, even one longer than
/// [`MAX_LINE_BYTES`](super::lines::MAX_LINE_BYTES) that came in pieces: a piece goes in
/// without a `\n` and the next piece or the line's end continues it. Only a line of the other
/// stream read in between breaks it: that line starts on a line of its own and the cut line
/// goes on after it.
///
/// The byte bound is kept on every push (it is the memory bound); the line bound is applied
/// when the tail is read ([`Tail::text`]), so the event loop never counts newlines in a
/// log nobody reads: on 100 MB of log that counting was a fifth of the thread's time.
#[derive(Debug)]
pub(crate) struct Tail {
    bytes: VecDeque<u8>,
    max_bytes: usize,
    max_lines: usize,
    /// The stream whose piece of a long line ends the kept text (no `\n` yet).
    open: Option<OutputStream>,
}

impl Tail {
    pub(crate) fn new(max_bytes: usize, max_lines: usize) -> Tail {
        Tail {
            bytes: VecDeque::with_capacity(max_bytes.min(64 << 10)),
            max_bytes,
            max_lines,
            open: None,
        }
    }

    fn keeps_nothing(&self) -> bool {
        self.max_bytes == 0 || self.max_lines == 0
    }

    /// Before `stream`'s bytes: a piece of the other stream's long line is ended here.
    fn begin(&mut self, stream: OutputStream) {
        if self.open.is_some_and(|open| open != stream) {
            self.bytes.push_back(b'\n');
        }
        self.open = None;
    }

    /// Appends a piece of a long line of `stream` (no `\n`: the line goes on), then drops the
    /// oldest bytes beyond the bound.
    pub(crate) fn push_piece(&mut self, stream: OutputStream, piece: &[u8]) {
        if self.keeps_nothing() {
            return;
        }
        self.begin(stream);
        let keep = piece.len().min(self.max_bytes);
        self.bytes.extend(&piece[piece.len() - keep..]);
        self.open = Some(stream);
        self.trim();
    }

    /// Appends `line` (without its `\n`) of `stream` and a `\n`, then drops the oldest bytes
    /// beyond the bound.
    pub(crate) fn push_line(&mut self, stream: OutputStream, line: &[u8]) {
        if self.keeps_nothing() {
            return;
        }
        self.begin(stream);
        // Only the last `max_bytes` of a long line can stay: skip copying the rest.
        let keep = line.len().min(self.max_bytes - 1);
        self.bytes.extend(&line[line.len() - keep..]);
        self.bytes.push_back(b'\n');
        self.trim();
    }

    /// Appends `lines`, complete lines each ending in `\n` (the whole of `lines` ends in one),
    /// as [`push_line`](Tail::push_line) would one by one, but touching only the part that can
    /// stay: the drain's fast path for a chunk of log nobody watches line by line.
    pub(crate) fn push_lines(&mut self, stream: OutputStream, lines: &[u8]) {
        debug_assert_eq!(lines.last(), Some(&b'\n'));
        if self.keeps_nothing() {
            return;
        }
        self.begin(stream);
        let kept = &lines[lines.len() - lines.len().min(self.max_bytes)..];
        if kept.len() == self.max_bytes {
            // The chunk alone fills the tail: nothing older stays.
            self.bytes.clear();
        }
        self.bytes.extend(kept);
        self.trim();
    }

    /// Drops the oldest bytes beyond `max_bytes`.
    fn trim(&mut self) {
        if self.bytes.len() > self.max_bytes {
            let excess = self.bytes.len() - self.max_bytes;
            self.bytes.drain(..excess);
        }
    }

    /// The stream whose long line the kept text ends in the middle of, if any.
    pub(crate) fn open(&self) -> Option<OutputStream> {
        self.open
    }

    /// The kept bytes — their last `max_lines` lines, a piece still going on counted as one.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let (a, b) = self.bytes.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        // The (max_lines + 1)-th newline from the end ends the last line that is dropped.
        let mut newlines = usize::from(all.last().is_some_and(|&byte| byte != b'\n'));
        let start = all.iter().rposition(|&byte| {
            newlines += usize::from(byte == b'\n');
            newlines > self.max_lines
        });
        match start {
            Some(end) => all.split_off(end + 1),
            None => all,
        }
    }

    /// The kept text ([`Tail::bytes`]), invalid UTF-8 replaced.
    #[cfg(test)]
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.text().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushing_lines_at_once_keeps_what_pushing_them_one_by_one_keeps() {
        let text: Vec<u8> = (0..500)
            .flat_map(|i| format!("line number {i}\n").into_bytes())
            .collect();
        for (bytes, lines) in [(1000, 1000), (64, 1000), (1000, 7), (30, 2), (1, 1)] {
            let mut one = Tail::new(bytes, lines);
            let mut bulk = Tail::new(bytes, lines);
            for line in text.split_inclusive(|&b| b == b'\n') {
                one.push_line(OutputStream::Stdout, &line[..line.len() - 1]);
            }
            for chunk in text
                .split_inclusive(|&b| b == b'\n')
                .collect::<Vec<_>>()
                .chunks(37)
            {
                bulk.push_lines(OutputStream::Stdout, &chunk.concat());
            }
            assert_eq!(
                one.text(),
                bulk.text(),
                "bounds {bytes} bytes, {lines} lines"
            );
        }
    }

    #[test]
    fn keeps_the_last_lines_within_both_bounds() {
        let mut t = Tail::new(1000, 3);
        for i in 0..10 {
            t.push_line(OutputStream::Stdout, format!("line {i}").as_bytes());
        }
        assert_eq!(t.text(), "line 7\nline 8\nline 9\n");
        let mut t = Tail::new(16, 100);
        for i in 0..10 {
            t.push_line(OutputStream::Stdout, format!("line {i}").as_bytes());
        }
        // The last 16 bytes of everything pushed: the oldest line kept is cut at its start.
        assert_eq!(t.text(), "7\nline 8\nline 9\n");
        assert_eq!(t.len(), 16);
    }

    #[test]
    fn a_line_longer_than_the_bound_keeps_its_end() {
        let mut t = Tail::new(8, 10);
        t.push_line(OutputStream::Stdout, b"abcdefghijklmnop");
        assert_eq!(t.text(), "jklmnop\n");
        assert_eq!(t.len(), 8);
        t.push_line(OutputStream::Stdout, b"xy");
        assert_eq!(t.text(), "mnop\nxy\n");
    }

    #[test]
    fn a_line_in_pieces_is_kept_whole_unless_the_other_stream_comes_in_between() {
        use OutputStream::{Stderr, Stdout};
        let mut t = Tail::new(1000, 2);
        t.push_line(Stdout, b"before");
        t.push_piece(Stdout, b"abc");
        assert_eq!(t.text(), "before\nabc", "a piece going on counts as a line");
        t.push_piece(Stdout, b"def");
        t.push_line(Stdout, b"gh");
        assert_eq!(t.text(), "before\nabcdefgh\n");
        t.push_piece(Stdout, b"one");
        t.push_line(Stderr, b"other");
        t.push_line(Stdout, b"two");
        assert_eq!(t.text(), "other\ntwo\n");
        let mut t = Tail::new(1000, 10);
        t.push_piece(Stdout, b"one");
        t.push_lines(Stderr, b"x\ny\n");
        assert_eq!(t.text(), "one\nx\ny\n");
        let mut t = Tail::new(4, 10);
        t.push_piece(Stdout, b"abcdefgh");
        assert_eq!(t.text(), "efgh");
    }

    #[test]
    fn zero_bounds_keep_nothing() {
        let mut t = Tail::new(0, 10);
        t.push_line(OutputStream::Stdout, b"x");
        assert_eq!(t.text(), "");
        let mut t = Tail::new(10, 0);
        t.push_line(OutputStream::Stdout, b"x");
        assert_eq!(t.text(), "");
    }
}
