//! The guardian's life, in the forked process (see the parent module for the protocol).
//!
//! Everything here runs after `fork` in a copy of one thread of the host: no allocation, no
//! lock, no std I/O, no panic path in practice (slices are cut within the bounds the table and
//! the buffers were made with). Memory comes from `mmap(2)` ([`crate::sys::guardian`]);
//! system calls go through rustix (raw syscalls) or those wrappers.

use std::ffi::CStr;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

use super::commands;
use super::table::{self, Table};
use super::walk::{self, Scratch};
use crate::sys::guardian as sys;

/// How long, after the host died, the guardian keeps trying to remove the killed cgroups
/// (the killed tree takes a moment to exit; a member in D state may take longer).
const REMOVE_FOR: Duration = Duration::from_secs(10);

/// What the guardian is given, prepared by the host before the fork (plain values: the fork
/// copies them).
#[derive(Debug)]
pub(crate) struct Args {
    /// Our end of the socketpair (the host holds the other, close-on-exec).
    pub(crate) sock: RawFd,
    /// A pidfd of the host (`-1` where `pidfd_open(2)` is missing: then only the socket's EOF
    /// tells of its end).
    pub(crate) host_pidfd: RawFd,
    /// `cgguard/<host pid>`, NUL-terminated (`PR_SET_NAME` takes 15 bytes).
    pub(crate) name: [u8; 16],
    /// The bound of the `close` loop where `close_range(2)` is missing.
    pub(crate) close_limit: u32,
    /// Skip `cgroup.kill` (the failpoint `CgroupKill`: a kernel before 5.14).
    pub(crate) pretend_no_kill: bool,
}

/// The guardian: sets itself up, says hello, serves the host's messages until the host is
/// gone, then kills and removes what is still registered, and exits.
pub(crate) fn run(args: &Args) -> ! {
    // 1. No handler of the host's may run here; INT/TERM/HUP/PIPE (and every other signal
    //    that would end or stop us) are ignored.
    sys::reset_signals();
    // 2. Out of the host's session and process group: a `killpg` of the host's group or a
    //    Ctrl-C at its terminal does not reach us.
    let _ = rustix::process::setsid();
    // 3. Recognisable, and pinning no directory of the host.
    if let Ok(name) = CStr::from_bytes_until_nul(&args.name) {
        let _ = rustix::thread::set_name(name);
    }
    let _ = rustix::process::chdir(c"/");
    // 4. Only our two fds: no copy of the host's sockets, pipes, listeners.
    let mut keep = [args.sock, args.host_pidfd];
    if keep[0] > keep[1] {
        keep.swap(0, 1);
    }
    // An error means a `close_range` failed other than for want of the call; the fallback
    // loop has closed every fd below the limit but ours all the same.
    let _ = sys::close_all_except(&keep, args.close_limit);
    // These fd numbers are ours alone from here on (the fork gave us copies; nothing else in
    // this process uses or closes them).
    let sock = borrow(args.sock);
    let host = (args.host_pidfd >= 0).then(|| borrow(args.host_pidfd));
    // 5. Memory, mapped (no allocator).
    let memory = sys::map_zeroed(
        table::ENTRIES_BYTES + table::ARENA + walk::PATH_BUF + walk::IO_BUF + table::MAX_MESSAGE,
    )
    .and_then(|m| sys::map_uninit(walk::DIRENTS).map(|d| (m, d)));
    let (memory, dirents) = match memory {
        Ok(m) => m,
        Err(errno) => {
            let mut msg = [0u8; 5];
            msg[0] = table::FAILED;
            msg[1..].copy_from_slice(&errno.to_le_bytes());
            let _ = rustix::net::send(sock, &msg, SendFlags::NOSIGNAL | SendFlags::DONTWAIT);
            sys::exit_now(1);
        }
    };
    let (entries, rest) = memory.split_at_mut(table::ENTRIES_BYTES);
    let (arena, rest) = rest.split_at_mut(table::ARENA);
    let (path, rest) = rest.split_at_mut(walk::PATH_BUF);
    let (io, message) = rest.split_at_mut(walk::IO_BUF);
    let mut table = Table::new(entries, arena);
    let mut scratch = Scratch { dirents, path, io };
    // 6. Hello, with a pidfd of ourselves, so the host can tell whether we still live.
    hello(sock);
    // 7. Serve until the host is gone.
    loop {
        let mut fds = [
            PollFd::new(&sock, PollFlags::IN),
            PollFd::new(host.as_ref().unwrap_or(&sock), PollFlags::IN),
        ];
        let n = if host.is_some() { 2 } else { 1 };
        match rustix::event::poll(&mut fds[..n], None) {
            Ok(_) | Err(Errno::INTR) => {}
            // Cannot wait (should not happen): do the job now rather than never.
            Err(_) => break,
        }
        let host_gone = n == 2 && !fds[1].revents().is_empty();
        let readable = !fds[0].revents().is_empty();
        if readable && !read_messages(sock, message, &mut table) {
            break; // EOF: every copy of the host's end is closed (it died, or exec'd)
        }
        if host_gone {
            break;
        }
    }
    // 8. The host is gone. What it sent before it died is still queued: read it all first (an
    //    add sent just before a spawn must be honoured), then kill, then remove.
    let _ = read_messages(sock, message, &mut table);
    end_all(&table, &mut scratch, args);
    sys::exit_now(0)
}

