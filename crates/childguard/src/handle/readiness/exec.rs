//! [`Ready::Exec`](super::Ready::Exec): a probe command (`pg_isready -h /run/pg`, `redis-cli
//! -s /run/r.sock ping`) exits 0.
//!
//! Each attempt is a child of the library's own, spawned and closed as any other (the
//! `spawn` layer's builder, handed in by [`ProbeSpawn`]): its stdout and stderr captured
//! (the tail kept for the error), in a process group of its own with the ladder `KILL:1s`,
//! so a probe that overruns its [`attempt_timeout`](ExecCheck::attempt_timeout) — and
//! anything it started — is killed and reaped by the one close path, not a second one.
//!
//! The probe runs *outside* the server's cgroup, as our own child with our credentials: it is
//! our client, not part of the server. Inside, it would count as the server for what the
//! cgroup is for — its `READY=1` admitted by [`NotifyAccess::All`](super::NotifyAccess::All),
//! its memory charged to the server's limits, its leftovers reported as the server's, and a
//! server's `cgroup.kill` taking it along — and a server spawned as another user would need
//! the probe to run as that user too.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::process::Command;
use std::time::Duration;

use super::probe::ReadyParseError;
use crate::error::Result;
use crate::ChildHandle;

/// How long one probe may run by default before it is killed: 5 s (`pg_isready`'s own
/// connect timeout is 3 s).
pub const DEFAULT_EXEC_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of a failed probe's output the error quotes: its last 4 KiB and 20 lines.
pub const EXEC_OUTPUT_BYTES: usize = 4096;
/// See [`EXEC_OUTPUT_BYTES`].
pub const EXEC_OUTPUT_LINES: usize = 20;

/// What [`Ready::Exec`](super::Ready::Exec) runs: a program and its arguments, no shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecCheck {
    argv: Vec<OsString>,
    attempt_timeout: Duration,
}

/// How a probe is started: the builder's spawn (the layer above), handed down so this one
/// needs no import of it.
pub(crate) type ProbeSpawn = fn(Command) -> Result<ChildHandle>;

impl ExecCheck {
    /// The probe `argv[0] argv[1..]`, run as is (no shell: for one, pass `["sh", "-c",
    /// "…"]`).
    ///
    /// # Errors
    ///
    /// A [`ReadyParseError`] for an empty `argv` or an empty program name.
    pub fn new<I, S>(argv: I) -> std::result::Result<ExecCheck, ReadyParseError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let argv: Vec<OsString> = argv.into_iter().map(|a| a.as_ref().to_owned()).collect();
        match argv.first() {
            None => Err(ReadyParseError::new(
                "[]",
                "an exec probe needs a program (an empty argv)",
            )),
            Some(program) if program.is_empty() => Err(ReadyParseError::new(
                &words(&argv),
                "an exec probe needs a program (an empty program name)",
            )),
            Some(_) => Ok(ExecCheck {
                argv,
                attempt_timeout: DEFAULT_EXEC_ATTEMPT_TIMEOUT,
            }),
        }
    }

    /// How long one run of the probe may take (default [`DEFAULT_EXEC_ATTEMPT_TIMEOUT`]; at
    /// least 1 ms); then it is killed, reaped, and counts as not ready.
    pub fn attempt_timeout(mut self, timeout: Duration) -> ExecCheck {
        self.attempt_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The probe's argv.
    pub fn argv(&self) -> &[OsString] {
        &self.argv
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.attempt_timeout
    }

    /// The probe's command: stdin from `/dev/null` (a probe that reads it gets EOF).
    pub(crate) fn command(&self) -> Command {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]).stdin(std::process::Stdio::null());
        cmd
    }
}

/// The argv as one line, for messages: words with a space or a quote quoted.
pub(super) fn words(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| {
            let a = a.to_string_lossy();
            if a.is_empty() || a.contains([' ', '\'', '"', '\\']) {
                format!("{a:?}")
            } else {
                a.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl fmt::Display for ExecCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the probe `{}` to exit 0", words(&self.argv))
    }
}
