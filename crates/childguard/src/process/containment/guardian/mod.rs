//! The guardian: one process per supervising process that kills every contained cgroup this
//! process still owns when it dies first, even by `SIGKILL`, and removes them
//! ([`Builder::exit_with_parent`](crate::Builder::exit_with_parent) with
//! [`Containment`](crate::Containment)).
//!
//! `PR_SET_PDEATHSIG` reaches the direct child only; its `setsid`'d workers and daemons would
//! live on. The guardian is what takes the rest.
//!
//! # The process
//!
//! Started lazily, at the first contained `exit_with_parent` spawn of this process (a process
//! that never contains a child never has one), by a double fork without exec
//! ([`crate::sys::guardian::fork_guardian`]): it needs no binary on the host (no `/bin/sh`),
//! is not our child (no zombie, no `SIGCHLD` for the host: the intermediate is cloned with exit
//! signal 0 and reaped at once), has no parent-death signal (`fork` clears it; it does not
//! depend on the thread that forked it, which may end at once), runs in a session and
//! process group of its own, ignores `SIGINT`/`SIGTERM`/`SIGHUP`/`SIGPIPE` and every other
//! catchable signal, sits in `/`, and closes every fd it inherited (`close_range(2)`) but its
//! two: its end of a `SOCK_SEQPACKET` socketpair and a pidfd of the host. It is named
//! `cgguard/<host pid>`. After the fork it runs only async-signal-safe code ([`serve`]): raw
//! system calls, no allocation (its table and buffers are `mmap`ed), no lock.
//!
//! One per process ([`crate::core::per_process`]): a child made by `fork()` without `exec` that
//! contains children of its own starts its own guardian; the parent's is never used by it
//! (its copies of the parent's registrations are forgotten, never dismissed).
//!
//! # The protocol
//!
//! Host → guardian, on the host's end (close-on-exec, only ours), each message one
//! `send(MSG_NOSIGNAL | MSG_DONTWAIT)`: the host never gets `SIGPIPE` (a C host whose
//! `SIGPIPE` is at its default would die of it) and never blocks (a `SIGSTOP`ped guardian
//! does not stop a close).
//! - `A id path` — guard this cgroup: sent *before* the child is spawned into it.
//! - `R id` — forget it: sent when the close has removed the cgroup.
//!
//! Guardian → host, once, when set up: `H pid` with a pidfd of itself (`SCM_RIGHTS`), or `F
//! errno` if its setup failed. The host waits at most [`HELLO_WAIT`] for it.
//!
//! The guardian `poll`s its socket and the host's pidfd. When the host is gone — the pidfd is
//! readable (the whole process exited: works even while a `fork()`ed copy of the host still
//! holds the socket's other end), or the socket reads EOF (every copy of the host's end is
//! closed: the host exited where `pidfd_open` is missing, or it `exec`ed) — it first reads
//! every message still queued, then, for every cgroup still registered, writes `1` to
//! `cgroup.kill` (where that file is missing, Linux < 5.14: freeze → `SIGKILL` each member of
//! the subtree → thaw, as `kill.rs` does), then removes it bottom-up with the cgroups the
//! server made inside it (as `trim.rs` does), retrying while the killed tree exits, for at
//! most 10 s; then it exits. At a normal close the host sends `R` and the guardian lives on
//! for the next child.
//!
//! # Races closed
//!
//! - **No unguarded moment**: the add is in the kernel's socket queue before the child
//!   exists, and the guardian drains the queue before it acts on the host's death. So a host
//!   killed between `send` and `spawn`, or right after, has its child killed: anything the
//!   child forks while we die is born inside the cgroup and dies with it (`cgroup.kill` is
//!   atomic against forks; a frozen cgroup cannot fork).
//! - **`fork()` without `exec`** in the host holds a copy of the host's socket end, which used
//!   to delay the EOF the old per-child `/bin/sh` guardian waited for until that copy exec'd
//!   or exited: the pidfd ends the wait at the host's own death.
//! - **A dead guardian** (killed by hand, the OOM killer) cannot hurt the host: sends fail with
//!   `EPIPE` without a signal, and the host also sees it through the guardian's pidfd. A close
//!   then succeeds (the loss is traced, and noted in the report); the next contained
//!   `exit_with_parent` spawn starts a new guardian and hands it every cgroup still
//!   registered, so they are unguarded from the death until that spawn.
//!
//! # Bounds
//!
//! The table holds [`table::MAX_ENTRIES`] cgroups and [`table::ARENA`] bytes of paths; both
//! sides apply the same rule ([`table::Table::fits`]), so the host knows without asking: an
//! add that does not fit fails the spawn with an error saying so (with
//! [`Containment::BestEffort`](crate::Containment::BestEffort) the child then runs
//! uncontained, as for any containment error). A guardian that does not read (stopped) makes
//! sends fail with `EAGAIN` once the socket buffer is full: an add then fails its spawn the
//! same way; a remove is kept and sent, in order, before the next message.
//!
//! Races left: the tree lives on for the moment between our death and the guardian's kill
//! (the kernel tearing us down, then the guardian being scheduled: milliseconds); a guardian
//! killed before us protects nothing until the next spawn replaces it (the leader still gets
//! its `PDEATHSIG`); a host that is itself a child subreaper (`PR_SET_CHILD_SUBREAPER`) gets
//! the guardian back as its child when the intermediate exits.

