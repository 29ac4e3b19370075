//! Spawning from a small fd table: when this process holds many fds, our spawn runs on a
//! thread whose fd table holds only what the child needs.
//!
//! Why: a child gets a copy of its parent's fd table, and its `execve` closes every
//! close-on-exec entry of that copy one by one. Both cost in proportion to the fds open: here
//! a `posix_spawn` + exec of `true` took 0.57 ms with no fd open, 1.11 ms with 5,000 (a C
//! loop, `posix_spawn` + `waitpid`, socketpairs held). A supervisor of 1,000 servers holds
//! ~5,000 fds (each server's socket, pidfd, capture pipes, `cgroup.events`), so each spawn
//! paid ~0.5 ms for fds the child never sees; std's spawn pays it alike.
//!
//! How: one long-lived thread, started the first time a spawn's fds are numbered from
//! [`SMALL_TABLE_FROM`] up, has a table of its own (`unshare(CLONE_FILES)`: `sys/fd_table.rs`),
//! holding its socket to us and `/dev/null` placeholders on 0–3. A spawn sends it the fds its
//! child needs (stdio, the cgroup to be born in, v1 `cgroup.procs`, the activation listener)
//! over that socket (`SCM_RIGHTS`), and the plan; the thread renumbers the plan, makes the
//! same `clone3` spawn (`sys/own_child.rs`), and sends back the pidfd — born with the child,
//! as on the caller's thread: the pid is never only a number. The child's fds 0–2 that the
//! Command leaves inherited are sent too (ours, at this moment), so a process that redirected
//! its stdout since the thread started gives its children the new one; one that is closed or
//! close-on-exec here is a close-on-exec placeholder there: closed in the child alike.
//!
//! Cost: a round trip to the thread (two `sendmsg`/`recvmsg`, two wake-ups), tens of µs; below
//! [`SMALL_TABLE_FROM`] the spawn stays on the caller's thread.
//!
//! Races avoided:
//! - The thread's end of the socket is in our table until the thread has its own copy: we
//!   close ours only once the thread said it has unshared (else its end would be closed
//!   under it, in the table it still shared).
//! - Two spawns at once: one exchange at a time (a lock around send and reply), so a reply
//!   never reaches the other spawn.
//! - `fork()` without `exec`: the thread does not exist in the child; its start belongs to the
//!   process that made it ([`PerProcess`]), a forked child starts its own.
//!
//! The parent-death signal follows the thread that made the child: this one lives as long
//! as the process, as the spawner thread of `exit_with_parent` does (`spawner.rs`).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex, PoisonError};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::core::per_process::PerProcess;
use crate::sys::{self, ChildPlan};

/// From this fd number up, a spawn is made from the small table: the fds a spawn has just
/// made take the lowest free numbers, so numbers this high mean a table about this full. At
/// ~0.1 µs per fd copied and closed, 512 fds cost about what the round trip to the thread
/// does.
pub(crate) const SMALL_TABLE_FROM: RawFd = 512;

/// The most fds one spawn sends: the cgroup, 3 stdio, 3 v1 `cgroup.procs`, the listener.
const MOST_FDS: usize = 8;

/// What the thread is asked: the plan, and which of its fd fields the fds sent fill, in the
/// order of [`Slot`].
struct Job {
    plan: ChildPlan,
    slots: Vec<Slot>,
}

/// Where a sent fd goes in the plan.
#[derive(Clone, Copy)]
enum Slot {
    Cgroup,
    Stdio(usize),
    V1Procs(usize),
    Listener,
}

/// What the thread answers (the pidfd comes over the socket).
struct Reply {
    plan: ChildPlan,
    cloned: io::Result<u32>,
}

/// Our side of the thread's socket and channels.
struct Exchange {
    socket: OwnedFd,
    jobs: mpsc::Sender<Job>,
    replies: mpsc::Receiver<Reply>,
    /// Set when an exchange went wrong half-way (a reply's pidfd not received): what is left
    /// in the socket could be taken for the next spawn's answer, so no spawn uses it again.
    broken: bool,
}

/// The thread of this process, once started.
static THREAD: PerProcess<Mutex<Exchange>> = PerProcess::new();

