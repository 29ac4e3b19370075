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
//!
//! ## Tracing
//!
//! With the `tracing` feature the library reports what it does to the embedding program's own
//! [`tracing`](https://docs.rs/tracing) subscriber; without it nothing is compiled in.
//!
//! Target `childguard`. Spans: `spawn` (the whole [`Builder::spawn`](crate::Builder::spawn),
//! readiness wait included) and `close` (a close path, to its return — the blocking close climbs
//! inside it; a background close leaves it after the hand-off, and the reaper's later events carry
//! the `pid` field instead). Events:
//!
//! | event (`message`) | level | fields |
//! |---|---|---|
//! | `spawned` | INFO | `pid` |
//! | `ready` / `not ready` | INFO / WARN | `pid`, `awaited`, `elapsed_ms` (`error` when not) |
//! | `rung` | INFO | `pid`, `rung` (index), `signal`, `reached` (processes, when counted) |
//! | `exited` | INFO | `pid`, `status` |
//! | `reaped` | DEBUG | `pid` |
//! | `handed off` | DEBUG | `pid`, `jobs` (handed to the background reaper with it) |
//! | `cgroup killed` | INFO | `path`, `members`, `how` (`cgroup.kill` or `freeze`) |
//!
//! The rung events are sent by whichever driver climbs the ladder (the blocking close, the
//! background reaper, the tokio face, the CLI), from the one place a rung is sent.

// Every `unsafe` block of the crate is in `sys`, one thin wrapper per system call.
#![deny(unsafe_code)]

// The modules, in folders by layer, bottom to top; a module imports only from its own layer or
// below (tests/tests/module_layers.rs checks it, and that no import circle forms):
// - `base/`: types and hooks every layer uses (signal numbers, failpoints, tracing events).
// - `sys/`: every `unsafe` block and raw system call, one thin wrapper per call.
// - `core/`: the one event loop per process (every background watch: pidfds, rung deadlines,
//   captured pipes, the `cgroup.events` watches), the one wait primitive every blocking wait goes
//   through, the SIGCHLD notifier, the per-process globals.
// - `process/`: one child and the processes it owns: pidfd, the portable mechanism, group,
//   descendants, its cgroup (`containment/`: the kill used by every close sits here, below
//   the close; its guardian too).
// - `close/`: the ladder and its climb, the controlled close, memory release, the background
//   reaper that finishes a climb, and the close report.
// - `error`: the crate's error, which carries a close report (so it sits with `close/`).
// - `spawn/`: everything a spawn sets up: stdio, socket activation, placement, capture, the
//   spawner thread, the command's checks and debug form.
// - `handle/`: `ChildHandle`, its builder, and what works on a handle: the readiness waits
//   (`readiness/`), `output`, `ExitWatch`, detach, the drop policy.
// - `tokio/`: the async face, on top.
mod base;
mod close;
mod core;
mod error;
mod handle;
mod process;
mod spawn;
mod supervise;
#[allow(unsafe_code)]
mod sys;
#[cfg(feature = "tokio")]
pub mod tokio;

// Public module paths from before the layering: `childguard::failpoint`, `childguard::reaper`.
#[doc(hidden)]
pub use base::failpoint;
/// `/proc` and cgroupfs files read whole in one `read(2)` (the CLI's reads of its own `stat`
/// and of `children` files); not part of the API.
#[doc(hidden)]
pub use base::kernel_text::read as read_kernel_text;
pub use close::reaper;

