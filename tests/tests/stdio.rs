//! Issue 14, part 1: the stdio the caller's `Command` asked for is kept, readable and writable
//! through the handle, and `output(timeout)` reads both pipes within a bound.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Signal, SocketMode};
use childguard_tests::*;

/// The Must show of issue 14: before, the pipe ends died with the std `Child` inside spawn()
/// and the server was killed by SIGPIPE at its first line, so the file never appeared.
#[test]
fn piped_server_lives_on_writes_its_file_and_its_output_is_readable() {
    let file = scratch("lives-on");
    let script = format!(
        "sleep 0.2; echo first line; echo to stderr >&2; echo written > '{}'; exec sleep 30",
        file.display()
    );
    let mut cmd = sh(&script);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut handle = ChildHandle::builder(cmd)
        .ladder(ladder("TERM:2s,KILL:2s"))
        .spawn()
        .expect("spawn");
    // The shell creates the file before it writes the line into it: wait for the content.
    let written = || std::fs::read_to_string(&file).is_ok_and(|t| t == "written\n");
    assert!(
        eventually(Duration::from_secs(20), written),
        "the server never wrote {}: {:?}",
        file.display(),
        handle.try_wait()
    );
    let mut line = String::new();
    BufReader::new(handle.stdout().expect("stdout kept"))
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "first line\n");
    let mut err_line = String::new();
    BufReader::new(handle.stderr().expect("stderr kept"))
        .read_line(&mut err_line)
        .unwrap();
    assert_eq!(err_line, "to stderr\n");
    assert_eq!(
        handle.try_wait().unwrap(),
        None,
        "the server must still run"
    );
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    assert_eq!(report.status.and_then(|s| s.signal()), Some(libc::SIGTERM));
    let _ = std::fs::remove_file(&file);
}

#[test]
fn piped_stdin_stdout_stderr_round_trip_and_takes_are_the_callers() {
    let mut cmd = sh("while read -r l; do echo \"out $l\"; echo \"err $l\" >&2; done");
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut handle = ChildHandle::builder(cmd).spawn().expect("spawn");
    handle
        .stdin()
        .expect("stdin kept")
        .write_all(b"a\nb\n")
        .unwrap();
    let mut stdout = handle.take_stdout().expect("stdout kept");
    assert!(handle.stdout().is_none() && handle.take_stdout().is_none());
    let mut got = [0u8; 12];
    stdout.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"out a\nout b\n");
    // Closing stdin (as the close's step 2 would) ends the loop: the shell exits 0 on EOF.
    drop(handle.take_stdin());
    let out = handle.output(Duration::from_secs(20)).unwrap();
    assert_eq!(out.stderr, b"err a\nerr b\n");
    assert!(out.stdout.is_empty(), "stdout was taken: {:?}", out.stdout);
    assert!(!out.timed_out);
    assert_eq!(
        out.status().and_then(|s| s.code()),
        Some(0),
        "{}",
        out.report
    );
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
}

#[test]
fn the_close_gives_a_piped_stdin_eof() {
    let mut cmd = sh("cat >/dev/null; exit 7");
    cmd.stdin(Stdio::piped());
    let handle = ChildHandle::builder(cmd)
        .ladder(ladder("EOF:10s,KILL:1s"))
        .spawn()
        .expect("spawn");
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, childguard::Ending::Eof, "{report}");
    assert_eq!(report.status.and_then(|s| s.code()), Some(7));
}

/// Both pipes far beyond their 64 KiB buffers, stdout first: a reader that waited on one pipe
/// (or on the exit) while the child blocked on the other would hang until the timeout.
#[test]
fn output_reads_both_full_pipes_without_deadlock() {
    let mut cmd = sh("head -c 1000000 /dev/zero; head -c 700000 /dev/zero >&2; echo end >&2");
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let handle = ChildHandle::builder(cmd).spawn().expect("spawn");
    let began = Instant::now();
    let out = handle.output(Duration::from_secs(60)).unwrap();
    assert!(!out.timed_out, "took {:?}: {}", began.elapsed(), out.report);
    assert_eq!(out.stdout.len(), 1_000_000);
    assert_eq!(out.stderr.len(), 700_004);
    assert!(out.stderr.ends_with(b"end\n"));
    assert_eq!(out.status().and_then(|s| s.code()), Some(0));
}

/// A server still running at the timeout is closed with its ladder, and what it logs during
/// its shutdown — more than a pipe holds — is read, so it exits from its HUP handler
/// instead of blocking until KILL. Its `up` line is read first: the trap is set by then (a
/// HUP before it, from a timeout that beat a slow shell start, would kill the shell).
#[test]
fn output_times_out_then_climbs_while_still_reading() {
    let script = "trap 'head -c 300000 /dev/zero >&2; echo bye; exit 3' HUP; echo up; \
                  while :; do sleep 0.05; done";
    let mut cmd = sh(script);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut handle = ChildHandle::builder(cmd)
        .ladder(ladder("HUP:20s,KILL:1s"))
        .spawn()
        .expect("spawn");
    // Byte by byte, so that nothing after the line is taken from `output`.
    let mut up = Vec::new();
    let stdout = handle.stdout().expect("stdout kept");
    while up.last() != Some(&b'\n') {
        let mut byte = [0u8];
        let n = stdout.read(&mut byte).expect("reading the up line");
        assert_eq!(n, 1, "the shell closed stdout before its up line: {up:?}");
        up.push(byte[0]);
    }
    assert_eq!(up, b"up\n");
    let out = handle.output(Duration::from_millis(300)).unwrap();
    assert!(out.timed_out);
    assert_eq!(out.report.ended_by, rung(0, Signal::HUP), "{}", out.report);
    assert_eq!(
        out.status().and_then(|s| s.code()),
        Some(3),
        "{}",
        out.report
    );
    assert_eq!(out.stdout, b"bye\n");
    assert_eq!(out.stderr.len(), 300_000);
}

/// With the socket on fds 0 and 1, stderr is still the caller's.
#[test]
fn socket_stdio_leaves_stderr_to_the_command() {
    let mut cmd = sh("echo hello on stderr >&2; cat >/dev/null; exit 4");
    cmd.stderr(Stdio::piped());
    let spawned = ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .ladder(ladder("EOF:10s,KILL:1s"))
        .spawn();
    let mut handle = spawned.expect("spawn");
    assert!(handle.stdin().is_none() && handle.stdout().is_none());
    let mut line = String::new();
    BufReader::new(handle.stderr().expect("stderr kept"))
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "hello on stderr\n");
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, childguard::Ending::Eof, "{report}");
    assert_eq!(report.status.and_then(|s| s.code()), Some(4));
}

#[test]
fn the_portable_mechanism_output_sees_the_exit() {
    let mut cmd = sh("echo portable; exit 5");
    cmd.stdout(Stdio::piped());
    let handle = ChildHandle::builder(cmd)
        .force_portable(true)
        .spawn()
        .expect("spawn");
    let out = handle.output(Duration::from_secs(20)).unwrap();
    assert_eq!(out.stdout, b"portable\n");
    assert_eq!(out.status().and_then(|s| s.code()), Some(5));
}
