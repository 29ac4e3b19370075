//! The fuzzing oracles, shared by the cargo-fuzz targets (`fuzz/fuzz_targets/*.rs`, long runs)
//! and the CI-sized proptest runs in `tests/tests/props.rs` (short runs, part of `cargo test`).
//! Both include this file with `#[path]`, so the two can never check different things.
//!
//! Each function takes arbitrary input and panics on a violation of:
//! - no panic inside the parser,
//! - a clear error: a non-empty message that says what was being parsed and names the
//!   offending input or part,
//! - a round trip for every success: `Display` parses back to the same value, and prints the
//!   same text again.

// Each includer uses only some of the oracles.
#![allow(dead_code)]

use childguard::{Ladder, Signal};

/// Arbitrary bytes as parser input: valid UTF-8 as is, anything else lossily (the parsers take
/// `&str`; the non-UTF-8 path of `CHILDGUARD_LADDER` is a separate, fixed branch).
pub fn text_of(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// `Ladder::from_str`, `Display` round trip, error clarity.
pub fn ladder_text(text: &str) {
    match text.parse::<Ladder>() {
        Ok(ladder) => {
            assert!(
                !ladder.rungs().is_empty(),
                "{text:?} parsed into a ladder without rungs"
            );
            // The sum of all graces saturates instead of overflowing.
            let _ = ladder.total_grace();
            let shown = ladder.to_string();
            let again: Ladder = shown.parse().unwrap_or_else(|e| {
                panic!("{text:?} parsed, but its Display {shown:?} does not parse back: {e}")
            });
            assert_eq!(
                again, ladder,
                "{text:?}: Display {shown:?} parses to a different ladder"
            );
            assert_eq!(again.to_string(), shown, "{text:?}: Display is not stable");
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains("ladder"),
                "{text:?}: error {message:?} does not say it is about a ladder"
            );
            let part = e.part();
            if part.is_empty() {
                // Whole-ladder errors: an empty text, or an empty item (stray comma).
                assert!(
                    message.contains("empty"),
                    "{text:?}: error {message:?} names no part and is not about emptiness"
                );
            } else {
                assert!(
                    text.contains(part),
                    "{text:?}: error names part {part:?}, which is not in the input"
                );
                assert!(
                    message.contains(&format!("{part:?}")),
                    "{text:?}: error {message:?} does not quote the bad part {part:?}"
                );
            }
        }
    }
}

/// `Signal::from_str`, `Display` round trip, error clarity.
pub fn signal_text(text: &str) {
    match text.parse::<Signal>() {
        Ok(signal) => {
            // 0 only as Signal::NONE (the rung that sends nothing), never a negative number.
            assert!(signal.as_raw() >= 0, "{text:?} parsed into {signal:?}");
            assert_eq!(
                Signal::from_raw(signal.as_raw()),
                Some(signal),
                "{text:?}: from_raw disagrees with from_str"
            );
            let shown = signal.to_string();
            assert_eq!(
                shown.parse::<Signal>(),
                Ok(signal),
                "{text:?}: Display {shown:?} does not parse back"
            );
            if signal.name().is_some() {
                assert_eq!(
                    format!("SIG{shown}").parse::<Signal>(),
                    Ok(signal),
                    "{text:?}: the SIG-prefixed Display {shown:?} does not parse back"
                );
            }
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains("signal"),
                "{text:?}: error {message:?} does not say it is about a signal"
            );
            if !text.is_empty() {
                assert!(
                    message.contains(&format!("{text:?}")),
                    "{text:?}: error {message:?} does not quote the input"
                );
            }
        }
    }
}

/// A program that does not exist: an activation spawn of it fails before anything is forked.
pub const NO_SUCH_PROGRAM: &str = "/nonexistent/childguard-fuzz-no-such-program";

/// systemd's rules for one `LISTEN_FDNAMES` entry, written independently of the library: 1 to
/// 255 printable ASCII characters, no `:`.
pub fn is_valid_fdname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name.chars().all(|c| (' '..='~').contains(&c))
        && !name.contains(':')
}

/// `LISTEN_FDNAMES` validation, through the public builder (the validating function itself is
/// private): spawning [`NO_SUCH_PROGRAM`] with `SocketMode::Activation { name }` must fail with
/// a `Config` error that names `LISTEN_FDNAMES` and quotes the name exactly when systemd's
/// rules reject it, and with some other error (the program is missing) when they accept it.
/// Either way nothing may be left in `runtime_dir`.
pub fn activation_name(name: &str, runtime_dir: &std::path::Path) {
    use childguard::{ChildHandle, ErrorKind, SocketMode};
    let spawned = ChildHandle::builder(std::process::Command::new(NO_SUCH_PROGRAM))
        .socket(SocketMode::Activation {
            name: Some(name.to_string()),
        })
        .runtime_dir(runtime_dir)
        .spawn();
    let Err(err) = spawned else {
        panic!("{name:?}: spawning {NO_SUCH_PROGRAM} succeeded");
    };
    let message = err.to_string();
    if is_valid_fdname(name) {
        assert_ne!(
            err.kind(),
            ErrorKind::Config,
            "{name:?} follows systemd's rules but was refused: {message}"
        );
    } else {
        assert_eq!(
            err.kind(),
            ErrorKind::Config,
            "{name:?} breaks systemd's rules but was not refused as configuration: {message}"
        );
        assert!(
            message.contains("LISTEN_FDNAMES") && message.contains(&format!("{name:?}")),
            "{name:?}: error {message:?} does not name LISTEN_FDNAMES and quote the name"
        );
    }
    let left: Vec<_> = std::fs::read_dir(runtime_dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{name:?}: a failed spawn left {left:?}");
}
