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
