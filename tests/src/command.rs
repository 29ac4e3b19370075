//! Running the `childguard` command (the `cg-childguard` test binary) and checking that a
//! program a test needs is on PATH.

use std::process::{Command, Output, Stdio};

use crate::bin;
use crate::postgres::find_peer;

/// `childguard ARGS…` with stdin from /dev/null, its output captured.
pub fn childguard(args: &[&str]) -> Output {
    Command::new(bin("cg-childguard"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running cg-childguard")
}

/// What a run wrote on stderr, as text (for assertions and their messages).
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Whether `program` is on PATH. If not, fails `test` saying what to install (`install`) —
/// unless `CHILDGUARD_SKIP_PEERS=1`, where it says the test was skipped and returns false.
pub fn on_path(test: &str, program: &str, install: &str) -> bool {
    let candidates = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(program))
                .collect()
        })
        .unwrap_or_default();
    find_peer(test, program, candidates, install).is_some()
}
