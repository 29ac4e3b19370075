//! [`Ready::Notify`](super::Ready::Notify): a private `NOTIFY_SOCKET`, as systemd gives a
//! `Type=notify` service (see `sd_notify(3)`).
//!
//! The socket is a Unix datagram socket bound in a new 0700 directory (made as for socket
//! activation, removed on close); the child gets its path in `NOTIFY_SOCKET`. Each datagram is
//! a newline-separated list of `KEY=VALUE`; we act on `READY=1`, `STATUS=…`, `ERRNO=…`,
//! `STOPPING=1` and `EXTEND_TIMEOUT_USEC=…`, and ignore the rest (as systemd ignores keys it
//! does not know).
//!
//! Who may speak: `SO_PASSCRED` makes the kernel attach the sender's pid (`SCM_CREDENTIALS`,
//! not forgeable by an unprivileged sender) to every datagram. A datagram counts only if that
//! pid is the child or one of its descendants (its parent chain in `/proc` reaches the child);
//! anything else — a stray process that found the path, a sender gone before we looked — is
//! ignored and noted. Race: a descendant that exits right after sending can no longer be
//! traced and is ignored; postgres and redis send from their main process, which is the child.

use std::io::{self, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::net::{
    recvmsg, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketAddrUnix,
    SocketFlags, SocketType,
};

use crate::activation::{self, SocketDir};
use crate::report::NotifyReport;

/// The environment variable naming the socket.
pub(crate) const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
/// systemd reads at most this much of a datagram; longer ones are ignored as malformed.
const MAX_DATAGRAM: usize = 4096;
/// How many ignored datagrams the report describes (the rest are counted).
const NOTED_MAX: usize = 8;
/// How far up the parent chain a sender is looked for.
const MAX_DEPTH: usize = 64;

/// The socket, its directory, and what the child said on it.
#[derive(Debug)]
pub(crate) struct NotifySocket {
    fd: OwnedFd,
    dir: Option<SocketDir>,
    child: u32,
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
) -> io::Result<Prepared> {
    let base = runtime_dir.map_or_else(activation::default_base, Path::to_path_buf);
    activation::check_path_fits(&base)?;
    let dir = activation::make_private_dir(&base)?;
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
    Ok(Prepared { fd, dir })
}

/// What [`prepare`] made, waiting for the child's pid.
#[derive(Debug)]
pub(crate) struct Prepared {
    fd: OwnedFd,
    dir: SocketDir,
}

impl Prepared {
    pub(crate) fn for_child(self, child: u32, extend_max: Duration) -> NotifySocket {
        NotifySocket::new(self.fd, Some(self.dir), child, extend_max)
    }
}

impl NotifySocket {
    fn new(fd: OwnedFd, dir: Option<SocketDir>, child: u32, extend_max: Duration) -> NotifySocket {
        NotifySocket {
            fd,
            dir,
            child,
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
            let mut space =
                [MaybeUninit::uninit(); rustix::cmsg_space!(ScmCredentials(1), ScmRights(8))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let mut iov = [IoSliceMut::new(&mut data)];
            let received = recvmsg(
                &self.fd,
                &mut iov,
                &mut control,
                RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
            );
            let msg = match received {
                Ok(msg) => msg,
                Err(rustix::io::Errno::INTR) => continue,
                // AGAIN: nothing left. Anything else: nothing we can read now either.
                Err(_) => return extended,
            };
            let mut sender = None;
            for message in control.drain() {
                match message {
                    RecvAncillaryMessage::ScmCredentials(cred) => {
                        sender = Some(cred.pid.as_raw_nonzero().get() as u32);
                    }
                    // Fds sent with FDSTORE=1: we keep none; dropping them closes them.
                    RecvAncillaryMessage::ScmRights(fds) => fds.for_each(drop),
                    _ => {}
                }
            }
            let bytes = msg.bytes.min(data.len());
            if let Some(until) = self.accept(sender, &data[..bytes]) {
                extended = Some(until);
            }
        }
    }

    /// One datagram from `sender`: acts on it if it is well-formed and from the child or a
    /// descendant, else notes why not.
    fn accept(&mut self, sender: Option<u32>, data: &[u8]) -> Option<Instant> {
        let Some(sender) = sender else {
            self.ignore("a datagram without credentials".into());
            return None;
        };
        if !self.is_ours(sender) {
            self.ignore(format!(
                "a datagram from pid {sender}, not the child or a descendant"
            ));
            return None;
        }
        if data.len() > MAX_DATAGRAM {
            self.ignore(format!(
                "a datagram from pid {sender} longer than {MAX_DATAGRAM} bytes"
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
                        extended = Some(crate::climb::later(now, wait));
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

    fn ignore(&mut self, why: String) {
        self.ignored_count += 1;
        if self.ignored.len() < NOTED_MAX {
            self.ignored.push(why);
        }
    }

    /// Whether `pid` is the child or a descendant of it (its parent chain reaches the child).
    fn is_ours(&self, pid: u32) -> bool {
        let mut pid = pid;
        for _ in 0..MAX_DEPTH {
            if pid == self.child {
                return true;
            }
            match crate::process::group::parent_of(pid) {
                Some(parent) if parent > 1 => pid = parent,
                _ => return false,
            }
        }
        false
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
                .map(|&(at, asked)| crate::report::Extension {
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

/// Waits for the next change: the socket readable, `other` fds readable, or `deadline`.
pub(crate) fn poll_with(
    notify: BorrowedFd<'_>,
    other: &[BorrowedFd<'_>],
    deadline: Instant,
) -> io::Result<()> {
    crate::close_control::poll_readable(notify, other, deadline).map(drop)
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
        NotifySocket::new(fd, None, child, Duration::ZERO)
    }

    #[test]
    fn well_formed_messages_are_acted_on() {
        let me = std::process::id();
        let mut s = socket_for(me);
        assert_eq!(s.accept(Some(me), b"STATUS=starting\nMAINPID=1\n"), None);
        assert_eq!(s.status.as_deref(), Some("starting"));
        assert!(!s.ready);
        assert!(s.accept(Some(me), b"READY=1\nSTATUS=up").is_none());
        assert!(s.ready && s.status.as_deref() == Some("up"));
        let before = Instant::now();
        let until = s.accept(Some(me), b"EXTEND_TIMEOUT_USEC=2000000").unwrap();
        assert!(until >= before + Duration::from_secs(2));
        s.accept(Some(me), b"ERRNO=2");
        assert_eq!(s.errno, Some(2));
        assert!(s.ignored.is_empty(), "{:?}", s.ignored);
    }

    #[test]
    fn bad_input_is_ignored_and_noted_never_a_panic() {
        let me = std::process::id();
        let mut s = socket_for(me);
        s.accept(Some(me), b"READY");
        s.accept(Some(me), b"\xff\xfe=1");
        s.accept(Some(me), b"ERRNO=-3\nERRNO=x");
        s.accept(
            Some(me),
            b"EXTEND_TIMEOUT_USEC=-1\nEXTEND_TIMEOUT_USEC=99999999999999999999",
        );
        s.accept(None, b"READY=1");
        s.accept(Some(1), b"READY=1");
        s.accept(Some(me), &[b'x'; MAX_DATAGRAM + 1]);
        assert!(!s.ready, "no bad datagram may make it ready");
        assert_eq!(s.errno, None);
        assert_eq!(s.ignored_count, 9, "{:?}", s.ignored);
        // An absurd but well-formed extension saturates instead of overflowing.
        let until = s.accept(
            Some(me),
            &format!("EXTEND_TIMEOUT_USEC={}", u64::MAX).into_bytes(),
        );
        assert!(until.is_some_and(|u| u > Instant::now() + Duration::from_secs(3600)));
        let report = s.finish(Instant::now());
        assert_eq!(report.ignored.len(), NOTED_MAX + 1, "{:?}", report.ignored);
        assert_eq!(report.ignored[NOTED_MAX], "1 more ignored");
    }

    #[test]
    fn a_stranger_is_not_the_child() {
        // Our own parent is neither us nor a descendant of us.
        let me = std::process::id();
        let s = socket_for(me);
        assert!(s.is_ours(me));
        let parent = crate::process::group::parent_of(me).unwrap();
        assert!(!s.is_ours(parent));
    }
}
