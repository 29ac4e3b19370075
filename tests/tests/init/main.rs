//! `childguard init` (issue 24): `tini.rs`, every behaviour tini's own tests check, under both
//! names; `more.rs`, more of what tini does; `stop.rs`, the engine's stop within a budget, the sweep of what is left, the report
//! and the ready file.

mod more;
mod ready;
mod stop;
mod tini;

/// A finished process's stderr, as text.
pub fn err(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Sends TERM to the init `child`, waits for it, and asserts its exit code (`what` names the
/// case in the message); its output.
#[track_caller]
pub fn term_and_expect(child: std::process::Child, code: i32, what: &str) -> std::process::Output {
    childguard_tests::init::send(child.id(), libc::SIGTERM);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(code), "{what}: {}", err(&o));
    o
}
