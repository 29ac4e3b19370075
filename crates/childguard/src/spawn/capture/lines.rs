//! Line assembly: one captured stream's bytes, as read, cut into lines — bounded by
//! [`MAX_LINE_BYTES`], never by the tail's size.
//!
//! A pipe read returns whatever the server has written so far, so a line often arrives in
//! several reads (`listening on ` now, `port 5432\n` later). The bytes of a line not yet ended
//! are held here until its `\n` comes; the tail, [`Capture::on_line`](super::Capture::on_line),
//! the passthrough and [`Ready::output`](crate::Ready::output)'s watch see the line only then,
//! whole. Bug avoided: the bound on what is held used to be the tail's size, so
//! `tail_bytes(0)` (or a small tail) passed every read on as a line of its own and a ready
//! line split across two reads was never seen.
//!
//! A line longer than [`MAX_LINE_BYTES`] is cut: each [`MAX_LINE_BYTES`] of it is passed on
//! as a [`End::Piece`] as soon as it is read, the rest ends with an [`End::Line`] (possibly
//! empty), so what is held never exceeds the bound however long the line.

/// The longest line passed on whole: 64 KiB (without its `\n`). A longer line is passed on in
/// pieces of exactly this many bytes, then its rest (see [`Capture::on_line`](super::Capture::on_line)).
/// Also the most bytes held per captured stream for a line not yet ended.
pub const MAX_LINE_BYTES: usize = 64 << 10;

use super::{OutputStream, Tail};

/// What ends a piece of output passed on by [`Assembler::split`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// Its `\n` (or the stream's EOF): the line, or the last piece of a cut one, is complete.
    Line,
    /// The bound: exactly [`MAX_LINE_BYTES`] bytes of a longer line, which goes on.
    /// `first`: the line's first piece.
    Piece { first: bool },
}

/// One stream's line being assembled.
#[derive(Debug, Default)]
pub(super) struct Assembler {
    /// The line's bytes read and not yet passed on: fewer than [`MAX_LINE_BYTES`], and its
    /// allocation never more than that.
    partial: Vec<u8>,
    /// A piece of the current line was passed on: the line goes on.
    continued: bool,
}

impl Assembler {
    /// Passes on every line (and piece) `chunk` completes, holding what follows its last `\n`.
    pub(super) fn split(&mut self, chunk: &[u8], emit: &mut impl FnMut(&[u8], End)) {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.take(&rest[..end], true, emit);
            rest = &rest[end + 1..];
        }
        self.take(rest, false, emit);
    }

    /// EOF: a line still held (or the end of a cut one) is complete.
    pub(super) fn finish(&mut self, emit: &mut impl FnMut(&[u8], End)) {
        if !self.partial.is_empty() || self.continued {
            emit(&self.partial, End::Line);
            self.partial.clear();
            self.continued = false;
        }
    }

    /// The bytes held: the start of a line whose `\n` has not come yet.
    pub(super) fn held(&self) -> &[u8] {
        &self.partial
    }

    /// `bytes` continue the current line; `ends`: its `\n` follows them.
    fn take(&mut self, mut bytes: &[u8], ends: bool, emit: &mut impl FnMut(&[u8], End)) {
        if !self.partial.is_empty() {
            let n = (MAX_LINE_BYTES - self.partial.len()).min(bytes.len());
            self.hold(&bytes[..n]);
            bytes = &bytes[n..];
            if self.partial.len() < MAX_LINE_BYTES {
                // All of `bytes` is held: the line is complete only if they end it.
                if ends {
                    emit(&self.partial, End::Line);
                    self.partial.clear();
                    self.continued = false;
                }
                return;
            }
            emit(
                &self.partial,
                End::Piece {
                    first: !self.continued,
                },
            );
            self.partial.clear();
            self.continued = true;
        }
        // Nothing held: whole pieces and a complete line go on straight from the read buffer.
        while bytes.len() >= MAX_LINE_BYTES {
            emit(
                &bytes[..MAX_LINE_BYTES],
                End::Piece {
                    first: !self.continued,
                },
            );
            self.continued = true;
            bytes = &bytes[MAX_LINE_BYTES..];
        }
        if ends {
            emit(bytes, End::Line);
            self.continued = false;
        } else {
            self.hold(bytes);
        }
    }

    /// Appends to what is held, growing the allocation by doubling but never past the bound.
    fn hold(&mut self, bytes: &[u8]) {
        let need = self.partial.len() + bytes.len();
        debug_assert!(need <= MAX_LINE_BYTES);
        if need > self.partial.capacity() {
            let cap = (self.partial.capacity() * 2)
                .max(256)
                .clamp(need, MAX_LINE_BYTES);
            self.partial.reserve_exact(cap - self.partial.len());
        }
        self.partial.extend_from_slice(bytes);
    }
}

/// What [`Ready::output`](crate::Ready::output) watches for: a line containing `pattern`,
/// looked for across the pieces of a cut line too.
#[derive(Debug)]
pub(super) struct Watch {
    pattern: Vec<u8>,
    /// Seen once: stays seen.
    pub(super) seen: bool,
    /// Per stream, within a cut line: the last `pattern.len() - 1` bytes passed on, so a
    /// pattern across a cut is found.
    carry: [Vec<u8>; 2],
}

impl Watch {
    pub(super) fn new(pattern: &str) -> Watch {
        Watch {
            pattern: pattern.as_bytes().to_vec(),
            seen: false,
            carry: [Vec::new(), Vec::new()],
        }
    }