pub(crate) mod commands;
pub(crate) mod serve;
pub(crate) mod table;
mod walk;

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendFlags, SocketFlags,
    SocketType,
};

use crate::core::per_process::PerProcess;
use table::Table;

/// How long a start waits for the guardian's hello (it is up within milliseconds; this bound
/// only keeps a spawn from waiting forever on a guardian that was stopped at birth).
pub(crate) const HELLO_WAIT: Duration = Duration::from_secs(10);

/// The send buffer asked for the host's end (capped by `net.core.wmem_max` without root): room
/// for thousands of queued messages before a guardian that does not read makes sends fail.
const SEND_BUFFER: usize = 4 << 20;

/// This process's guardian client.
static CLIENT: PerProcess<Client> = PerProcess::new();

#[derive(Debug, Default)]
struct Client {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    link: Option<Link>,
    /// The guardian's table as it is once it has read everything sent (and the removes not
    /// sent yet): id → path.
    registered: BTreeMap<u64, Vec<u8>>,
    /// Bytes of the paths in `registered`.
    bytes: usize,
    /// Removes that found the socket full, sent in order before anything else.
    unsent: VecDeque<u64>,
    next_id: u64,
}

/// The running guardian.
#[derive(Debug)]
struct Link {
    sock: OwnedFd,
    pid: u32,
    /// A pidfd of the guardian (none where `pidfd_open(2)` is missing).
    pidfd: Option<OwnedFd>,
}

/// A cgroup in the guardian's table, until [`Registration::dismiss`] (or its drop).
#[derive(Debug)]
pub(crate) struct Registration {
    id: u64,
    /// The process that registered it: only it may dismiss it.
    owner: u32,
    done: bool,
}

fn lock(client: &Client) -> MutexGuard<'_, State> {
    // Nothing panics while holding it; a poisoned state is still consistent.
    client.state.lock().unwrap_or_else(|p| p.into_inner())
}

fn client() -> &'static Client {
    CLIENT
        .get()
        .unwrap_or_else(|| match CLIENT.publish(Client::default()) {
            Ok(ours) => ours,
            Err((_, theirs)) => theirs,
        })
}

/// Has the guardian guard the cgroup at `dir` from now on, starting the guardian first if
/// this process has none (or its guardian died). Call before the child is spawned into it.
pub(crate) fn register(dir: &Path) -> io::Result<Registration> {
    let path = dir.as_os_str().as_bytes();
    if path.len() > table::MAX_PATH || path.contains(&0) || commands::is_command(path) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: too long a path for the guardian (at most {} bytes)",
                dir.display(),
                table::MAX_PATH
            ),
        ));
    }
    register_entry(&dir.display().to_string(), path)
}

