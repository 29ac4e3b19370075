//! The LSP base protocol's framing: a header (`Content-Length: N\r\n`, other fields
//! ignored, `\r\n` ending it), then `N` bytes of JSON. [`encode`] makes a frame; [`Decoder`]
//! takes the server's bytes as they come and gives whole messages.
//!
//! The decoder may start in the middle of the stream — the user's own reader may have read
//! part of a message before handing the pipes over, or the server may print a stray line to
//! its stdout. Bytes that are not a header are skipped up to the next `Content-Length:`
//! (counted in [`Decoder::skipped`]), so the close still finds its answer behind them. What
//! it cannot get past is an error: a body over [`MAX_BODY`] (it would be buffered whole), a
//! `Content-Length` that is not a number.

use serde_json::Value;

/// The largest message body accepted: a bound on what one message may make us buffer.
pub const MAX_BODY: usize = 64 << 20;

/// The longest header accepted before its end (`\r\n\r\n`); past it, the bytes are skipped.
const MAX_HEADER: usize = 8 * 1024;

/// The field every frame must carry (matched without regard to case).
const CONTENT_LENGTH: &[u8] = b"content-length:";

/// One message as a frame: `Content-Length: N\r\n\r\n` and the JSON body.
pub(crate) fn encode(message: &Value) -> Vec<u8> {
    let body = message.to_string();
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(body.as_bytes());
    frame
}

/// Why the server's output cannot be read as LSP messages any further.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FrameError(pub(crate) String);

/// The server's bytes in, whole messages out.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    buf: Vec<u8>,
    /// Bytes skipped because they were not a frame (see the module).
    pub(crate) skipped: usize,
    /// Frames whose body was not JSON (dropped; the framing itself was intact).
    pub(crate) garbled: usize,
}

impl Decoder {
    /// Bytes read that made no whole message yet.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, `None` if it is not all there yet.
    pub(crate) fn next_message(&mut self) -> Result<Option<Value>, FrameError> {
        loop {
            let Some(end) = find(&self.buf, b"\r\n\r\n") else {
                if self.buf.len() > MAX_HEADER {
                    self.resync(0);
                }
                return Ok(None);
            };
            let length = match parse_header(&self.buf[..end]) {
                Header::Length(n) => n,
                Header::Skip => {
                    self.resync(end + 4);
                    continue;
                }
                Header::Bad(why) => return Err(FrameError(why)),
            };
            if length > MAX_BODY {
                return Err(FrameError(format!(
                    "Content-Length {length} is over the {} MiB a message may have",
                    MAX_BODY >> 20
                )));
            }
            let start = end + 4;
            if self.buf.len() - start < length {
                return Ok(None);
            }
            let parsed = serde_json::from_slice::<Value>(&self.buf[start..start + length]);
            self.buf.drain(..start + length);
            match parsed {
                Ok(message) => return Ok(Some(message)),
                Err(_) => self.garbled += 1,
            }
        }
    }

    /// Drops the bytes before the next `Content-Length:` after the first byte; without one,
    /// everything but a tail that could be its beginning — and at least `at_least` bytes (a
    /// whole block that is not a header), so that each call makes progress.
    fn resync(&mut self, at_least: usize) {
        let next = find_ignore_case(&self.buf[1.min(self.buf.len())..], CONTENT_LENGTH)
            .map(|at| at + 1)
            .unwrap_or_else(|| {
                let tail = self.buf.len().saturating_sub(CONTENT_LENGTH.len() - 1);
                tail.max(at_least).min(self.buf.len())
            });
        self.skipped += next;
        self.buf.drain(..next);
    }
}

enum Header {
    Length(usize),
    /// Not a header at all (another message's tail, a stray line): skip to the next one.
    Skip,
    /// A header with a `Content-Length` that cannot be used.
    Bad(String),
}

