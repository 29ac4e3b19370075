//! The close: the ladder of signals and graces, the climb that sends them, the controlled
//! close of `close_with`, the memory release after a kill, the background reaper that finishes
//! a climb nobody waits for, and the report of what the close did.

pub(crate) mod climb;
pub(crate) mod close_control;
pub(crate) mod ladder;
pub mod reaper;
pub(crate) mod release;
pub(crate) mod report;
#[cfg(target_os = "linux")]
pub(crate) mod sweep;
pub(crate) mod target;
