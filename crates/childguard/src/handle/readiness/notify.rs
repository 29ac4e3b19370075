//! [`Ready::Notify`](super::Ready::Notify): a private `NOTIFY_SOCKET`, as systemd gives a
//! `Type=notify` service (see `sd_notify(3)`).
//!
//! The socket is a Unix datagram socket bound in a new 0700 directory (made as for socket
//! activation, removed on close); the child gets its path in `NOTIFY_SOCKET`. Each datagram is
//! a newline-separated list of `KEY=VALUE`; we act on `READY=1`, `STATUS=…`, `ERRNO=…`,
//! `STOPPING=1` and `EXTEND_TIMEOUT_USEC=…`, and ignore the rest (as systemd ignores keys it
//! does not know).
//!
//! Who may speak: [`NotifyAccess`] (`notify_access.rs`): the kernel
//! attaches the sender to every datagram at send time — its pid (`SO_PASSCRED`, not forgeable
//! by an unprivileged sender) and a pidfd of it (`SO_PASSPIDFD`, Linux 6.5) — and the sender
//! is judged by what the kernel says of that process, not of whoever holds its pid number
//! when we read. Datagrams from anyone else, and malformed ones, are ignored and noted.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use super::notify_access::{Access, CgroupScope, Sender};
use super::NotifyAccess;
use crate::base::socket_dir::{base_dir, check_path_fits, make_private_dir, SocketDir};
use crate::close::report::NotifyReport;
use crate::sys::peer;

/// The environment variable naming the socket.
pub(crate) const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
/// systemd reads at most this much of a datagram; longer ones are ignored as malformed.
const MAX_DATAGRAM: usize = 4096;
/// How many ignored datagrams the report describes (the rest are counted).
const NOTED_MAX: usize = 8;

/// The socket, its directory, and what the child said on it.
#[derive(Debug)]
pub(crate) struct NotifySocket {
    fd: OwnedFd,
    dir: Option<SocketDir>,
    /// Who may speak.
    access: Access,
    /// [`Builder::notify_extend_max`](crate::Builder::notify_extend_max).
    extend_max: Duration,
    pub(crate) ready: bool,
    /// `ERRNO=`: the child reports a failure.
    pub(crate) errno: Option<i32>,
    /// The latest `STATUS=`.
    pub(crate) status: Option<String>,
    /// When `STOPPING=1` came.
    stopping_at: Option<Instant>,
    /// Every accepted extension: when it came, for how long.
    extensions: Vec<(Instant, Duration)>,
    ignored: Vec<String>,
    ignored_count: usize,
}

/// Before the fork: the directory, the bound socket, and `NOTIFY_SOCKET` in `command`.
///
/// `owner`: a child that runs as another user (`CommandExt::uid`/`gid`) must be able to reach
/// the socket; the directory (still 0700) and the socket file are then chowned to it.
pub(crate) fn prepare(
    command: &mut Command,
    runtime_dir: Option<&Path>,
    owner: Option<(u32, u32)>,
    access: NotifyAccess,
) -> io::Result<Prepared> {
    // Absolute: libsystemd's sd_notify refuses a NOTIFY_SOCKET that starts with neither `/`
    // nor `@`, and the child may chdir before it sends.
    let base = base_dir(runtime_dir)?;
    check_path_fits(&base)?;
    let dir = make_private_dir(&base)?;
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    let addr = SocketAddrUnix::new(dir.path())?;
    rustix::net::bind(&fd, &addr).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("bind {}: {e}", dir.path().display()),
        )
    })?;
    rustix::net::sockopt::set_socket_passcred(&fd, true)?;
    // Linux 6.5: a pidfd of the sender with each datagram. Older kernels (ENOPROTOOPT) keep
    // the pid alone; see `notify_access.rs` for what each can then tell.
    let _ = peer::set_pass_pidfd(fd.as_fd());
    if let Some((uid, gid)) = owner {
        let dir_path = dir.path().parent().unwrap_or(dir.path());
        for path in [dir_path, dir.path()] {
            std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("chown {} to {uid}:{gid}: {e}", path.display()),
                )
            })?;
        }
    }
    command.env(NOTIFY_SOCKET, dir.path());
    Ok(Prepared { fd, dir, access })
}

/// What [`prepare`] made, waiting for the child's pid.
#[derive(Debug)]
pub(crate) struct Prepared {
    fd: OwnedFd,
    dir: SocketDir,
    access: NotifyAccess,
}

impl Prepared {
    /// Now that the child exists: its pid, and its cgroup (`(directory, path in the
    /// hierarchy)`) when contained.
    pub(crate) fn for_child(
        self,
        child: u32,
        cgroup: Option<(&Path, &str)>,
        extend_max: Duration,
    ) -> NotifySocket {
        let access = Access {
            rule: self.access,
            child,
            cgroup: cgroup.map(|(dir, path)| CgroupScope::new(dir, path)),
        };
        NotifySocket::new(self.fd, Some(self.dir), access, extend_max)
    }
}