/// A header is lines of `Name: value`, the name letters, digits and `-`.
fn parse_header(header: &[u8]) -> Header {
    let mut length = None;
    for line in header.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Header::Skip;
        };
        let name = &line[..colon];
        if name.is_empty() || !name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'-') {
            return Header::Skip;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            let value = String::from_utf8_lossy(&line[colon + 1..])
                .trim()
                .to_owned();
            length = Some(value.parse::<usize>().map_err(|e| {
                format!("the header's Content-Length {value:?} is not a length: {e}")
            }));
        }
    }
    match length {
        Some(Ok(n)) => Header::Length(n),
        Some(Err(why)) => Header::Bad(why),
        None => Header::Skip,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn find_ignore_case(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn frame(body: &str) -> Vec<u8> {
        format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    fn all(decoder: &mut Decoder) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(m) = decoder.next_message().unwrap() {
            out.push(m);
        }
        out
    }

    #[test]
    fn encode_then_decode_byte_by_byte_and_two_in_one_push() {
        let a = json!({"jsonrpc": "2.0", "method": "a", "params": {"x": "é"}});
        let b = json!({"jsonrpc": "2.0", "id": 1, "result": null});
        let mut bytes = encode(&a);
        bytes.extend(encode(&b));
        let mut one = Decoder::default();
        let mut got = Vec::new();
        for byte in &bytes {
            one.push(std::slice::from_ref(byte));
            got.extend(all(&mut one));
        }
        assert_eq!(got, [a.clone(), b.clone()]);
        let mut whole = Decoder::default();
        whole.push(&bytes);
        assert_eq!(all(&mut whole), [a, b]);
        assert_eq!((whole.skipped, whole.garbled), (0, 0));
    }

    #[test]
    fn other_header_fields_and_any_case_are_accepted() {
        let body = r#"{"id":"x","result":null}"#;
        let text = format!(
            "content-type: application/vscode-jsonrpc; charset=utf-8\r\nCONTENT-LENGTH:{}\r\n\r\n{body}",
            body.len()
        );
        let mut d = Decoder::default();
        d.push(text.as_bytes());
        assert_eq!(all(&mut d), [json!({"id": "x", "result": null})]);
    }

    /// The user's reader took the first half of a message: the rest is skipped, the next
    /// frame is read.
    #[test]
    fn a_stream_begun_mid_message_or_with_a_stray_line_is_read_from_the_next_frame() {
        let first =
            frame(r#"{"jsonrpc":"2.0","method":"window/logMessage","params":{"message":"a: b"}}"#);
        let mut bytes = first[30..].to_vec();
        bytes.extend_from_slice(b"a stray line on stdout\n");
        bytes.extend(frame(r#"{"id":"x","result":null}"#));
        let mut d = Decoder::default();
        d.push(&bytes);
        assert_eq!(all(&mut d), [json!({"id": "x", "result": null})]);
        assert_eq!(
            d.skipped,
            bytes.len() - frame(r#"{"id":"x","result":null}"#).len()
        );
    }

    #[test]
    fn endless_garbage_is_skipped_without_growing_the_buffer() {
        let mut d = Decoder::default();
        for _ in 0..100 {
            d.push(&[b'x'; 4096]);
            assert_eq!(d.next_message(), Ok(None));
            assert!(d.buf.len() <= MAX_HEADER + 4096, "{}", d.buf.len());
        }
        // A frame after it is still found, also when its name was split across pushes.
        d.push(b"Content-Le");
        d.push(&frame(r#"{"id":1,"result":2}"#)[10..]);
        assert_eq!(all(&mut d), [json!({"id": 1, "result": 2})]);
    }

    #[test]
    fn short_blocks_that_are_not_headers_are_passed_over() {
        let mut d = Decoder::default();
        d.push(b"x\r\n\r\n\r\n\r\n:\r\n\r\nContent-Length: 5\r\nnot a field\r\n\r\n");
        assert_eq!(d.next_message(), Ok(None));
        d.push(&frame("[7]"));
        assert_eq!(all(&mut d), [json!([7])]);
    }

    #[test]
    fn a_body_that_is_not_json_is_dropped_and_counted() {
        let mut d = Decoder::default();
        d.push(&frame("{{{"));
        d.push(&frame("[1]"));
        assert_eq!(all(&mut d), [json!([1])]);
        assert_eq!(d.garbled, 1);
    }

    #[test]
    fn a_huge_or_unreadable_content_length_is_an_error_saying_why() {
        for (bytes, why) in [
            (
                &b"Content-Length: 99999999999\r\n\r\n"[..],
                "is over the 64 MiB",
            ),
            (b"Content-Length: ten\r\n\r\n{}", "is not a length"),
            (
                b"Content-Length: 99999999999999999999999999\r\n\r\n",
                "is not a length",
            ),
            (b"Content-Length: -1\r\n\r\n", "is not a length"),
        ] {
            let mut d = Decoder::default();
            d.push(bytes);
            match d.next_message() {
                Err(FrameError(e)) => assert!(e.contains(why), "{bytes:?}: {e}"),
                other => panic!("{bytes:?}: {other:?}"),
            }
        }
    }
}
