//! [`Error`]: the one error type of childguard.

use std::fmt;
use std::io;

/// What went wrong, on which program. Converts into [`io::Error`] (keeping the OS error kind).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    program: Option<String>,
    source: io::Error,
}

/// The step that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Creating the socket or socket directory before spawning.
    Socket,
    /// `fork`/`exec` of the program failed (not found, not executable, out of fds …).
    Spawn,
    /// Obtaining or verifying the child's pidfd.
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
    /// Connecting to a socket-activated server.
    Connect,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, program: Option<&str>, source: io::Error) -> Error {
        Error {
            kind,
            program: program.map(str::to_owned),
            source,
        }
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
            ErrorKind::Pidfd => "opening a pidfd for",
            ErrorKind::Signal => "signalling",
            ErrorKind::Wait => "waiting for",
            ErrorKind::SigchldIgnored => "cannot supervise",
            ErrorKind::Config => "invalid configuration for",
            ErrorKind::Connect => "connecting to",
        };
        match &self.program {
            Some(p) => write!(f, "{what} `{p}`: {}", self.source),
            None => write!(f, "{what} socket: {}", self.source),
        }
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

/// Shorthand for `Result<T, childguard::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