impl NotifySocket {
    fn new(
        fd: OwnedFd,
        dir: Option<SocketDir>,
        access: Access,
        extend_max: Duration,
    ) -> NotifySocket {
        NotifySocket {
            fd,
            dir,
            access,
            extend_max,
            ready: false,
            errno: None,
            status: None,
            stopping_at: None,
            extensions: Vec::new(),
            ignored: Vec::new(),
            ignored_count: 0,
        }
    }

    /// The socket, to poll for readability.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// How far `EXTEND_TIMEOUT_USEC=` may extend a wait beyond its grace.
    pub(crate) fn extend_max(&self) -> Duration {
        self.extend_max
    }

    /// Reads every datagram waiting (never blocks). Returns the end of the latest extension
    /// asked for by one of them, if any.
    pub(crate) fn receive(&mut self) -> Option<Instant> {
        let mut extended = None;
        let mut data = [0u8; MAX_DATAGRAM + 1];
        loop {
            let received = match peer::recv_with_sender(self.fd.as_fd(), &mut data) {
                Ok(received) => received,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // WouldBlock: nothing left. Anything else: nothing we can read now either.
                Err(_) => return extended,
            };
            let sender = Sender {
                pid: received.pid,
                pidfd: received.pidfd,
            };
            crate::failpoint::before_notify_sender_check(sender.pid, self.access.child);
            let verdict = self.access.judge(&sender);
            // Closes the sender's pidfd now, not with the next datagram.
            drop(sender);
            let bytes = received.len.min(data.len());
            let until = match verdict {
                Ok(pid) => self.accept(pid, &data[..bytes], received.len),
                Err(why) => {
                    self.ignore(why);
                    None
                }
            };
            if let Some(until) = until {
                extended = Some(until);
            }
        }
    }

    /// One datagram (`data`, of `len` bytes sent) from `sender`, who may speak: acts on it if
    /// it is well-formed, else notes why not.
    fn accept(&mut self, sender: u32, data: &[u8], len: usize) -> Option<Instant> {
        if len > MAX_DATAGRAM {
            self.ignore(format!(
                "a datagram from pid {sender} of {len} bytes, longer than {MAX_DATAGRAM}"
            ));
            return None;
        }
        let Ok(text) = std::str::from_utf8(data) else {
            self.ignore(format!("a datagram from pid {sender} that is not UTF-8"));
            return None;
        };
        let now = Instant::now();
        let mut extended = None;
        for line in text.split('\n').filter(|l| !l.is_empty()) {
            let Some((key, value)) = line.split_once('=') else {
                self.ignore(format!("a line without '=' from pid {sender}: {line:?}"));
                continue;
            };
            match key {
                "READY" if value == "1" => self.ready = true,
                "STATUS" => self.status = Some(value.to_owned()),
                "STOPPING" if value == "1" => {
                    self.stopping_at.get_or_insert(now);
                }
                "ERRNO" => match value.parse::<i32>() {
                    Ok(errno) if errno > 0 => self.errno = Some(errno),
                    _ => self.ignore(format!("ERRNO={value:?} from pid {sender}")),
                },
                "EXTEND_TIMEOUT_USEC" => match value.parse::<u64>() {
                    Ok(usec) => {
                        let wait = Duration::from_micros(usec);
                        self.extensions.push((now, wait));
                        extended = Some(crate::core::wait::later(now, wait));
                    }
                    Err(_) => {
                        self.ignore(format!("EXTEND_TIMEOUT_USEC={value:?} from pid {sender}"))
                    }
                },
                // MAINPID, WATCHDOG, RELOADING, FDSTORE, … and unknown keys: not ours to act on.
                _ => {}
            }
        }
        extended
    }

    /// What was ignored so far (the first [`NOTED_MAX`]), for a ready timeout's message.
    pub(crate) fn ignored(&self) -> &[String] {
        &self.ignored
    }

    fn ignore(&mut self, why: String) {
        self.ignored_count += 1;
        if self.ignored.len() < NOTED_MAX {
            self.ignored.push(why);
        }
    }

    /// What goes into the close report, heard so far (the socket stays open).
    pub(crate) fn report(&self, close_started: Instant) -> NotifyReport {
        let since = |at: Instant| at.saturating_duration_since(close_started);
        let mut notes = self.ignored.clone();
        if self.ignored_count > notes.len() {
            notes.push(format!("{} more ignored", self.ignored_count - notes.len()));
        }
        NotifyReport {
            status: self.status.clone(),
            stopping: self.stopping_at.map(since),
            extensions: self
                .extensions
                .iter()
                .filter(|(at, _)| *at >= close_started)
                .map(|&(at, asked)| crate::close::report::Extension {
                    at: since(at),
                    asked,
                })
                .collect(),
            ignored: notes,
        }
    }