/// Set once the kernel refused the thread its own table: no small table in this process.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether a spawn with these fds is worth making from the small table.
pub(crate) fn worth_it(plan: &ChildPlan, cgroup: Option<BorrowedFd<'_>>) -> bool {
    let mut highest = cgroup.map_or(-1, |fd| fd.as_raw_fd());
    for &fd in plan.stdio.iter().chain(&plan.v1_procs) {
        highest = highest.max(fd);
    }
    highest = highest.max(plan.exec.listener().unwrap_or(-1));
    highest >= SMALL_TABLE_FROM
}

/// What became of a spawn sent to the small-table thread.
pub(crate) enum Outcome {
    /// Made there (or failed there, as it would have here): the plan, with the step reached.
    Made(ChildPlan, io::Result<(u32, OwnedFd)>),
    /// No thread to be had (it could not start, or is gone): nothing was sent; the plan is
    /// given back, for a spawn from the caller's own table.
    NoThread(ChildPlan),
    /// The thread went away during the exchange, with the plan: the spawn failed.
    Lost(io::Error),
}

/// [`sys::spawn_child`], made on the small-table thread.
pub(crate) fn spawn_child(cgroup: Option<BorrowedFd<'_>>, plan: ChildPlan) -> Outcome {
    let Some(exchange) = thread() else {
        return Outcome::NoThread(plan);
    };
    let (slots, fds) = what_to_send(cgroup, &plan);
    let mut exchange = exchange.lock().unwrap_or_else(PoisonError::into_inner);
    if exchange.broken {
        return Outcome::NoThread(plan);
    }
    let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|fd| fd.as_fd()).collect();
    // The fds first: a thread that is gone refuses them (EPIPE) while the plan is still ours.
    if send_fds(&exchange.socket, &borrowed).is_err() {
        return Outcome::NoThread(plan);
    }
    drop(fds);
    let gone = || io::Error::other("childguard's small-table spawner thread is gone");
    if exchange.jobs.send(Job { plan, slots }).is_err() {
        return Outcome::Lost(gone());
    }
    let pidfd = receive_fds(&exchange.socket).map(|mut fds| fds.pop());
    let Ok(reply) = exchange.replies.recv() else {
        return Outcome::Lost(gone());
    };
    let cloned = match (reply.cloned, pidfd) {
        (Ok(pid), Ok(Some(pidfd))) => Ok((pid, pidfd)),
        (Err(e), _) => Err(e),
        // Unreachable but for a failed `recvmsg`: the child exists and its pidfd did not come.
        // It is our child and not reaped, so its pid is still its own: a pidfd by pid names it
        // (never dropped unreaped). The exchange is not used again.
        (Ok(pid), _) => {
            exchange.broken = true;
            pidfd_by_pid(pid).map(|pidfd| (pid, pidfd))
        }
    };
    Outcome::Made(reply.plan, cloned)
}

/// `pidfd_open(2)` of our unreaped child `pid`.
fn pidfd_by_pid(pid: u32) -> io::Result<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid as i32)
        .ok_or_else(|| io::Error::other(format!("the small-table spawner sent pid {pid}")))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// The fds the child needs (copies, close-on-exec), with their slots. Inherited stdio is sent
/// as it is now: an fd that is closed or close-on-exec here is not sent (the thread's
/// close-on-exec placeholder stands there: closed in the child alike).
fn what_to_send(cgroup: Option<BorrowedFd<'_>>, plan: &ChildPlan) -> (Vec<Slot>, Vec<OwnedFd>) {
    let mut slots = Vec::with_capacity(MOST_FDS);
    let mut fds = Vec::with_capacity(MOST_FDS);
    let mut send = |slot: Slot, fd: Option<OwnedFd>| {
        if let Some(fd) = fd {
            slots.push(slot);
            fds.push(fd);
        }
    };
    send(
        Slot::Cgroup,
        cgroup.and_then(|fd| fd.try_clone_to_owned().ok()),
    );
    for i in 0..3 {
        let fd = match plan.stdio[i] {
            -1 if sys::is_inheritable(i as RawFd) => i as RawFd,
            -1 => continue,
            fd => fd,
        };
        send(Slot::Stdio(i), sys::dup_open_fd(fd));
    }
    for i in 0..3 {
        send(Slot::V1Procs(i), sys::dup_open_fd(plan.v1_procs[i]));
    }
    send(
        Slot::Listener,
        plan.exec.listener().and_then(sys::dup_open_fd),
    );
    (slots, fds)
}

