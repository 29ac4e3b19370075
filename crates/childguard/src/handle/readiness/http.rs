//! [`Ready::Http`](super::Ready::Http): an HTTP/1.1 `GET` over TCP or a Unix socket answers
//! with a 2xx status (or the one asked for).
//!
//! A minimal request of ours, not a client crate: readiness needs one `GET` with
//! `Connection: close` and the status line of the answer — no TLS, no redirects, no body, no
//! keep-alive, no chunked decoding — and every wait of it must be the library's one wait
//! primitive (the child's pidfd and the caller's interrupt in the same `poll` as the socket),
//! which a client crate's own blocking or async I/O would not give. The whole client is a
//! non-blocking `connect`, one `send` of the request, and `recv` until the first line's end,
//! bounded in size ([`MAX_STATUS_LINE`]) and in time (the check's
//! [`attempt_timeout`](HttpCheck::attempt_timeout)).

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketAddrUnix, SocketType};

use super::probe::{bound_text, ReadyParseError};
use crate::core::wait::later;

/// How long one attempt may take, from `connect` to the status line, by default: 1 s. A
/// server that accepted (the kernel completes the handshake as soon as it `listen`s) but does
/// not answer is asked again after it.
pub const DEFAULT_HTTP_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);

/// The most bytes read for the status line (`HTTP/1.1 200 OK`); an answer whose first line is
/// longer is malformed.
pub const MAX_STATUS_LINE: usize = 1024;

/// What [`Ready::Http`](super::Ready::Http) asks and when it counts as ready; parsed from a
/// URL ([`HttpCheck::parse`], [`FromStr`]).
///
/// URLs:
/// - `http://HOST[:PORT][/PATH][?QUERY]` — TCP; `HOST` an IP address (`127.0.0.1`, `[::1]`)
///   or a name, resolved once when the URL is parsed (the first address); port 80 by default.
///   `Host:` is sent as written.
/// - `http+unix://SOCKET[/PATH]` — the Unix socket whose path, percent-encoded, is the host
///   (`http+unix://%2Frun%2Fapp.sock/health` is `GET /health` on `/run/app.sock`), the
///   form of `requests-unixsocket` and of docker clients. `Host: localhost` is sent.
/// - `https://…` is refused: no TLS here (check the plain port, or [`Ready::connect`](super::Ready::connect) the TLS
///   one).
///
/// Ready when the status is 2xx, or exactly the one given with [`HttpCheck::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpCheck {
    url: String,
    to: Target,
    host: String,
    path: String,
    status: Option<u16>,
    attempt_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// How one attempt went.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The status asked for.
    Ready,
    /// Nothing listens yet (refused, no socket file): retried soon, the server is not bothered.
    NotListening(String),
    /// Something answered, but not the status asked for (or not HTTP, or not in time): what.
    NotYet(String),
    /// The ready timeout passed while the attempt still waited (connecting, or for the
    /// answer): what it was waiting for. Says less than a finished attempt, so the timeout's
    /// message keeps the one before it.
    Cut(String),
    /// A failure no retry fixes (e.g. `EACCES` on the socket).
    Failed(std::io::Error),
}

