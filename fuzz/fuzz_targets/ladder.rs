//! Fuzzes `Ladder::from_str` and its `Display` round trip (oracle: `fuzz/checks.rs`).
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::ladder_text(&checks::text_of(data));
});