    /// What goes into the close report; the socket and its directory are removed.
    pub(crate) fn finish(mut self, close_started: Instant) -> NotifyReport {
        let mut report = self.report(close_started);
        if let Some(dir) = self.dir.take() {
            let path = dir.path().display().to_string();
            if let Err(e) = dir.remove() {
                report.ignored.push(format!("removing {path}: {e}"));
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket_for(child: u32) -> NotifySocket {
        let (fd, _) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        let access = Access {
            rule: NotifyAccess::All,
            child,
            cgroup: None,
        };
        NotifySocket::new(fd, None, access, Duration::ZERO)
    }

    fn send(s: &mut NotifySocket, data: &[u8]) -> Option<Instant> {
        s.accept(s.access.child, data, data.len())
    }

    #[test]
    fn well_formed_messages_are_acted_on() {
        let me = std::process::id();
        let mut s = socket_for(me);
        assert_eq!(send(&mut s, b"STATUS=starting\nMAINPID=1\n"), None);
        assert_eq!(s.status.as_deref(), Some("starting"));
        assert!(!s.ready);
        assert!(send(&mut s, b"READY=1\nSTATUS=up").is_none());
        assert!(s.ready && s.status.as_deref() == Some("up"));
        let before = Instant::now();
        let until = send(&mut s, b"EXTEND_TIMEOUT_USEC=2000000").unwrap();
        assert!(until >= before + Duration::from_secs(2));
        send(&mut s, b"ERRNO=2");
        assert_eq!(s.errno, Some(2));
        assert!(s.ignored.is_empty(), "{:?}", s.ignored);
    }

    #[test]
    fn bad_input_is_ignored_and_noted_never_a_panic() {
        let me = std::process::id();
        let mut s = socket_for(me);
        send(&mut s, b"READY");
        send(&mut s, b"\xff\xfe=1");
        send(&mut s, b"ERRNO=-3\nERRNO=x");
        send(
            &mut s,
            b"EXTEND_TIMEOUT_USEC=-1\nEXTEND_TIMEOUT_USEC=99999999999999999999",
        );
        // Truncated by the receive buffer: the sent length decides.
        s.accept(me, &[b'x'; MAX_DATAGRAM], MAX_DATAGRAM + 1);
        assert!(!s.ready, "no bad datagram may make it ready");
        assert_eq!(s.errno, None);
        assert_eq!(s.ignored_count, 7, "{:?}", s.ignored);
        assert!(
            s.ignored[6].contains(&format!("of {} bytes, longer than", MAX_DATAGRAM + 1)),
            "{:?}",
            s.ignored
        );
        s.ignore("filler 1".into());
        s.ignore("filler 2".into());
        // An absurd but well-formed extension saturates instead of overflowing.
        let until = send(
            &mut s,
            &format!("EXTEND_TIMEOUT_USEC={}", u64::MAX).into_bytes(),
        );
        assert!(until.is_some_and(|u| u > Instant::now() + Duration::from_secs(3600)));
        let report = s.finish(Instant::now());
        assert_eq!(report.ignored.len(), NOTED_MAX + 1, "{:?}", report.ignored);
        assert_eq!(report.ignored[NOTED_MAX], "1 more ignored");
    }

    #[test]
    fn datagrams_are_read_with_their_sender_and_judged() {
        // A real socket pair: the kernel attaches our pid (and pidfd) to what we send.
        let (ours, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        rustix::net::sockopt::set_socket_passcred(&ours, true).unwrap();
        peer::set_pass_pidfd(ours.as_fd()).expect("SO_PASSPIDFD (Linux 6.5)");
        let me = std::process::id();
        let parent = crate::process::group::parent_of(me).unwrap();
        let stranger = Access {
            rule: NotifyAccess::All,
            child: parent,
            cgroup: None,
        };
        let mut s = NotifySocket::new(ours, None, stranger, Duration::ZERO);
        rustix::net::send(&theirs, b"READY=1", rustix::net::SendFlags::empty()).unwrap();
        s.receive();
        assert!(s.ready, "we descend from our parent: {:?}", s.ignored);
        s.access.child = u32::MAX;
        s.ready = false;
        rustix::net::send(&theirs, b"READY=1", rustix::net::SendFlags::empty()).unwrap();
        s.receive();
        assert!(!s.ready);
        assert!(
            s.ignored[0].starts_with(&format!("a datagram from pid {me}, not a descendant")),
            "{:?}",
            s.ignored
        );
    }
}
