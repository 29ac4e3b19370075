//! A minimal `sd_notify` sender for the notify-access tests: sends one datagram to
//! `$NOTIFY_SOCKET` from this very process — no barrier, no forged pid (`systemd-notify` run
//! as root names its parent as the sender, and waits for the manager) — then exits, or execs a
//! program.
//!
//! `cg-notify [--daemon] LINE... [-- PROGRAM ARG...]`
//!
//! - the datagram is the LINEs joined by newlines;
//! - `--daemon`: fork first; the parent exits at once, and the child sends only once it has
//!   been reparented (its parent's exit seen on a pidfd), i.e. once it has left the process
//!   tree it was started in, as a double-forked daemon does;
//! - `-- PROGRAM ARG...`: exec it after sending (stdio inherited).

use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::process::{exit, Command};

fn fail(what: &str) -> ! {
    eprintln!("cg-notify: {what}");
    exit(2)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let program = match args.iter().position(|a| a == "--") {
        Some(at) => {
            let rest = args.split_off(at);
            rest[1..].to_vec()
        }
        None => Vec::new(),
    };
    let daemon = args.first().is_some_and(|a| a == "--daemon");
    if daemon {
        args.remove(0);
    }
    if args.is_empty() {
        fail("usage: cg-notify [--daemon] LINE... [-- PROGRAM ARG...]");
    }
    let path = std::env::var("NOTIFY_SOCKET").unwrap_or_else(|_| fail("no NOTIFY_SOCKET"));
    // libsystemd's rule: an absolute path or an abstract name.
    if !path.starts_with('/') && !path.starts_with('@') {
        fail(&format!(
            "NOTIFY_SOCKET={path:?} is neither absolute nor abstract"
        ));
    }
    if daemon {
        let intermediate = rustix::process::getpid();
        match childguard_tests::sys::fork() {
            Err(e) => fail(&format!("fork: {e}")),
            Ok(0) => {}
            Ok(_) => childguard_tests::sys::exit_now(0),
        }
        // The intermediate's exit reparents us (exit_notify) before its pidfd reads as
        // exited; ESRCH: it is already gone, and we are already reparented.
        if let Ok(fd) =
            rustix::process::pidfd_open(intermediate, rustix::process::PidfdFlags::empty())
        {
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let limit = rustix::time::Timespec {
                tv_sec: 60,
                tv_nsec: 0,
            };
            let _ = rustix::event::poll(&mut fds, Some(&limit));
        }
        if rustix::process::getppid() == Some(intermediate) {
            fail("still a child of the intermediate after 60 s");
        }
    }
    let text = args.join("\n");
    let socket = UnixDatagram::unbound().unwrap_or_else(|e| fail(&format!("socket: {e}")));
    socket
        .send_to(text.as_bytes(), &path)
        .unwrap_or_else(|e| fail(&format!("send to {path}: {e}")));
    if let Some((first, rest)) = program.split_first() {
        let e = Command::new(first).args(rest).exec();
        fail(&format!("exec {first}: {e}"));
    }
}