    /// Looks at `bytes`, passed on for stream `index` and ended by `end`. Returns whether
    /// this made it seen.
    pub(super) fn look(&mut self, index: usize, bytes: &[u8], end: End) -> bool {
        if self.seen {
            return false;
        }
        let keep = self.pattern.len().saturating_sub(1);
        let carry = &mut self.carry[index];
        let mut found = contains(bytes, &self.pattern);
        if !found && !carry.is_empty() {
            let mut joined = carry.clone();
            joined.extend_from_slice(&bytes[..bytes.len().min(keep)]);
            found = contains(&joined, &self.pattern);
        }
        match end {
            End::Line => carry.clear(),
            End::Piece { .. } => {
                if bytes.len() >= keep {
                    carry.clear();
                    carry.extend_from_slice(&bytes[bytes.len() - keep..]);
                } else {
                    carry.extend_from_slice(bytes);
                    let excess = carry.len().saturating_sub(keep);
                    carry.drain(..excess);
                }
            }
        }
        self.seen = found;
        found
    }
}

/// Where one stream's lines go: the tail, the watch, the sink's copies.
pub(super) struct Out<'a> {
    pub(super) stream: OutputStream,
    pub(super) tail: &'a mut Tail,
    pub(super) watch: Option<&'a mut Watch>,
    pub(super) cut: &'a mut u64,
    /// Someone looks at single lines (the sink or the watch).
    pub(super) line_by_line: bool,
    /// Copies for the sink.
    pub(super) collect: bool,
    pub(super) lines: Vec<Vec<u8>>,
    /// The watch saw its text.
    pub(super) seen: bool,
}

impl Out<'_> {
    pub(super) fn emit(&mut self, bytes: &[u8], end: End) {
        match end {
            End::Line => self.tail.push_line(self.stream, bytes),
            End::Piece { first } => {
                self.tail.push_piece(self.stream, bytes);
                if first && self.line_by_line {
                    *self.cut += 1;
                }
            }
        }
        if let Some(w) = self.watch.as_mut() {
            self.seen |= w.look(self.stream.index(), bytes, end);
        }
        if self.collect {
            self.lines.push(bytes.to_vec());
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(reads: &[&[u8]], eof: bool) -> (Vec<(Vec<u8>, End)>, usize) {
        let mut a = Assembler::default();
        let mut out = Vec::new();
        let mut most_held = 0;
        for read in reads {
            a.split(read, &mut |b: &[u8], e| out.push((b.to_vec(), e)));
            most_held = most_held.max(a.partial.capacity());
        }
        if eof {
            a.finish(&mut |b: &[u8], e| out.push((b.to_vec(), e)));
        }
        (out, most_held)
    }

    #[test]
    fn a_line_split_across_reads_is_one_line() {
        let (out, _) = run(&[b"listening on ", b"port 5432\nnext"], false);
        assert_eq!(out, [(b"listening on port 5432".to_vec(), End::Line)]);
        let (out, _) = run(&[b"a", b"b", b"\n\n", b"c"], true);
        assert_eq!(
            out,
            [
                (b"ab".to_vec(), End::Line),
                (b"".to_vec(), End::Line),
                (b"c".to_vec(), End::Line)
            ]
        );
    }

    #[test]
    fn a_long_line_comes_in_pieces_of_the_bound_and_what_is_held_stays_within_it() {
        let line = vec![b'x'; 2 * MAX_LINE_BYTES + 5];
        // In reads of every size around the bound: the same pieces.
        for size in [
            1000,
            MAX_LINE_BYTES - 1,
            MAX_LINE_BYTES,
            MAX_LINE_BYTES + 1,
            1 << 20,
        ] {
            let mut text = line.clone();
            text.extend_from_slice(b"\nshort\n");
            let reads: Vec<&[u8]> = text.chunks(size).collect();
            let (out, held) = run(&reads, false);
            let ends: Vec<(usize, End)> = out.iter().map(|(b, e)| (b.len(), *e)).collect();
            assert_eq!(
                ends,
                [
                    (MAX_LINE_BYTES, End::Piece { first: true }),
                    (MAX_LINE_BYTES, End::Piece { first: false }),
                    (5, End::Line),
                    (5, End::Line),
                ],
                "reads of {size}"
            );
            assert!(held <= MAX_LINE_BYTES, "reads of {size}: held {held}");
        }
    }

    #[test]
    fn a_line_of_exactly_the_bound_ends_with_an_empty_piece() {
        let line = vec![b'y'; MAX_LINE_BYTES];
        let (out, _) = run(&[&line, b"\n"], false);
        let ends: Vec<(usize, End)> = out.iter().map(|(b, e)| (b.len(), *e)).collect();
        assert_eq!(
            ends,
            [(MAX_LINE_BYTES, End::Piece { first: true }), (0, End::Line)]
        );
        // …at EOF too.
        let (out, _) = run(&[&line], true);
        let ends: Vec<(usize, End)> = out.iter().map(|(b, e)| (b.len(), *e)).collect();
        assert_eq!(
            ends,
            [(MAX_LINE_BYTES, End::Piece { first: true }), (0, End::Line)]
        );
    }

    #[test]
    fn the_watch_sees_its_text_across_a_cut() {
        let mut w = Watch::new("ready now");
        assert!(!w.look(0, b"xxxx ready", End::Piece { first: true }));
        // The other stream's lines do not join this one's.
        assert!(!w.look(1, b" now", End::Line));
        assert!(w.look(0, b" now", End::Line));
        assert!(w.seen);
        let mut w = Watch::new("abc");
        assert!(!w.look(0, b"a", End::Piece { first: true }));
        assert!(!w.look(0, b"b", End::Piece { first: false }));
        assert!(w.look(0, b"c", End::Line));
        let mut w = Watch::new("abc");
        assert!(!w.look(0, b"ab", End::Line));
        assert!(!w.look(0, b"c", End::Line), "a line end breaks the text");
    }
}
