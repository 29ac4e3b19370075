//! The tree init's life, from its `clone` to its `_exit`: the user namespace's maps, the
//! server forked and its exec checked, then one loop on a signalfd (and the host's pidfd)
//! that forwards the close's rungs, reaps, and ends with the server.
//!
//! It is a copy of one thread of a multi-threaded host: only async-signal-safe calls, no
//! allocation, no lock, no panic (see `sys/tree_init.rs`). rustix's Linux backend makes raw
//! system calls and allocates nothing for `&CStr` paths and buffers of ours.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::process::{Pid, WaitOptions};

use super::{Backend, Msg, KILL_TREE, KILL_TREE_SIGNAL};
use crate::sys::tree_init as sys;
use crate::sys::{run_forked, ChildPlan};

/// What the tree init needs, prepared by the host before the `clone`.
pub(super) struct Args<'a> {
    pub(super) backend: Backend,
    /// `uid_map` and `gid_map` lines (`"ID ID 1\n"`), for a new user namespace.
    pub(super) maps: Option<(&'a [u8], &'a [u8])>,
    /// Our end of the control socket (`SOCK_SEQPACKET`).
    pub(super) ctl: BorrowedFd<'a>,
    /// The host's pidfd, watched with `exit_with_parent`.
    pub(super) host: Option<BorrowedFd<'a>>,
    /// `KillMode::ControlGroup`: catchable rungs to every process of the tree.
    pub(super) to_all: bool,
    /// The server leads a process group of its own: rungs go to the group.
    pub(super) group: bool,
}

/// Runs the tree init; never returns.
pub(super) fn run(args: &Args<'_>, plan: &mut ChildPlan) -> ! {
    sys::clear_handlers();
    let code = match start(args, plan) {
        Ok((signals, server)) => serve(args, &signals, server),
        Err(()) => 127,
    };
    sys::exit_now(code)
}

/// Everything up to the server's exec; `Err` once the failure was reported to the host.
fn start(args: &Args<'_>, plan: &mut ChildPlan) -> Result<(OwnedFd, Server), ()> {
    let fail = |step: u8, errno: i32| {
        let _ = send(args.ctl, Msg::Failed(step, errno));
    };
    let signals = sys::signalfd_all().map_err(|e| fail(FAILED_SIGNALFD, e))?;
    if let Some((uid_map, gid_map)) = args.maps {
        write_maps(uid_map, gid_map).map_err(|e| fail(FAILED_MAPS, e))?;
    }
    if args.backend == Backend::Subreaper {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(|e| fail(FAILED_SUBREAPER, e.raw_os_error()))?;
    }
    // The server's parent is this process: pid 1 in a new namespace, else our own pid.
    if let Some((_, parent)) = &mut plan.death_signal {
        *parent = rustix::process::getpid().as_raw_nonzero().get() as u32;
    }
    let (pid, pidfd) = server(plan).map_err(|(step, errno)| fail(step, errno))?;
    // Race avoided (*the tree init killed with our group*): a host's `killpg(SIGKILL)` of
    // our process group — the Python SDK's last step — would kill a subreaper with us and
    // orphan its tree to PID 1. Out of our group (after the server's fork, which stays in it:
    // a terminal's Ctrl-C still reaches the server), it outlives us and ends the tree itself.
    let _ = rustix::process::setpgid(None, None);
    let keep = [
        args.ctl.as_raw_fd(),
        signals.as_raw_fd(),
        args.host.map_or(-1, |h| h.as_raw_fd()),
        pidfd.as_raw_fd(),
    ];
    // Race avoided (*a host fd held open by the tree init*): the copy holds every fd of the
    // host, the host's end of the server's stdio socket among them; the server would never
    // see EOF on its stdin while we held it. The server has them already (its exec closed
    // all but its own), so everything but our four goes now.
    let mut sorted = keep;
    sorted.sort_unstable();
    let _ = sys::close_all_except(&sorted, sys::close_loop_limit());
    send_fd(args.ctl, pidfd.as_fd()).map_err(|_| ())?;
    Ok((signals, Server { pid, pidfd }))
}

