//! Fuzzes `LISTEN_FDNAMES` name validation through `SocketMode::Activation` (oracle:
//! `fuzz/checks.rs`).
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("childguard-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("fuzz runtime dir");
    checks::activation_name(&checks::text_of(data), &dir);
});