impl HttpCheck {
    /// Parses `url` (see [`HttpCheck`] for the forms). A name is resolved here.
    ///
    /// # Errors
    ///
    /// A [`ReadyParseError`] naming the URL and what is wrong with it.
    pub fn parse(url: &str) -> Result<HttpCheck, ReadyParseError> {
        let bad = |why: &str| ReadyParseError::new(url, why);
        let (unix, rest) = if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("http+unix://") {
            (true, rest)
        } else if url.starts_with("https://") {
            return Err(bad(
                "no TLS: only plain http:// and http+unix:// are spoken (wait for the TLS port with a connect instead)",
            ));
        } else {
            return Err(bad(
                "expected http://HOST[:PORT]/PATH or http+unix://%2Fpath%2Fto.sock/PATH",
            ));
        };
        let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(cut);
        let tail = tail.split('#').next().unwrap_or("");
        let path = match tail {
            "" => "/".to_owned(),
            t if t.starts_with('?') => format!("/{t}"),
            t => t.to_owned(),
        };
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(bad(
                "the path has a space or a control character (percent-encode it)",
            ));
        }
        if authority.is_empty() {
            return Err(bad("no host (or, for http+unix://, no socket path)"));
        }
        if authority.contains('@') {
            return Err(bad("user information (user@host) is not supported"));
        }
        let (to, host) = if unix {
            let decoded = percent_decode(authority)
                .ok_or_else(|| bad("a bad %-escape in the socket path"))?;
            if !decoded.starts_with('/') {
                return Err(bad(
                    "the socket path must be absolute and percent-encoded: http+unix://%2Frun%2Fapp.sock/PATH",
                ));
            }
            (Target::Unix(PathBuf::from(decoded)), "localhost".to_owned())
        } else {
            (
                Target::Tcp(resolve(authority).map_err(|why| bad(&why))?),
                authority.to_owned(),
            )
        };
        Ok(HttpCheck {
            url: url.to_owned(),
            to,
            host,
            path,
            status: None,
            attempt_timeout: DEFAULT_HTTP_ATTEMPT_TIMEOUT,
        })
    }

    /// Ready on exactly this status (e.g. 204, or 401 for a server whose health page needs a
    /// login) instead of any 2xx.
    pub fn status(mut self, status: u16) -> HttpCheck {
        self.status = Some(status);
        self
    }

    /// How long one attempt may take (default [`DEFAULT_HTTP_ATTEMPT_TIMEOUT`]); at least 1 ms.
    pub fn attempt_timeout(mut self, timeout: Duration) -> HttpCheck {
        self.attempt_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The URL as given.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The status asked for: `None` means any 2xx.
    pub fn expected_status(&self) -> Option<u16> {
        self.status
    }

    fn wanted(&self, status: u16) -> bool {
        match self.status {
            Some(s) => s == status,
            None => (200..300).contains(&status),
        }
    }

    /// One `GET`, bounded by `deadline` and the attempt timeout. `wait(readable, writable,
    /// until)` is the caller's one wait (the child's pidfd, the interrupt): its error (the
    /// child exited, the caller interrupted) ends the attempt at once.
    pub(crate) fn attempt<E>(
        &self,
        deadline: Instant,
        mut wait: impl FnMut(&[BorrowedFd<'_>], &[BorrowedFd<'_>], Instant) -> Result<(), E>,
    ) -> Result<Answer, E> {
        let started = Instant::now();
        let until = deadline.min(later(started, self.attempt_timeout));
        let bound = || bound_text(started, self.attempt_timeout, until);
        let cut = until < later(started, self.attempt_timeout);
        let late = || {
            let what = format!("no status line within {}", bound());
            if cut {
                Answer::Cut(what)
            } else {
                Answer::NotYet(what)
            }
        };
        let socket = match self.socket() {
            Ok(socket) => socket,
            Err(e) => {
                return Ok(Answer::Failed(std::io::Error::new(
                    e.kind(),
                    format!("a socket for {}: {e}", self.url),
                )))
            }
        };
        // A non-blocking connect: done at once (a Unix socket), or in progress until the
        // socket is writable; connecting again then says how it went (`EISCONN`: done).
        loop {
            match self.connect_on(&socket) {
                Ok(()) | Err(Errno::ISCONN) => break,
                Err(Errno::INPROGRESS | Errno::ALREADY | Errno::INTR) => {}
                Err(e) => return Ok(self.connect_failed(e)),
            }
            if Instant::now() >= until {
                let what = format!("connect not done within {}", bound());
                return Ok(if cut {
                    Answer::Cut(what)
                } else {
                    Answer::NotListening(what)
                });
            }
            wait(&[], &[socket.as_fd()], until)?;
        }
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: childguard\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            self.path, self.host
        );
        let mut sent = 0;
        while sent < request.len() {
            match rustix::net::send(&socket, &request.as_bytes()[sent..], no_sigpipe()) {
                Ok(n) => sent += n,
                Err(Errno::AGAIN | Errno::INTR) => {
                    if Instant::now() >= until {
                        return Ok(late());
                    }
                    wait(&[], &[socket.as_fd()], until)?;
                }
                Err(e) => return Ok(Answer::NotYet(format!("sending the request: {e}"))),
            }
        }
        let mut line = Vec::with_capacity(128);
        let mut buf = [0u8; 512];
        loop {
            if let Some(end) = line.iter().position(|&b| b == b'\n') {
                line.truncate(end);
                return Ok(self.judge(&line));
            }
            if line.len() >= MAX_STATUS_LINE {
                return Ok(Answer::NotYet(format!(
                    "no status line in the first {MAX_STATUS_LINE} bytes: {}",
                    quoted(&line)
                )));
            }
            let room = (MAX_STATUS_LINE - line.len()).min(buf.len());
            match rustix::net::recv(&socket, &mut buf[..room], RecvFlags::empty()) {
                Ok((0, _)) if line.is_empty() => {
                    return Ok(Answer::NotYet(
                        "the connection was closed without an answer".into(),
                    ))
                }
                Ok((0, _)) => return Ok(self.judge(&line)),
                Ok((n, _)) => line.extend_from_slice(&buf[..n]),
                Err(Errno::AGAIN | Errno::INTR) => {
                    if Instant::now() >= until {
                        return Ok(late());
                    }
                    wait(&[socket.as_fd()], &[], until)?;
                }
                Err(e) => return Ok(Answer::NotYet(format!("reading the answer: {e}"))),
            }
        }
    }

    /// `HTTP/1.x NNN reason`: ready if NNN is wanted.
    fn judge(&self, line: &[u8]) -> Answer {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text = String::from_utf8_lossy(line);
        let mut words = text.splitn(3, ' ');
        let version = words.next().unwrap_or("");
        let code = words.next().unwrap_or("");
        let status = match (
            version.starts_with("HTTP/"),
            code.len(),
            code.parse::<u16>(),
        ) {
            (true, 3, Ok(status)) => status,
            _ => return Answer::NotYet(format!("not an HTTP status line: {}", quoted(line))),
        };
        if self.wanted(status) {
            Answer::Ready
        } else {
            Answer::NotYet(format!("answered {}", quoted(line)))
        }
    }

    fn socket(&self) -> rustix::io::Result<OwnedFd> {
        let family = match &self.to {
            Target::Tcp(SocketAddr::V4(_)) => AddressFamily::INET,
            Target::Tcp(SocketAddr::V6(_)) => AddressFamily::INET6,
            Target::Unix(_) => AddressFamily::UNIX,
        };
        #[cfg(not(target_vendor = "apple"))]
        {
            use rustix::net::SocketFlags;
            let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
            rustix::net::socket_with(family, SocketType::STREAM, flags, None)
        }
        // macOS has neither SOCK_NONBLOCK/SOCK_CLOEXEC nor MSG_NOSIGNAL: the flags are set
        // right after, and SO_NOSIGPIPE keeps a send to a closed peer from raising SIGPIPE.
        #[cfg(target_vendor = "apple")]
        {
            let socket = rustix::net::socket(family, SocketType::STREAM, None)?;
            rustix::io::fcntl_setfd(&socket, rustix::io::FdFlags::CLOEXEC)?;
            let flags = rustix::fs::fcntl_getfl(&socket)?;
            rustix::fs::fcntl_setfl(&socket, flags | rustix::fs::OFlags::NONBLOCK)?;
            rustix::net::sockopt::set_socket_nosigpipe(&socket, true)?;
            Ok(socket)
        }
    }

    fn connect_on(&self, socket: &OwnedFd) -> rustix::io::Result<()> {
        match &self.to {
            Target::Tcp(addr) => rustix::net::connect(socket, addr),
            Target::Unix(path) => {
                rustix::net::connect(socket, &SocketAddrUnix::new(path.as_path())?)
            }
        }
    }

    fn connect_failed(&self, e: Errno) -> Answer {
        let e = std::io::Error::from(e);
        if super::connect::is_not_yet(&e) {
            Answer::NotListening(format!("connecting: {e}"))
        } else {
            Answer::Failed(std::io::Error::new(
                e.kind(),
                format!("connecting for {}: {e}", self.url),
            ))
        }
    }
}