/// Adds `path` (a cgroup's path, or an encoded command) to the guardian's table; `what` names
/// it in errors.
pub(super) fn register_entry(what: &str, path: &[u8]) -> io::Result<Registration> {
    let client = client();
    let mut msg = Vec::with_capacity(9 + path.len());
    // A guardian that died since it last read is replaced once.
    for _ in 0..2 {
        let mut st = lock(client);
        if st.link.as_ref().is_some_and(|l| !l.alive()) {
            st.lost("found dead at a spawn");
        }
        if st.link.is_none() {
            // Started without the lock held: a close meanwhile (its `R`) is not held up by
            // the fork and the wait for the hello.
            drop(st);
            let link = Link::start()?;
            st = lock(client);
            // Another thread's start may have won: ours then reads EOF, with nothing
            // registered, and exits.
            if st.link.is_none() {
                st.install(link)?;
            }
        }
        if !Table::fits(st.registered.len(), st.bytes, path.len()) {
            return Err(io::Error::other(format!(
                "{}: the guardian's table is full ({} cgroups, {} bytes of paths; at most {} \
                 and {})",
                what,
                st.registered.len(),
                st.bytes,
                table::MAX_ENTRIES,
                table::ARENA
            )));
        }
        let id = st.next_id;
        msg.clear();
        msg.push(table::ADD);
        msg.extend_from_slice(&id.to_le_bytes());
        msg.extend_from_slice(path);
        match st.send_in_order(&msg) {
            Ok(()) => {
                st.next_id += 1;
                st.bytes += path.len();
                st.registered.insert(id, path.to_vec());
                return Ok(Registration {
                    id,
                    owner: std::process::id(),
                    done: false,
                });
            }
            Err(Errno::AGAIN) => {
                let pid = st.link.as_ref().map_or(0, |l| l.pid);
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "{}: the guardian (pid {pid}) does not read its socket (stopped?): \
                         it cannot be guarded",
                        what
                    ),
                ));
            }
            Err(_) => st.lost("its socket is closed (at a spawn)"),
        }
    }
    Err(io::Error::other(format!(
        "{}: the guardian died as soon as it was started",
        what
    )))
}

impl Registration {
    /// Takes the cgroup out of the guardian's table (the close removed it). Never blocks and
    /// never raises a signal; a guardian that is gone is not an error: the note that comes
    /// back says so, for the close report.
    pub(crate) fn dismiss(mut self) -> Option<String> {
        self.dismiss_once()
    }

