//! [`Ready::Connect`](super::Ready::Connect): the server accepts a connection on a TCP address
//! or a Unix socket path.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where [`Ready::Connect`](super::Ready::Connect) connects.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectTo {
    /// A TCP address, e.g. `127.0.0.1:6379`.
    Tcp(SocketAddr),
    /// A Unix stream socket's path.
    Unix(PathBuf),
}

impl From<SocketAddr> for ConnectTo {
    fn from(addr: SocketAddr) -> ConnectTo {
        ConnectTo::Tcp(addr)
    }
}

impl From<PathBuf> for ConnectTo {
    fn from(path: PathBuf) -> ConnectTo {
        ConnectTo::Unix(path)
    }
}

impl From<&std::path::Path> for ConnectTo {
    fn from(path: &std::path::Path) -> ConnectTo {
        ConnectTo::Unix(path.to_path_buf())
    }
}

impl std::fmt::Display for ConnectTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectTo::Tcp(addr) => write!(f, "tcp {addr}"),
            ConnectTo::Unix(path) => write!(f, "unix {}", path.display()),
        }
    }
}

/// The first pause between attempts; it doubles up to [`MAX_PAUSE`].
pub(crate) const FIRST_PAUSE: Duration = Duration::from_micros(100);
/// The longest pause between attempts: 0.5 ms, so readiness is seen within ~0.5 ms of the
/// server's `listen` (an attempt on a local socket costs ~10-20 µs: ≤ 4 % of a CPU meanwhile).
pub(crate) const MAX_PAUSE: Duration = Duration::from_micros(500);

impl ConnectTo {
    /// One attempt, bounded by `deadline` for a TCP connect that does not answer at once.
    /// `Ok(true)`: accepted (the connection is closed at once); `Ok(false)`: not yet (refused,
    /// no such socket yet, timed out); `Err`: a failure no retry will fix.
    pub(crate) fn try_once(&self, deadline: Instant) -> io::Result<bool> {
        let attempt = match self {
            ConnectTo::Tcp(addr) => {
                let left = deadline.saturating_duration_since(Instant::now());
                let bound = left.clamp(Duration::from_millis(1), Duration::from_secs(1));
                TcpStream::connect_timeout(addr, bound).map(drop)
            }
            ConnectTo::Unix(path) => UnixStream::connect(path).map(drop),
        };
        match attempt {
            Ok(()) => Ok(true),
            Err(e) if is_not_yet(&e) => Ok(false),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("connecting to {self}: {e}"),
            )),
        }
    }
}

/// Errors that mean "not listening yet".
pub(super) fn is_not_yet(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::ECONNREFUSED
                | libc::ENOENT
                | libc::EAGAIN
                | libc::ETIMEDOUT
                | libc::ECONNRESET
                | libc::EINTR
                | libc::ECONNABORTED
        )
    ) || e.kind() == io::ErrorKind::TimedOut
}
