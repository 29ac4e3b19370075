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
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use super::notify_access::{Access, CgroupScope, Sender, MAX_DATAGRAM};
use super::watchdog;
use super::NotifyAccess;
use crate::base::signal::Signal;
use crate::base::socket_dir::{check_path_fits, make_private_dir, SocketDir};
use crate::base::trusted_dir::open_base;
use crate::close::report::NotifyReport;
use crate::sys::peer;

/// The environment variable naming the socket.
pub(crate) const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
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
    /// `EXIT_STATUS=`: the exit status the child says it will have (or had).
    pub(crate) exit_status: Option<i32>,
    /// `RELOADING=1` came and no `READY=1` since (systemd's `Type=notify-reload`).
    reloading: bool,
    /// How many `READY=1` came after a `RELOADING=1`: each ends one reload.
    pub(crate) reloads_done: u64,
    /// The latest `MONOTONIC_USEC=` (sent with `RELOADING=1`).
    pub(crate) monotonic_usec: Option<u64>,
    /// [`Builder::watchdog`](crate::Builder::watchdog), once armed: the loop reads the socket
    /// and queues the datagrams here (`watchdog.rs`).
    watchdog: Option<Arc<watchdog::Shared>>,
    /// A `WATCHDOG_USEC=` heard before the watchdog was armed: its first interval (`Some(None)`:
    /// 0, off).
    watchdog_asked: Option<Option<Duration>>,
    /// `MAINPID=`, accepted (`notify/main_pid.rs`).
    main: Option<main_pid::MainPid>,
    /// The last accepted `MAINPID=` (kept after it exited), for the report.
    main_pid_now: Option<u32>,
    /// What became of each `MAINPID=` and the rungs sent to it.
    main_notes: Vec<String>,
    /// Every accepted extension: when it came, for how long.
    extensions: Vec<(Instant, Duration)>,
    ignored: Vec<String>,
    ignored_count: usize,
}