    fn dismiss_once(&mut self) -> Option<String> {
        // A copy inherited through fork() is the parent's registration, in the parent's guardian.
        if std::mem::replace(&mut self.done, true) || self.owner != std::process::id() {
            return None;
        }
        let mut st = lock(CLIENT.get()?);
        if !st.registered.contains_key(&self.id) {
            return None;
        }
        let gone = |st: &mut State, why: &str| {
            let note =
                format!("the guardian was gone ({why}): this cgroup was not guarded since then");
            st.forget(self.id);
            Some(note)
        };
        if st.link.as_ref().is_some_and(|l| !l.alive()) {
            st.lost("found dead at a close");
        }
        if st.link.is_none() {
            return gone(&mut st, "killed or crashed");
        }
        let mut msg = [0u8; 9];
        msg[0] = table::REMOVE;
        msg[1..].copy_from_slice(&self.id.to_le_bytes());
        match st.send_in_order(&msg) {
            Ok(()) => {
                st.forget(self.id);
                None
            }
            // Not read (stopped): kept, sent before the next message. The cgroup is removed
            // already, so a guardian acting on it meanwhile finds nothing to kill.
            Err(Errno::AGAIN) => {
                st.unsent.push_back(self.id);
                None
            }
            Err(_) => {
                st.lost("its socket is closed (at a close)");
                gone(&mut st, "its socket is closed")
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = self.dismiss_once();
    }
}

impl State {
    /// Takes `link` as this process's guardian, and hands it every cgroup still registered
    /// (those of a guardian that died).
    fn install(&mut self, link: Link) -> io::Result<()> {
        crate::base::trace::guardian_started(link.pid, self.registered.len());
        self.link = Some(link);
        // Removes not sent went to a guardian that is gone; those cgroups are removed.
        for id in std::mem::take(&mut self.unsent) {
            self.forget(id);
        }
        let adds: Vec<Vec<u8>> = self
            .registered
            .iter()
            .map(|(id, path)| {
                let mut msg = vec![table::ADD];
                msg.extend_from_slice(&id.to_le_bytes());
                msg.extend_from_slice(path);
                msg
            })
            .collect();
        for msg in adds {
            if let Err(e) = self.send(&msg) {
                self.lost("its socket is closed (handing it the registered cgroups)");
                return Err(io::Error::other(format!(
                    "the new guardian does not take messages: {}",
                    io::Error::from(e)
                )));
            }
        }
        Ok(())
    }

    /// Sends the removes kept back, then `msg`, each without blocking.
    fn send_in_order(&mut self, msg: &[u8]) -> Result<(), Errno> {
        while let Some(&id) = self.unsent.front() {
            let mut remove = [0u8; 9];
            remove[0] = table::REMOVE;
            remove[1..].copy_from_slice(&id.to_le_bytes());
            self.send(&remove)?;
            self.unsent.pop_front();
            self.forget(id);
        }
        self.send(msg)
    }

    /// One `send(MSG_NOSIGNAL | MSG_DONTWAIT)` of one message.
    fn send(&self, msg: &[u8]) -> Result<(), Errno> {
        let link = self.link.as_ref().ok_or(Errno::PIPE)?;
        loop {
            match rustix::net::send(&link.sock, msg, SendFlags::NOSIGNAL | SendFlags::DONTWAIT) {
                Ok(_) => return Ok(()),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn forget(&mut self, id: u64) {
        if let Some(path) = self.registered.remove(&id) {
            self.bytes -= path.len();
        }
    }

    /// The guardian is gone: let go of it (the next spawn starts another).
    fn lost(&mut self, why: &str) {
        if let Some(link) = self.link.take() {
            crate::base::trace::guardian_lost(link.pid, self.registered.len(), why);
        }
    }
}

impl Link {
    /// Makes the socketpair, forks the guardian and waits for its hello.
    fn start() -> io::Result<Link> {
        let failed = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("starting the guardian ({what}): {e}"))
        };
        let (sock, theirs) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| failed("socketpair", e.into()))?;
        if rustix::net::sockopt::set_socket_send_buffer_size_force(&sock, SEND_BUFFER).is_err() {
            let _ = rustix::net::sockopt::set_socket_send_buffer_size(&sock, SEND_BUFFER);
        }
        let me = rustix::process::getpid();
        let host_pidfd = rustix::process::pidfd_open(me, rustix::process::PidfdFlags::empty()).ok();
        let mut name = [0u8; 16];
        let text = format!("cgguard/{}", me.as_raw_nonzero());
        let n = text.len().min(15);
        name[..n].copy_from_slice(&text.as_bytes()[..n]);
        let args = serve::Args {
            sock: theirs.as_raw_fd(),
            host_pidfd: host_pidfd.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
            name,
            close_limit: crate::sys::guardian::close_loop_limit(),
            pretend_no_kill: crate::failpoint::check(crate::failpoint::Point::CgroupKill).is_err(),
        };
        crate::sys::guardian::fork_guardian(&args, serve::run).map_err(|e| failed("fork", e))?;
        // Only the guardian holds its end now (and the pidfd of us).
        drop(theirs);
        drop(host_pidfd);
        Link::hello(sock)
    }

    /// Waits (at most [`HELLO_WAIT`]) for `H pid` + pidfd, or `F errno`.
    fn hello(sock: OwnedFd) -> io::Result<Link> {
        let deadline = Instant::now() + HELLO_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("starting the guardian: no word from it within {HELLO_WAIT:?}"),
                ));
            }
            let timeout = rustix::time::Timespec {
                tv_sec: left.as_secs() as i64,
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&sock, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) | Err(Errno::INTR) => continue,
                Ok(_) => break,
                Err(e) => return Err(e.into()),
            }
        }
        let mut msg = [0u8; 8];
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &sock,
            &mut [io::IoSliceMut::new(&mut msg)],
            &mut control,
            RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("starting the guardian: {e}"),
            )
        })?;
        let mut pidfd = None;
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = message {
                for fd in fds {
                    pidfd.get_or_insert(fd);
                }
            }
        }
        let word = |m: &[u8]| u32::from_le_bytes([m[1], m[2], m[3], m[4]]);
        match (got.bytes, msg[0]) {
            (5, table::HELLO) => Ok(Link {
                sock,
                pid: word(&msg),
                pidfd,
            }),
            (5, table::FAILED) => Err(io::Error::from_raw_os_error(word(&msg) as i32))
                .map_err(|e| io::Error::new(e.kind(), format!("the guardian's setup failed: {e}"))),
            _ => Err(io::Error::other(
                "starting the guardian: it exited before saying it was ready",
            )),
        }
    }

    /// Whether the guardian still runs (its pidfd is not readable). Without a pidfd, assumed:
    /// a send then tells.
    fn alive(&self) -> bool {
        let Some(pidfd) = &self.pidfd else {
            return true;
        };
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        !matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
    }
}
