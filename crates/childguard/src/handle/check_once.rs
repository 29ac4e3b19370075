//! [`Ready::check_once`]: one attempt at a readiness condition from outside any spawn — for a
//! caller watching a server it did not spawn with [`Builder::ready`](crate::Builder::ready)
//! (`childguard init`'s `--ready-file`, a health check). The same attempts as the spawn's wait
//! makes (`readiness/http.rs`, the exec probe's spawn), without a child of ours to watch.

use std::io;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::readiness::{Answer, ConnectTo, Ready};
use super::spawn::spawn_probe;
use crate::core::wait::{later, Wait};

/// How long one TCP connect of [`Ready::check_once`] may take.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(1);

impl Ready {
    /// One attempt at this condition, now: `Ok(true)` if it holds.
    ///
    /// - [`Ready::Connect`]: one connect (a TCP one bounded by 1 s), closed at once.
    /// - [`Ready::Http`]: one `GET`, bounded by its attempt timeout.
    /// - [`Ready::Exec`]: the probe run once (its own process group, output captured), bounded
    ///   by its attempt timeout; past it the probe is killed and reaped, and the answer is
    ///   `false`.
    /// - [`Ready::any`] / [`Ready::all`]: their parts, in order, stopping at the first that
    ///   decides.
    ///
    /// # Errors
    ///
    /// [`Ready::Notify`], [`Ready::Output`] and [`Ready::Accepted`] cannot be tested from
    /// outside: they need the spawn (the `NOTIFY_SOCKET` it makes, the output it captures, the
    /// activation socket) — `ErrorKind::Unsupported`, saying so. An attempt that no retry fixes (an HTTP socket we may not use, a probe that
    /// cannot be started) is its error.
    pub fn check_once(&self) -> io::Result<bool> {
        match self {
            Ready::Connect(ConnectTo::Tcp(addr)) => {
                Ok(TcpStream::connect_timeout(addr, CONNECT_ATTEMPT).is_ok())
            }
            Ready::Connect(ConnectTo::Unix(path)) => Ok(UnixStream::connect(path).is_ok()),
            Ready::Http(check) => {
                let answer = check
                    .attempt(Instant::now() + Duration::from_secs(3600), |r, w, until| {
                        Wait::until(until).fds(r).writable(w).run().map(|_| ())
                    })?;
                match answer {
                    Answer::Ready => Ok(true),
                    Answer::NotListening(_) | Answer::NotYet(_) | Answer::Cut(_) => Ok(false),
                    Answer::Failed(e) => Err(e),
                }
            }
            Ready::Exec(check) => {
                let mut probe = spawn_probe(check.command()).map_err(|e| {
                    io::Error::other(format!("starting the probe for {check}: {e}"))
                })?;
                let until = later(Instant::now(), check.timeout());
                let status = probe
                    .wait_timeout(until.saturating_duration_since(Instant::now()))
                    .map_err(|e| {
                        io::Error::other(format!("waiting for the probe of {check}: {e}"))
                    })?;
                // Exited: reaped already; overran: killed (`KILL:1s`) and reaped.
                let _ = probe.close();
                Ok(status.is_some_and(|s| s.success()))
            }
            Ready::Any(parts) => {
                for part in parts {
                    if part.check_once()? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            Ready::All(parts) => {
                for part in parts {
                    if !part.check_once()? {
                        return Ok(false);
                    }
                }
                Ok(!parts.is_empty())
            }
            Ready::Notify | Ready::Output(_) | Ready::Accepted => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{} cannot be checked from outside the spawn: it needs the spawn's {}",
                    self.describe(),
                    match self {
                        Ready::Notify => "NOTIFY_SOCKET",
                        Ready::Output(_) => "captured output",
                        _ => "activation socket",
                    }
                ),
            )),
        }
    }
}
