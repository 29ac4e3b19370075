//! The checked-in `include/childguard.h` is what cbindgen makes of this crate now.

use std::path::Path;

/// The command that rewrites the header.
const REGENERATE: &str = "CHILDGUARD_WRITE_HEADER=1 cargo test -p childguard-ffi --lib header";

#[test]
fn header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate the header");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = dir.join("include/childguard.h");
    if std::env::var_os("CHILDGUARD_WRITE_HEADER").is_some_and(|v| v == "1") {
        std::fs::write(&path, &fresh).expect("writing include/childguard.h");
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == fresh,
        "include/childguard.h is stale: run `{REGENERATE}` and commit it"
    );
}
