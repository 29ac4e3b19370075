//! A supervising process for the "supervisor dies" tests.
//!
//! Usage: `cg-supervisor SLOWSERVER [--exit-with-parent] [--from-thread] [--contain]
//! [--best-effort] [--cgroup-parent DIR] [--close] -- ARGS…`
//! Spawns SLOWSERVER ARGS over a socketpair (in a cgroup of its own with `--contain`, or
//! `--best-effort` for `Containment::BestEffort`; under DIR with `--cgroup-parent`), prints
//! `CHILD <pid>` on stdout once the server said READY and then the READY line itself, then
//! sleeps until killed. With `--close` it closes the handle instead, prints `CGROUP <debug of
//! CloseReport::cgroup>`, `FALLBACK <containment_fallback or ->`, `REPORT <report>` and a
//! `NOTE <note>` line per note of the report (what the stale sweep did, among others), and
//! exits 0. A failed spawn prints `cg-supervisor: <error>` on stderr and exits 1.
//!
//! `--count N` spawns N servers (one after the other, each ready before the next) and prints
//! a `CHILD <pid>` line and the server's ready line for each. `--no-cgroup-kill` arms the
//! failpoint `CgroupKill` (`ENOENT`: a kernel without `cgroup.kill`) before the first spawn,
//! so the guardian uses its freeze fallback. `--leak-fd` first opens `/dev/null` *without*
//! `O_CLOEXEC` (as a C library might), for the tests that check the guardian holds none of
//! our fds. `--more-on-stdin` then, for each line read on stdin, spawns one more server and
//! prints its two lines (until EOF, then sleeps until killed).

#![deny(unsafe_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::Command;

use childguard::{ChildHandle, SocketMode};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(split) = args.iter().position(|a| a == "--") else {
        eprintln!("usage: cg-supervisor SLOWSERVER [--exit-with-parent] [--from-thread] -- ARGS…");
        std::process::exit(2);
    };
    let (ours, server_args) = (&args[..split], &args[split + 1..]);
    let exit_with_parent = ours.iter().any(|a| a == "--exit-with-parent");
    let from_thread = ours.iter().any(|a| a == "--from-thread");
    let close = ours.iter().any(|a| a == "--close");
    let more_on_stdin = ours.iter().any(|a| a == "--more-on-stdin");
    let count: usize = ours
        .iter()
        .position(|a| a == "--count")
        .map_or(1, |i| ours[i + 1].parse().expect("--count N"));
    if ours.iter().any(|a| a == "--no-cgroup-kill") {
        childguard::failpoint::set(childguard::failpoint::Point::CgroupKill, libc::ENOENT);
    }
    if ours.iter().any(|a| a == "--leak-fd") {
        let fd = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDONLY,
            rustix::fs::Mode::empty(),
        )
        .expect("opening /dev/null");
        std::mem::forget(fd);
    }
    let contain = if ours.iter().any(|a| a == "--contain") {
        childguard::Containment::Cgroup
    } else if ours.iter().any(|a| a == "--best-effort") {
        childguard::Containment::BestEffort
    } else {
        childguard::Containment::None
    };
    let parent = ours
        .iter()
        .position(|a| a == "--cgroup-parent")
        .map(|i| ours[i + 1].clone());
    let mut cmd = Command::new(&ours[0]);
    cmd.args(server_args);
    let cmd = std::sync::Arc::new(cmd);
    let build = move || {
        let cmd = clone_command(&cmd);
        let mut builder = ChildHandle::builder(cmd)
            .socket(SocketMode::Stdio)
            .exit_with_parent(exit_with_parent)
            .contain(contain.clone());
        if let Some(parent) = parent.clone() {
            builder = builder.cgroup_parent(parent);
        }
        builder.spawn()
    };
    let spawn_one = |handles: &mut Vec<ChildHandle>| -> String {
        let handle = if from_thread {
            // The spawning thread exits at once: PDEATHSIG must not fire because of that.
            std::thread::spawn(build.clone())
                .join()
                .expect("spawn thread")
        } else {
            build()
        };
        let handle = handle.unwrap_or_else(|e| {
            eprintln!("cg-supervisor: {e}");
            std::process::exit(1);
        });
        let mut line = String::new();
        let socket = handle.socket().expect("stdio socket");
        BufReader::new(socket)
            .read_line(&mut line)
            .expect("READY line");
        let lines = format!("CHILD {}\n{line}", handle.id().expect("pid"));
        handles.push(handle);
        lines
    };
    let mut lines = String::new();
    let mut handles = Vec::new();
    for _ in 0..count {
        lines.push_str(&spawn_one(&mut handles));
    }
    if close {
        for handle in handles {
            let report = handle.close().expect("close");
            let fallback = report.containment_fallback.as_deref().unwrap_or("-");
            let oneline = report.to_string().replace('\n', " ");
            println!(
                "CGROUP {:?}\nFALLBACK {fallback}\nREPORT {oneline}",
                report.cgroup
            );
            for note in &report.notes {
                println!("NOTE {}", note.replace('\n', " "));
            }
        }
        return;
    }
    // One write for all lines, errors ignored: a reader that stops after the first line
    // and closes the pipe must not make us panic (and so die before the test kills us).
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(lines.as_bytes());
    let _ = stdout.flush();
    drop(stdout);
    if more_on_stdin {
        for line in std::io::stdin().lines() {
            if line.is_err() {
                break;
            }
            let lines = spawn_one(&mut handles);
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(lines.as_bytes());
            let _ = stdout.flush();
        }
    }
    // Keep the handles (and the sockets) open until we are killed.
    std::mem::forget(handles);
    loop {
        std::thread::park();
    }
}

/// A copy of `cmd` (program and arguments: all this binary sets), for the next spawn.
fn clone_command(cmd: &Command) -> Command {
    let mut copy = Command::new(cmd.get_program());
    copy.args(cmd.get_args());
    copy
}