/// Borrows an fd number this process owns for its whole life.
fn borrow(fd: RawFd) -> BorrowedFd<'static> {
    crate::sys::guardian::borrow_own(fd)
}

/// Reads every queued message (without blocking) into the table. `false` on EOF or a dead
/// socket: the host's end is closed.
fn read_messages(sock: BorrowedFd<'_>, buf: &mut [u8], table: &mut Table<'_>) -> bool {
    loop {
        match rustix::net::recv(sock, &mut *buf, RecvFlags::DONTWAIT) {
            Ok((0, _)) => return false,
            Ok((n, _)) => apply(&buf[..n.min(buf.len())], table),
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => return true,
            Err(_) => return false,
        }
    }
}

/// One message from the host.
fn apply(msg: &[u8], table: &mut Table<'_>) {
    if msg.len() < 9 {
        return;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&msg[1..9]);
    let id = u64::from_le_bytes(id);
    match msg[0] {
        // Refused only if the host's count and ours disagree, which the shared rule prevents.
        table::ADD => {
            let _ = table.add(id, &msg[9..]);
        }
        table::REMOVE => table.remove(id),
        _ => {}
    }
}

/// `HELLO`: our pid, and a pidfd of ourselves where the kernel has `pidfd_open(2)`.
fn hello(sock: BorrowedFd<'_>) {
    let pid = rustix::process::getpid();
    let mut msg = [0u8; 5];
    msg[0] = table::HELLO;
    msg[1..].copy_from_slice(&(pid.as_raw_nonzero().get() as u32).to_le_bytes());
    let own: Option<OwnedFd> =
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok();
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds;
    if let Some(own) = &own {
        fds = [own.as_fd()];
        let _ = control.push(SendAncillaryMessage::ScmRights(&fds));
    }
    let _ = rustix::net::sendmsg(
        sock,
        &[IoSlice::new(&msg)],
        &mut control,
        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    );
    drop(own);
}

/// Kills every registered cgroup, runs every registered command (a container engine's
/// `kill`: `commands.rs`), then removes each cgroup (retrying while the killed trees exit, for
/// at most [`REMOVE_FOR`]; the kill is repeated once a second meanwhile).
fn end_all(table: &Table<'_>, scratch: &mut Scratch<'_>, args: &Args) {
    let pretend_no_kill = args.pretend_no_kill;
    let cgroup = |i: usize| !commands::is_command(table.path(i));
    for i in (0..table.len()).filter(|&i| cgroup(i)) {
        walk::kill(table.path(i), scratch, pretend_no_kill);
    }
    commands::run_all(table, args.close_limit);
    let started = walk::now();
    let mut last_kill = started;
    // One bit per entry: removed. The table's bound is 8,192 entries: 128 u64 words.
    let mut done = [0u64; table::MAX_ENTRIES / 64];
    loop {
        let mut left = 0;
        for i in 0..table.len() {
            if done[i / 64] & (1 << (i % 64)) != 0 || !cgroup(i) {
                continue;
            }
            if walk::remove(table.path(i), scratch) {
                done[i / 64] |= 1 << (i % 64);
            } else {
                left += 1;
            }
        }
        let now = walk::now();
        if left == 0 || now >= started + REMOVE_FOR {
            return;
        }
        if now >= last_kill + Duration::from_secs(1) {
            last_kill = now;
            for i in 0..table.len() {
                if done[i / 64] & (1 << (i % 64)) == 0 && cgroup(i) {
                    walk::kill(table.path(i), scratch, pretend_no_kill);
                }
            }
        }
        walk::sleep(Duration::from_millis(20));
    }
}