impl FromStr for HttpCheck {
    type Err = ReadyParseError;
    fn from_str(url: &str) -> Result<HttpCheck, ReadyParseError> {
        HttpCheck::parse(url)
    }
}

impl fmt::Display for HttpCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(status) => write!(f, "HTTP {status} from GET {}", self.url),
            None => write!(f, "an HTTP 2xx from GET {}", self.url),
        }
    }
}

/// `HOST[:PORT]` → the first address (IP literals without a lookup).
fn resolve(authority: &str) -> Result<SocketAddr, String> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or("an unclosed [ in the host")?;
        match after {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':').ok_or("junk after ]")?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        None | Some("") => 80,
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| format!("port {p:?} is not a number from 0 to 65535"))?,
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    if host.is_empty() {
        return Err("no host".into());
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host:?} has no address"))
}

/// `%2F` → `/`; `None` for a bad escape or a result that is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// At most 200 bytes of what came, quoted.
fn quoted(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(200)];
    let more = if bytes.len() > shown.len() { "…" } else { "" };
    format!("{:?}{more}", String::from_utf8_lossy(shown))
}

#[cfg(test)]
mod tests;

/// `MSG_NOSIGNAL` where it exists (on macOS the socket has `SO_NOSIGPIPE` instead).
fn no_sigpipe() -> SendFlags {
    #[cfg(not(target_vendor = "apple"))]
    return SendFlags::NOSIGNAL;
    #[cfg(target_vendor = "apple")]
    return SendFlags::empty();
}