/// The server, exec'd: by our own spawn's `clone3` (shared memory, no page table copied), or
/// where `clone3` is refused (Docker's seccomp profile answers `ENOSYS`) by a fork whose
/// failed step comes back down a pipe. `Err`: the step and its errno.
fn server(plan: &mut ChildPlan) -> Result<(Pid, OwnedFd), (u8, i32)> {
    if let Ok((pid, pidfd)) = crate::sys::spawn_child_from_copy(plan) {
        if plan.errno != 0 || plan.reached != crate::sys::Step::Exec {
            // It exited 127 before its exec: reap it, then say which step.
            let _ = rustix::process::waitid(
                rustix::process::WaitId::PidFd(pidfd.as_fd()),
                rustix::process::WaitIdOptions::EXITED,
            );
            let errno = if plan.errno != 0 {
                plan.errno
            } else {
                libc::ECHILD
            };
            return Err((plan.reached as u8, errno));
        }
        let pid = Pid::from_raw(pid as i32).ok_or((FAILED_FORK, libc::ESRCH))?;
        return Ok((pid, pidfd));
    }
    let flags = rustix::pipe::PipeFlags::CLOEXEC;
    let (report_r, report_w) =
        rustix::pipe::pipe_with(flags).map_err(|e| (FAILED_FORK, e.raw_os_error()))?;
    let pid = match sys::fork_server() {
        Ok(sys::Forked::Child) => run_forked(plan, report_w.as_raw_fd()),
        Ok(sys::Forked::Parent(pid, _)) => pid,
        Err(e) => return Err((FAILED_FORK, e)),
    };
    drop(report_w);
    let mut report = [0u8; 5];
    let n = read_full(report_r.as_fd(), &mut report);
    drop(report_r);
    if n == report.len() {
        // The server failed before its exec and exited 127: reap it, then say which step.
        let _ = rustix::process::waitpid(Pid::from_raw(pid), WaitOptions::empty());
        let errno = i32::from_ne_bytes([report[1], report[2], report[3], report[4]]);
        return Err((report[0], errno));
    }
    let pid = Pid::from_raw(pid).ok_or((FAILED_FORK, libc::ESRCH))?;
    // Our unreaped child: the pid cannot be recycled before we reap it.
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        .map_err(|e| (FAILED_FORK, e.raw_os_error()))?;
    Ok((pid, pidfd))
}

/// Why the tree init failed before the server's exec (the host names it); beyond the
/// server's own steps (`sys::Step`, which are small numbers).
pub(super) const FAILED_SIGNALFD: u8 = 100;
pub(super) const FAILED_MAPS: u8 = 101;
pub(super) const FAILED_SUBREAPER: u8 = 102;
pub(super) const FAILED_FORK: u8 = 103;

struct Server {
    pid: Pid,
    pidfd: OwnedFd,
}

/// The loop: until the server has exited (or the host is gone, or asked for the tree's end).
/// Returns the exit code of the tree init (the host reads the server's real status from the
/// control socket).
fn serve(args: &Args<'_>, signals: &OwnedFd, server: Server) -> i32 {
    loop {
        let mut fds = [
            PollFd::new(signals, PollFlags::IN),
            PollFd::from_borrowed_fd(args.host.unwrap_or(signals.as_fd()), PollFlags::IN),
        ];
        let n = if args.host.is_some() { 2 } else { 1 };
        match poll(&mut fds[..n], None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return end(args, &server, None),
        }
        if n == 2 && !fds[1].revents().is_empty() {
            // The host is gone (`exit_with_parent`): the tree ends with it.
            return end(args, &server, None);
        }
        let Ok(got) = sys::read_signal(signals.as_fd()) else {
            continue;
        };
        if got.signo == libc::SIGCHLD {
            if let Some(status) = reap(&server) {
                return end(args, &server, Some(status));
            }
        } else if got.signo == KILL_TREE_SIGNAL
            && got.code == libc::SI_QUEUE
            && got.value == KILL_TREE
        {
            return end(args, &server, None);
        } else {
            forward(args, &server, got.signo);
        }
    }
}