pub use crate::core::wait::{Interrupt, INTERRUPT_CHECK_EVERY};
pub use base::signal::{Signal, SignalParseError};
pub use close::close_control::CloseControl;
pub use close::ladder::{
    Ladder, LadderParseError, PresetFn, Rung, DEFAULT_GRACE, LADDER_ENV, LADDER_PRESETS, MAX_GRACE,
};
pub use close::report::{
    CloseReport, Ending, Extension, MemoryRelease, NotifyReport, SentSignal, SkippedRung,
};
#[cfg(target_os = "linux")]
pub use close::sweep::{Sweep, SweepOutcome};
pub use error::{Error, ErrorKind, Result};
pub use handle::detach::DetachError;
pub use handle::exit_watch::ExitWatch;
pub use handle::output::Output;
pub use handle::readiness::{
    ConnectTo, ExecCheck, HttpCheck, NotifyAccess, Ready, ReadyParseError, WatchdogMiss,
    DEFAULT_EXEC_ATTEMPT_TIMEOUT, DEFAULT_HTTP_ATTEMPT_TIMEOUT, DEFAULT_NOTIFY_EXTEND_MAX,
    DEFAULT_READY_TIMEOUT, EXEC_OUTPUT_BYTES, EXEC_OUTPUT_LINES, MAX_STATUS_LINE,
};
pub use handle::{Builder, ChildHandle, Reap, SocketMode, DEFAULT_CONNECT_TIMEOUT};
pub use process::containment::limits::{Amount, Limits, LimitsReport};
pub use process::containment::{
    Backend as ContainmentBackend, CgroupReport, Containment, ContainmentReport, KillMode,
};
pub use process::disposition::Disposition;
pub use spawn::capture::{
    Capture, OutputStream, CALLBACK_QUEUE_BYTES, CALLBACK_QUEUE_LINES, DEFAULT_TAIL_BYTES,
    DEFAULT_TAIL_LINES, MAX_LINE_BYTES, PASS_ON_MAX,
};
pub use spawn::stdio_server::StdioChannel;
pub use supervise::{GenerationExit, Restart, RestartPolicy, SupervisionReport, Supervisor};

/// Whether `SIGPIPE` was ignored when this process started — before Rust's runtime set it to
/// `SIG_IGN` for itself, which hides the original from any later `sigaction`. Recorded by an
/// ELF constructor (Linux, FreeBSD; `None` elsewhere). For [`Builder::ignore_sigpipe`].
pub fn sigpipe_ignored_at_start() -> Option<bool> {
    sys::sigpipe_ignored_at_start()
}

/// The most threads the library runs in the background, whatever the number of children —
/// 1,000 contained, captured servers alive at once cost no more threads than one:
///
/// | thread (`/proc/self/task/*/comm`) | what it does | when it starts |
/// |---|---|---|
/// | `childguard-loop` | the event loop: every pidfd, rung deadline, captured pipe, `cgroup.events` watch, notify socket of a background close | first spawn that captures, first wait on a contained child's cgroup (a contained child that exits with its cgroup empty never needs it), first hand-off to the reaper |
/// | `childguard-call` (`childguard-callbacks`) | every handle's `on_line` and passthrough | first spawn with either |
/// | `childguard-spawner` (`childguard-spaw`) | forks the children that die with us (`exit_with_parent`: `PR_SET_PDEATHSIG` follows the forking thread) | first such spawn |
/// | `childguard-small-table` (`childguard-smal`) | makes our own spawn from an fd table of its own, holding only the child's fds, when this process holds many (a child's copy of the table and its exec's closing of each entry cost ~0.1 µs per fd) | first spawn on our own spawn with its fds numbered from 512 up |
/// | `childguard-sigchld` (`childguard-sigc`) | wakes blocking waits on the portable mechanism (no pidfds: other Unixes, old kernels) | first portable spawn |
/// | `childguard-mrelease` (`childguard-mrel`), at most 2 at once | `process_mrelease(2)` beside a `SIGKILL` rung of a big child | such a rung; ends with it |
///
/// Each is per process: a child made by `fork()` without `exec` starts its own on first use.
/// Not counted: the threads of a tokio runtime the caller runs, and the guardian, which is a
/// process.
pub const MAX_BACKGROUND_THREADS: usize = 5 + close::release::MAX_RELEASE_HELPERS;