/// Before the fork: the directory, the bound socket, and `NOTIFY_SOCKET` in `command`.
///
/// `owner`: a child that runs as another user (`CommandExt::uid`/`gid`) must be able to reach
/// the socket; the socket file is then given to it, and the directory (still ours) becomes
/// 0711 so that it can pass.
pub(crate) fn prepare(
    command: &mut Command,
    runtime_dir: Option<&Path>,
    owner: Option<(u32, u32)>,
    access: NotifyAccess,
) -> io::Result<Prepared> {
    // Absolute and resolved: libsystemd's sd_notify refuses a NOTIFY_SOCKET that starts with
    // neither `/` nor `@`, and the child may chdir before it sends.
    let base = open_base(runtime_dir)?;
    check_path_fits(base.path())?;
    let dir = make_private_dir(base)?;
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    // Bound through the directory's fd (`/proc/self/fd/N/sock`): the socket lands in the
    // directory we hold, whatever became of its name; then checked there.
    let addr = SocketAddrUnix::new(dir.local_path())?;
    rustix::net::bind(&fd, &addr).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("bind {}: {e}", dir.path().display()),
        )
    })?;
    dir.check_socket()?;
    rustix::net::sockopt::set_socket_passcred(&fd, true)?;
    // Linux 6.5: a pidfd of the sender with each datagram. Older kernels (ENOPROTOOPT) keep
    // the pid alone; see `notify_access.rs` for what each can then tell.
    let _ = peer::set_pass_pidfd(fd.as_fd());
    if let Some((uid, gid)) = owner {
        // The socket only: the directory stays ours (0711), never another user's.
        dir.give_socket_to(uid, gid)?;
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
        cgroup: Option<(BorrowedFd<'_>, &str)>,
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
            exit_status: None,
            reloading: false,
            reloads_done: 0,
            monotonic_usec: None,
            watchdog: None,
            watchdog_asked: None,
            main: None,
            main_pid_now: None,
            main_notes: Vec::new(),
            extensions: Vec::new(),
            ignored: Vec::new(),
            ignored_count: 0,
        }
    }

    /// The fd to poll for readability: the socket, or — from the watchdog's arming until the
    /// close takes the socket back — the bell the event loop rings after queueing a datagram.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match &self.watchdog {
            Some(shared) if shared.loop_reads() => shared.fd(),
            _ => self.fd.as_fd(),
        }
    }

    /// Hands the socket to the event loop's watchdog (see `watchdog.rs`): from now on, until
    /// the close takes it back, the loop reads it and this socket reads the loop's queue.
    pub(crate) fn arm_watchdog(
        &mut self,
        interval: Duration,
        spawned: Instant,
        on_miss: watchdog::OnMiss,
    ) -> io::Result<()> {
        // What came before the loop reads the socket: a `WATCHDOG_USEC=` sets the interval.
        self.receive();
        let socket = self.fd.try_clone()?;
        let shared = watchdog::start(
            socket,
            self.access.clone(),
            self.watchdog_asked.unwrap_or(Some(interval)),
            self.access.child,
            spawned,
            on_miss,
        )?;
        self.watchdog = Some(shared);
        Ok(())
    }

    /// The close began: no watchdog miss from now on, and a miss's climb under way stops.
    /// Returns that climb's last signal and when it was sent (see `watchdog::Shared::stop`).
    pub(crate) fn stop_watchdog(&self) -> Option<(Signal, Instant)> {
        self.watchdog.as_ref().and_then(|shared| shared.stop())
    }

    /// Forgets a `RELOADING=1` heard before a reload we start (`ChildHandle::reload`).
    pub(crate) fn reload_begins(&mut self) {
        self.reloading = false;
    }

    /// Whether a `RELOADING=1` came and no `READY=1` since.
    pub(crate) fn reloading(&self) -> bool {
        self.reloading
    }

    /// The watchdog's miss, if one happened.
    pub(crate) fn watchdog_missed(&self) -> Option<watchdog::WatchdogMiss> {
        self.watchdog.as_ref().and_then(|w| w.missed())
    }

    /// How far `EXTEND_TIMEOUT_USEC=` may extend a wait beyond its grace.
    pub(crate) fn extend_max(&self) -> Duration {
        self.extend_max
    }

    /// Reads every datagram waiting (never blocks). Returns the end of the latest extension
    /// asked for by one of them, if any.
    pub(crate) fn receive(&mut self) -> Option<Instant> {
        let mut extended = None;
        if let Some(shared) = self.watchdog.clone() {
            // Whether the loop still reads, asked before the take: once the close took the
            // socket back, what the loop queued before is all it will queue, and the rest is
            // read below, in order (`watchdog.rs`, *last words lost in the hand-back*).
            let loop_reads = shared.loop_reads();
            for q in shared.take() {
                let until = match q.verdict {
                    Ok(pid) => self.accept(pid, &q.data, q.len, q.at),
                    Err(why) => {
                        self.ignore(why);
                        None
                    }
                };
                extended = until.or(extended);
            }
            if loop_reads {
                return extended;
            }
        }
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
                Ok(pid) => self.accept(pid, &data[..bytes], received.len, Instant::now()),
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
    fn accept(&mut self, sender: u32, data: &[u8], len: usize, now: Instant) -> Option<Instant> {
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
        let mut extended = None;
        for line in text.split('\n').filter(|l| !l.is_empty()) {
            let Some((key, value)) = line.split_once('=') else {
                self.ignore(format!("a line without '=' from pid {sender}: {line:?}"));
                continue;
            };
            match key {
                "READY" if value == "1" => {
                    self.ready = true;
                    if std::mem::take(&mut self.reloading) {
                        self.reloads_done += 1;
                    }
                }
                "RELOADING" if value == "1" => self.reloading = true,
                "MAINPID" => self.main_pid(sender, value),
                "MONOTONIC_USEC" => match value.parse::<u64>() {
                    Ok(usec) => self.monotonic_usec = Some(usec),
                    Err(_) => self.ignore(format!("MONOTONIC_USEC={value:?} from pid {sender}")),
                },
                "EXIT_STATUS" => match value.parse::<i32>() {
                    Ok(status) if (0..=255).contains(&status) => self.exit_status = Some(status),
                    _ => self.ignore(format!("EXIT_STATUS={value:?} from pid {sender}")),
                },
                "WATCHDOG" | "WATCHDOG_USEC" => {
                    // Acted on by the event loop as it reads (`watchdog.rs`); noted here if bad,
                    // kept for the arming if it came before.
                    match watchdog::parse(key, value) {
                        Some(Err(bad)) => self.ignore(format!("{bad} from pid {sender}")),
                        Some(Ok(watchdog::Message::Interval(interval))) => {
                            self.watchdog_asked = Some(interval);
                        }
                        _ => {}
                    }
                }
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
                // FDSTORE, … and unknown keys: not ours to act on. BARRIER=1: its fd
                // was closed as the datagram was read (`peer::recv_with_sender`), which is the
                // answer `sd_notify_barrier(3)` waits for.
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
        let mut watchdog: Vec<String> = Vec::new();
        if let Some(shared) = &self.watchdog {
            watchdog.extend(shared.missed().map(|m| m.to_string()));
            watchdog.extend(shared.notes());
        }
        NotifyReport {
            status: self.status.clone(),
            errno: self.errno,
            exit_status: self.exit_status,
            watchdog,
            main_pid: self.main_pid_now,
            main: self.main_notes.clone(),
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

impl Drop for NotifySocket {
    fn drop(&mut self) {
        if let Some(shared) = self.watchdog.take() {
            shared.drop_socket();
        }
    }
}

mod main_pid;
#[cfg(test)]
mod tests;
