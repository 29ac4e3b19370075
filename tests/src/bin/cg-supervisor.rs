//! A supervising process for the "supervisor dies" tests.
//!
//! Usage: `cg-supervisor SLOWSERVER [--exit-with-parent] [--from-thread] [--contain]
//! [--best-effort] [--cgroup-parent DIR] [--close] -- ARGS…`
//! Spawns SLOWSERVER ARGS over a socketpair (in a cgroup of its own with `--contain`, or
//! `--best-effort` for `Containment::BestEffort`; under DIR with `--cgroup-parent`), prints
//! `CHILD <pid>` on stdout once the server said READY and then the READY line itself, then
//! sleeps until killed. With `--close` it closes the handle instead, prints `CGROUP <debug of
//! CloseReport::cgroup>`, `FALLBACK <containment_fallback or ->` and `REPORT <report>`, and
//! exits 0. A failed spawn prints `cg-supervisor: <error>` on stderr and exits 1.

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
    let build = move || {
        let mut builder = ChildHandle::builder(cmd)
            .socket(SocketMode::Stdio)
            .exit_with_parent(exit_with_parent)
            .contain(contain);
        if let Some(parent) = parent {
            builder = builder.cgroup_parent(parent);
        }
        builder.spawn()
    };
    let handle = if from_thread {
        // The spawning thread exits at once: PDEATHSIG must not fire because of that.
        std::thread::spawn(build).join().expect("spawn thread")
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
    // One write for both lines, errors ignored: a reader that stops after the first line
    // and closes the pipe must not make us panic (and so die before the test kills us).
    if close {
        let report = handle.close().expect("close");
        let fallback = report.containment_fallback.as_deref().unwrap_or("-");
        let oneline = report.to_string().replace('\n', " ");
        println!(
            "CGROUP {:?}\nFALLBACK {fallback}\nREPORT {oneline}",
            report.cgroup
        );
        return;
    }
    let out = format!("CHILD {}\n{line}", handle.id().expect("pid"));
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    let _ = stdout.flush();
    drop(stdout);
    // Keep the handle (and the socket) open until we are killed.
    std::mem::forget(handle);
    loop {
        std::thread::park();
    }
}
