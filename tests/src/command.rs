//! Running the `childguard` command (the `cg-childguard` test binary) and checking that a
//! program a test needs is on PATH.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// [`childguard`], which must end within `bound` (generous: what ends it is an event, not
/// a timeout).
pub fn childguard_within(bound: Duration, args: &[&str]) -> Output {
    let began = Instant::now();
    let o = childguard(args);
    let took = began.elapsed();
    assert!(took < bound, "took {took:?}: {args:?}: {}", stderr(&o));
    o
}

/// The run exited with `code`, and its stderr says each of `needles`.
pub fn exited_saying(o: &Output, code: i32, needles: &[&str]) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{e}");
    for needle in needles {
        assert!(e.contains(needle), "{needle:?} not in: {e}");
    }
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
