//! [`Error`]: the one error type of childguard.

use std::fmt;
use std::io;

/// What went wrong, on which program. Converts into [`io::Error`] (keeping the OS error kind).
///
/// An error from a close carries the close's [`CloseReport`](crate::CloseReport)
/// ([`Error::close_report`]): what was done before the failing step, and what became of the
/// child (reaped, or handed to the background reaper, which still reaps it).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    program: Option<String>,
    source: io::Error,
    /// The captured output's tail, for errors after the fork (see [`Error::output_tail`]).
    output_tail: Option<String>,
    /// The report of the close this error comes from, or of the close of a child that did
    /// not become ready (see [`Error::close_report`]).
    report: Option<Box<crate::CloseReport>>,
}

/// The step that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Creating the socket or socket directory before spawning.
    Socket,
    /// `fork`/`exec` of the program failed (not found, not executable, out of fds …).
    Spawn,
    /// Taking the spawned child over: its pidfd failed (any such failure falls back to the
    /// portable `kill` + `SIGCHLD` mechanism) and that mechanism's `SIGCHLD` notifier could not
    /// be started either. The child was killed and reaped.
    Pidfd,
    /// Sending a signal.
    Signal,
    /// Waiting for or reaping the child.
    Wait,
    /// The host process set `SIGCHLD` to `SIG_IGN`, or gave it the `SA_NOCLDWAIT` flag, so
    /// children are reaped by the kernel.
    SigchldIgnored,
    /// A configuration value (ladder, name, path) was rejected.
    Config,
    /// Making the child's cgroup or placing the child in it ([`Containment`]): no cgroup v2,
    /// a parent that is not writable or not delegated, cgroup v2's no-internal-processes rule
    /// (`EBUSY`), a limit. The message names the path and the reason.
    ///
    /// [`Containment`]: crate::Containment
    Containment,
    /// Connecting to a socket-activated server.
    Connect,
    /// The server did not become ready ([`Builder::ready`](crate::Builder::ready)): it
    /// exited first, reported `ERRNO=`, or the timeout passed.
    Ready,
    /// The handle was inherited through `fork()` without `exec`: its child belongs to the
    /// process that spawned it, and only that one may signal or wait for it (a close here
    /// just lets this process's copies of the fds go).
    Inherited,
    /// The caller's [`Interrupt`](crate::Interrupt) check returned an error during a wait
    /// (Ctrl-C in Python, a cancel in C). The error's source is the check's error. What
    /// became of the child depends on the call: an interrupted spawn closes the child in the
    /// background (nothing is left); an interrupted close hands the rest of its ladder to the
    /// background reaper; an interrupted wait leaves the child running.
    Interrupted,
    /// A [`Supervisor`](crate::Supervisor) gave up: more starts than its crash-loop limit
    /// allows within the window (the message names the last exits and their output tails), or
    /// the closure that makes each start's builder panicked.
    CrashLoop,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, program: Option<&str>, source: io::Error) -> Error {
        Error {
            kind,
            program: program.map(str::to_owned),
            source,
            output_tail: None,
            report: None,
        }
    }

    /// An error from a wait: [`ErrorKind::Interrupted`] if the caller's interrupt check ended
    /// it, else `kind`.
    pub(crate) fn from_wait(kind: ErrorKind, program: Option<&str>, source: io::Error) -> Error {
        let kind = if crate::core::wait::is_interrupt(&source) {
            ErrorKind::Interrupted
        } else {
            kind
        };
        Error::new(kind, program, source)
    }

    /// Attaches the report of the close that failed, or of the close of a child that did not
    /// become ready.
    pub(crate) fn with_close_report(mut self, report: crate::CloseReport) -> Error {
        self.report = Some(Box::new(report));
        self
    }

    /// The report of a close that went wrong: for an error from
    /// [`ChildHandle::close`](crate::ChildHandle::close) (or `close_async`), the close's report
    /// as far as it got — the steps done, the signals sent, whether the child was reaped or
    /// handed to the background reaper (which then reaps it: a close never leaves a child
    /// unreaped because a step failed); with [`Builder::ready`](crate::Builder::ready), when
    /// the server did not become ready, how it was closed (its signals, status, timeline).
    /// `None` for errors of other calls.
    pub fn close_report(&self) -> Option<&crate::CloseReport> {
        self.report.as_deref()
    }

    /// Attaches the tail of the child's captured output (an empty tail is left out).
    pub(crate) fn with_output_tail(mut self, tail: Option<String>) -> Error {
        self.output_tail = tail.filter(|t| !t.is_empty());
        self
    }

    /// With [`Builder::capture`](crate::Builder::capture), for an error after the fork: the
    /// tail of what the child wrote (`Display` shows its last lines; this is all of it).
    pub fn output_tail(&self) -> Option<&str> {
        self.output_tail.as_deref()
    }

    /// The failed step.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The program the handle was spawned for, if any.
    pub fn program(&self) -> Option<&str> {
        self.program.as_deref()
    }

    /// The OS error number underneath, if there is one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// The underlying I/O error's kind.
    pub fn io_kind(&self) -> io::ErrorKind {
        self.source.kind()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ErrorKind::Socket => "setting up the socket for",
            ErrorKind::Spawn => "spawning",
            ErrorKind::Pidfd => "starting to supervise",
            ErrorKind::Signal => "signalling",
            ErrorKind::Wait => "waiting for",
            ErrorKind::SigchldIgnored => "cannot supervise",
            ErrorKind::Config => "invalid configuration for",
            ErrorKind::Connect => "connecting to",
            ErrorKind::Containment => "containing",
            ErrorKind::Ready => "starting",
            ErrorKind::Inherited => "not this process's child:",
            ErrorKind::Interrupted => "interrupted while waiting for",
            ErrorKind::CrashLoop => "supervising",
        };
        match &self.program {
            Some(p) => write!(f, "{what} `{p}`: {}", self.source)?,
            None => write!(f, "{what} socket: {}", self.source)?,
        }
        if let Some(tail) = &self.output_tail {
            let lines: Vec<&str> = tail.lines().collect();
            let shown = &lines[lines.len().saturating_sub(ERROR_TAIL_LINES)..];
            write!(f, "; last output:")?;
            for line in shown {
                write!(f, "\n  {line}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.source.kind(), e)
    }
}

/// How many of the tail's last lines an error's `Display` shows.
const ERROR_TAIL_LINES: usize = 10;

/// Shorthand for `Result<T, childguard::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