/// The thread, started on first use; `None` if it cannot be had. A start that fails for
/// want of a thread (`EAGAIN`: `RLIMIT_NPROC`, `pids.max`) is tried again on the next use; one
/// refused by the kernel (`unshare` or `close_range` failing: a seccomp profile, a kernel
/// before 5.9) is remembered for the process.
fn thread() -> Option<&'static Mutex<Exchange>> {
    if let Some(exchange) = THREAD.get() {
        return Some(exchange);
    }
    if REFUSED.load(Ordering::Relaxed) {
        return None;
    }
    let (ours, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .ok()?;
    let (jobs, job_rx) = mpsc::channel();
    let (reply_tx, replies) = mpsc::channel();
    let (ready_tx, ready) = mpsc::channel();
    let theirs_number = theirs.as_raw_fd();
    std::thread::Builder::new()
        .name("childguard-small-table".into())
        .spawn(move || match sys::unshare_keeping(theirs_number) {
            Ok(socket) => {
                let _ = ready_tx.send(true);
                serve(&socket, &job_rx, &reply_tx);
            }
            Err(_) => {
                let _ = ready_tx.send(false);
            }
        })
        .ok()?;
    let unshared = ready.recv().unwrap_or(false);
    // Only now: the thread has its own copy of its end (see the module's races).
    drop(theirs);
    if !unshared {
        REFUSED.store(true, Ordering::Relaxed);
        return None;
    }
    let exchange = Mutex::new(Exchange {
        socket: ours,
        jobs,
        replies,
        broken: false,
    });
    // Lost a race with another first use: ours ends (its socket closes, its recvmsg ends).
    Some(
        THREAD
            .publish(exchange)
            .unwrap_or_else(|(_, theirs)| theirs),
    )
}

/// The thread's loop: one job per message, until our side closes.
fn serve(socket: &OwnedFd, jobs: &mpsc::Receiver<Job>, replies: &mpsc::Sender<Reply>) {
    loop {
        let Ok(fds) = receive_fds(socket) else {
            return;
        };
        let Ok(job) = jobs.recv() else {
            return;
        };
        let (reply, pidfd) = run(job, fds);
        if replies.send(reply).is_err() {
            return;
        }
        let pidfd: Vec<BorrowedFd<'_>> = pidfd.iter().map(|fd| fd.as_fd()).collect();
        if send_fds(socket, &pidfd).is_err() {
            return;
        }
    }
}

/// One job on the thread: the plan renumbered to the fds received, then the spawn.
fn run(job: Job, fds: Vec<OwnedFd>) -> (Reply, Option<OwnedFd>) {
    let Job { mut plan, slots } = job;
    let mut cgroup = None;
    for (slot, fd) in slots.iter().zip(&fds) {
        let number = fd.as_raw_fd();
        match *slot {
            Slot::Cgroup => cgroup = Some(fd.as_fd()),
            Slot::Stdio(i) => plan.stdio[i] = number,
            Slot::V1Procs(i) => plan.v1_procs[i] = number,
            Slot::Listener => plan.exec.set_listener(number),
        }
    }
    let (cloned, pidfd) = match sys::spawn_child(cgroup, &mut plan) {
        Ok((pid, pidfd)) => (Ok(pid), Some(pidfd)),
        Err(e) => (Err(e), None),
    };
    // `fds` (the copies) close here, after the child's exec: the caller's stay open.
    drop(fds);
    (Reply { plan, cloned }, pidfd)
}

/// One message of one byte, with `fds` attached.
fn send_fds(socket: &OwnedFd, fds: &[BorrowedFd<'_>]) -> rustix::io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MOST_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        control.push(SendAncillaryMessage::ScmRights(fds));
    }
    rustix::net::sendmsg(
        socket,
        &[IoSlice::new(&[1])],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// One message's fds (close-on-exec); `Err` at the other side's end.
fn receive_fds(socket: &OwnedFd) -> io::Result<Vec<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MOST_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            socket,
            &mut [IoSliceMut::new(&mut byte)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    if got.bytes == 0 {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    Ok(fds)
}