/// Reaps every exited child (the server, or orphans re-parented to us); the server's wait
/// status once it is among them.
fn reap(server: &Server) -> Option<i32> {
    let mut status = None;
    loop {
        // `__WALL`, as the subreaper's kill: see `subreaper::kill_tree`.
        match sys::wait_any(true) {
            Ok(Some((pid, st))) => {
                if pid == server.pid.as_raw_nonzero().get() {
                    status = Some(st);
                }
            }
            Ok(None) | Err(_) => return status,
        }
    }
}

/// A rung: to the server (its group), or to every process of the tree.
fn forward(args: &Args<'_>, server: &Server, signo: i32) {
    let Some(sig) = rustix::process::Signal::from_named_raw(signo) else {
        return;
    };
    if args.to_all {
        match args.backend {
            // kill(-1) from a namespace's init: every process in it but ourselves.
            Backend::PidNamespace => {
                let _ = crate::sys::tree_init::kill_all_but_self(signo);
            }
            _ => super::super::subreaper::signal_children(signo),
        }
    } else if args.group {
        let _ = rustix::process::kill_process_group(server.pid, sig);
    } else {
        let _ = rustix::process::pidfd_send_signal(server.pidfd.as_fd(), sig);
    }
}

/// The tree's end: every process left is killed (a subreaper kills them itself; in a PID
/// namespace the kernel kills them when we exit), the server's status is sent, and the
/// exit code returned.
fn end(args: &Args<'_>, server: &Server, status: Option<i32>) -> i32 {
    let status = match args.backend {
        Backend::Subreaper => super::super::subreaper::kill_tree(server.pid).or(status),
        _ => {
            if status.is_none() {
                let _ = rustix::process::pidfd_send_signal(
                    server.pidfd.as_fd(),
                    rustix::process::Signal::KILL,
                );
                // The kill is certain: wait for the server's status.
                match rustix::process::waitpid(Some(server.pid), WaitOptions::empty()) {
                    Ok(Some((_, st))) => Some(st.as_raw()),
                    _ => None,
                }
            } else {
                status
            }
        }
    };
    let Some(status) = status else {
        return 1;
    };
    let _ = send(args.ctl, Msg::Exited(status));
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    }
}

/// `uid_map` and `gid_map` of our new user namespace, ourselves mapped to ourselves
/// (`setgroups` denied first, as an unprivileged writer must).
fn write_maps(uid_map: &[u8], gid_map: &[u8]) -> Result<(), i32> {
    write_proc(c"/proc/self/uid_map", uid_map)?;
    write_proc(c"/proc/self/setgroups", b"deny")?;
    write_proc(c"/proc/self/gid_map", gid_map)
}

fn write_proc(path: &std::ffi::CStr, bytes: &[u8]) -> Result<(), i32> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| e.raw_os_error())?;
    match rustix::io::write(&fd, bytes) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) => Err(libc::EIO),
        Err(e) => Err(e.raw_os_error()),
    }
}

/// Reads until `buf` is full or EOF; the bytes read.
fn read_full(fd: BorrowedFd<'_>, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::read(fd, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    got
}

fn send(ctl: BorrowedFd<'_>, msg: Msg) -> rustix::io::Result<usize> {
    let bytes = msg.encode();
    rustix::net::send(ctl, &bytes, rustix::net::SendFlags::empty())
}

/// The `Started` message, with the server's pidfd passed along (`SCM_RIGHTS`).
fn send_fd(ctl: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> rustix::io::Result<usize> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::mem::MaybeUninit;
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(rustix::io::Errno::NOBUFS);
    }
    // The server's pid as our host sees it (`/proc` is the host's): our first child, still
    // unreaped (we reap only in the loop); an orphan re-parented to us already comes after it.
    let mut pid = 0u32;
    super::super::subreaper::children(|p| {
        if pid == 0 {
            pid = p as u32;
        }
    });
    let bytes = Msg::Started(pid).encode();
    rustix::net::sendmsg(
        ctl,
        &[std::io::IoSlice::new(&bytes)],
        &mut control,
        SendFlags::empty(),
    )
}
