//! # childguard
//!
//! Own a spawned server process together with the socket connected to it, and close both fast,
//! safely and within a bound.
//!
//! ```no_run
//! use std::process::Command;
//! use childguard::{ChildHandle, Ladder, SocketMode};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut cmd = Command::new("nbdkit");
//! cmd.args(["-s", "memory", "1M"]);
//! let handle = ChildHandle::builder(cmd)
//!     .socket(SocketMode::Stdio)              // socketpair on the server's stdin/stdout
//!     .ladder("HUP:1s,TERM:2s,KILL:5s".parse::<Ladder>()?)
//!     .process_group(true)                    // every rung reaches the server's workers too
//!     .spawn()?;
//! // … talk NBD over handle.socket() …
//! let report = handle.close()?;               // shutdown → close → HUP → TERM → KILL → reap
//! println!("{report}");
//! # Ok(()) }
//! ```
//!
//! See [`ChildHandle`] for the close timeline, [`Ladder`] for the rung syntax, and
//! `docs/design.md` for the invariants and the races avoided.

// Every `unsafe` block of the crate is in `sys`, one thin wrapper per system call.
#![deny(unsafe_code)]

mod activation;
mod capture;
mod climb;
mod close_control;
mod command_debug;
mod containment;
mod detach;
mod error;
mod exec_check;
#[doc(hidden)]
pub mod failpoint;
mod handle;
mod inheritable;
mod ladder;
mod on_drop;
mod output;
mod per_process;
mod process;
mod program;
mod readiness;
pub mod reaper;
mod release;
mod report;
mod signal;
mod spawner;
mod stdio;
#[allow(unsafe_code)]
mod sys;
#[cfg(feature = "tokio")]
pub mod tokio;

pub use capture::{Capture, OutputStream, DEFAULT_TAIL_BYTES, DEFAULT_TAIL_LINES};
pub use close_control::CloseControl;
pub use containment::{CgroupReport, Containment, KillMode};
pub use detach::DetachError;
pub use error::{Error, ErrorKind, Result};
pub use handle::{Builder, ChildHandle, Reap, SocketMode, DEFAULT_CONNECT_TIMEOUT};
pub use ladder::{
    Ladder, LadderParseError, PresetFn, Rung, DEFAULT_GRACE, LADDER_ENV, LADDER_PRESETS, MAX_GRACE,
};
pub use output::Output;
pub use readiness::{ConnectTo, Ready, DEFAULT_NOTIFY_EXTEND_MAX, DEFAULT_READY_TIMEOUT};
pub use report::{CloseReport, Ending, Extension, MemoryRelease, NotifyReport, SentSignal};
pub use signal::{Signal, SignalParseError};

/// Whether `SIGPIPE` was ignored when this process started — before Rust's runtime set it to
/// `SIG_IGN` for itself, which hides the original from any later `sigaction`. Recorded by an
/// ELF constructor (Linux, FreeBSD; `None` elsewhere). For [`Builder::ignore_sigpipe`].
pub fn sigpipe_ignored_at_start() -> Option<bool> {
    sys::sigpipe_ignored_at_start()
}
