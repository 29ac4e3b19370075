//! Issue 52 item 4: the LSP close against servers that misbehave on their output
//! (`tests/fixtures/odd_lsp.py`) — each ends with an outcome that says why, the ladder after
//! it, nothing of the tree left; never a panic or a hang. Through each entry of the public
//! API: `close`, `close_pipes`, `close_async`, `close_async_halves`.

mod lsp_close_util;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ending, Signal, StdioChannel};
use childguard_lsp::{Ended, Exit, LspClose, LspCloseReport, Shutdown};
use childguard_tests::lsp::LspClient;
use childguard_tests::stdio_peers::fixture;
use childguard_tests::*;
use lsp_close_util::*;
use serde_json::json;

/// Short steps: these servers never answer (but `asks`, which answers at once).
const SHORT: LspClose = LspClose {
    shutdown_timeout: Duration::from_millis(300),
    exit_grace: Duration::from_millis(200),
};

/// `odd_lsp.py MODE`, spawned with the ladder `TERM:200ms,KILL:5s` and initialized.
fn odd(mode: &str) -> ChildHandle {
    let mut cmd = Command::new("python3");
    cmd.arg(fixture("odd_lsp.py")).arg(mode);
    let mut handle = spawn(cmd, Some("TERM:200ms,KILL:5s"));
    let root = fresh_dir(&format!("lsp_close_{mode}"));
    let mut lsp = client(&mut handle);
    let init = initialize(&mut handle, &mut lsp, &root);
    assert!(init["fixture"]["pid"].is_u64(), "{init}");
    let _ = std::fs::remove_dir_all(&root);
    handle
}

/// The ladder ended it: TERM skipped (the fixture ignores it), KILL to the cgroup.
fn assert_killed_by_the_ladder(report: &LspCloseReport) {
    let kill = Ended::Ladder(Ending::Rung {
        index: 1,
        signal: Signal::KILL,
    });
    assert_eq!(report.ended_by, kill, "{report}");
    assert!(!report.is_clean(), "{report}");
    assert!(report.total < Duration::from_secs(10), "{report}");
}

/// Before its answer the server writes a stray line, a notification and a request of its own,
/// and waits for the request's answer: the close answers it (`RequestCancelled`), drops the
/// rest, skips the stray bytes, and gets `shutdown`'s answer; `exit` ends the server.
#[test]
fn a_request_of_the_servers_is_refused_and_the_rest_dropped_then_shutdown_is_answered() {
    let handle = odd("asks");
    let (dir, members) = tree(&handle);
    let how = LspClose {
        shutdown_timeout: ANSWER,
        exit_grace: ANSWER,
    };
    let report = childguard_lsp::close(handle, how).unwrap();
    eprintln!("asks: {report}");
    assert_eq!(report.shutdown, Shutdown::Answered, "{report}");
    assert_eq!(report.ended_by, Ended::Exit, "{report}");
    assert!(report.is_clean(), "{report}");
    assert_eq!((report.refused, report.dropped), (1, 1), "{report}");
    assert_eq!(
        report.skipped_bytes,
        "a stray line on stdout\n".len(),
        "{report}"
    );
    let tail = report.close.output_tail.clone().unwrap_or_default();
    let answer = tail
        .lines()
        .find(|l| l.contains("the client answered"))
        .unwrap_or_else(|| panic!("the server's log of our answer: {tail}"));
    assert!(
        answer.contains(r#""code": -32800"#) && answer.contains(r#""id": 41"#),
        "{answer}"
    );
    assert_nothing_left(&report.close, &dir, &members);
}

/// Lines that are not LSP, through `close_async_halves` (the handle's async halves, handed
/// out before): skipped, no answer in time, `exit` ignored, the ladder.
#[test]
fn garbage_on_stdout_times_out_and_the_ladder_ends_it_through_close_async_halves() {
    let mut handle = odd("garbage");
    let (dir, members) = tree(&handle);
    // Written at `initialized`: waited for in the pipe, so the close certainly reads it.
    let stdout = handle.stdout().unwrap();
    let garbage = 100 * "this is not an LSP frame, only noise on stdout\n".len();
    assert!(
        eventually(ANSWER, || rustix::io::ioctl_fionread(&*stdout).unwrap()
            as usize
            >= garbage),
        "the fixture's garbage did not come"
    );
    let runtime = multi_thread_runtime();
    let report = runtime.block_on(async {
        let stdin = handle.async_stdin().unwrap();
        let stdout = handle.async_stdout().unwrap();
        childguard_lsp::close_async_halves(handle, stdin, stdout, SHORT).await
    });
    let report = report.unwrap();
    eprintln!("garbage: {report}");
    assert_eq!(report.shutdown, Shutdown::TimedOut, "{report}");
    assert_eq!(report.exit, Exit::Sent, "{report}");
    assert!(
        report.skipped_bytes + report.partial_bytes > 1000,
        "{report}"
    );
    assert_killed_by_the_ladder(&report);
    assert_nothing_left(&report.close, &dir, &members);
}

/// The server closes its stdout, through `close_pipes` (the pipes taken out of the handle):
/// the end of file ends the wait at once.
#[test]
fn a_server_that_closes_its_stdout_is_reported_so_and_ended_by_the_ladder_through_close_pipes() {
    let mut handle = odd("close-stdout");
    let (dir, members) = tree(&handle);
    let stdin = handle.take_stdin().unwrap();
    let stdout = handle.take_stdout().unwrap();
    let how = LspClose {
        shutdown_timeout: ANSWER,
        ..SHORT
    };
    let report = childguard_lsp::close_pipes(handle, stdin, stdout, how).unwrap();
    eprintln!("close-stdout: {report}");
    assert_eq!(report.shutdown, Shutdown::StdoutClosed, "{report}");
    assert!(
        report.total < ANSWER,
        "the end of file ended the wait: {report}"
    );
    assert_killed_by_the_ladder(&report);
    assert_nothing_left(&report.close, &dir, &members);
}

/// A header announcing 99999999999 bytes, through `close_async`: refused saying why, not
/// buffered.
#[test]
fn a_huge_content_length_is_unreadable_saying_why_through_close_async() {
    let handle = odd("huge-length");
    let (dir, members) = tree(&handle);
    let how = LspClose {
        shutdown_timeout: ANSWER,
        ..SHORT
    };
    let runtime = multi_thread_runtime();
    let report = runtime
        .block_on(childguard_lsp::close_async(handle, how))
        .unwrap();
    eprintln!("huge-length: {report}");
    match &report.shutdown {
        Shutdown::Unreadable(why) => assert!(why.contains("99999999999"), "{report}"),
        _ => panic!("{report}"),
    }
    assert!(report.total < ANSWER, "{report}");
    assert_killed_by_the_ladder(&report);
    assert_nothing_left(&report.close, &dir, &members);
}

/// A server that stopped reading its stdin, whose pipe is full: `shutdown` cannot be written
/// within its time, nothing more is written, the ladder ends it — no hung write.
#[test]
fn a_server_whose_stdin_is_full_gets_nothing_written_and_the_ladder() {
    let mut handle = odd("no-read");
    let (dir, members) = tree(&handle);
    // Filled once the server said it reads no more: a read of its under way would make room.
    let mut lsp = client(&mut handle);
    let said = lsp.read_message(Instant::now() + ANSWER).unwrap();
    assert_eq!(
        said["params"]["message"], "no longer reading stdin",
        "{said}"
    );
    drop(lsp);
    let stdin = handle.stdin().unwrap();
    rustix::io::ioctl_fionbio(&*stdin, true).unwrap();
    let mut filled = 0;
    loop {
        match stdin.write(&[b' '; 4096]) {
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the server's stdin: {e}"),
        }
    }
    assert!(filled >= 4096, "{filled}");
    let report = childguard_lsp::close(handle, SHORT).unwrap();
    eprintln!("no-read: {report}");
    match &report.shutdown {
        Shutdown::NotSent(why) => assert!(why.contains("stayed full"), "{report}"),
        _ => panic!("{report}"),
    }
    assert!(matches!(report.exit, Exit::NotSent(_)), "{report}");
    assert_killed_by_the_ladder(&report);
    assert_nothing_left(&report.close, &dir, &members);
}

/// A server gone before the close gets nothing; a handle without pipes gets its own close.
#[test]
fn an_exited_server_gets_nothing_and_a_handle_without_pipes_goes_straight_to_its_close() {
    let handle = ChildHandle::stdio_server(sh("exit 3"));
    let mut handle = handle.spawn().unwrap();
    assert!(handle.wait_timeout(ANSWER).unwrap().is_some());
    let report = childguard_lsp::close(handle, SHORT).unwrap();
    assert_eq!(report.ended_by, Ended::BeforeShutdown, "{report}");
    assert!(matches!(report.shutdown, Shutdown::NotSent(_)), "{report}");
    assert_eq!(
        report.close.status.and_then(|s| s.code()),
        Some(3),
        "{report}"
    );

    let plain = ChildHandle::builder(sh("exec sleep 60"))
        .ladder(ladder("TERM:5s"))
        .spawn()
        .unwrap();
    let report = childguard_lsp::close(plain, SHORT).unwrap();
    eprintln!("no pipes: {report}");
    match &report.shutdown {
        Shutdown::NotSent(why) => assert!(why.contains("Stdio::piped()"), "{report}"),
        _ => panic!("{report}"),
    }
    let term = Ended::Ladder(Ending::Rung {
        index: 0,
        signal: Signal::TERM,
    });
    assert_eq!(report.ended_by, term, "{report}");
    assert!(
        report.exit_sent.is_none() && report.exited.is_none(),
        "{report}"
    );
    let sent: Vec<_> = report.close.signals.iter().map(|s| s.signal).collect();
    assert_eq!(sent, [Signal::TERM], "straight to the ladder: {report}");
}

/// A server on a socketpair (`StdioChannel::Socketpair`): `close` and `close_async` speak over
/// copies of the handle's socket, and the end of file is its shutdown for writing.
#[test]
fn a_socketpair_channel_is_spoken_over_by_close_and_close_async() {
    for asynchronous in [false, true] {
        let mut cmd = Command::new("python3");
        cmd.arg(fixture("odd_lsp.py")).arg("asks");
        let handle = ChildHandle::stdio_server(cmd)
            .stdio_channel(StdioChannel::Socketpair)
            .spawn()
            .unwrap();
        let mut to = handle
            .socket()
            .expect("the socketpair")
            .try_clone()
            .unwrap();
        let mut lsp = LspClient::new(to.try_clone().unwrap());
        let init = lsp
            .request(&mut to, "initialize", json!({"capabilities": {}}), ANSWER)
            .unwrap();
        assert!(init["fixture"]["pid"].is_u64(), "{init}");
        lsp.notify(&mut to, "initialized", json!({})).unwrap();
        drop((lsp, to));
        let (dir, members) = tree(&handle);
        let how = LspClose {
            shutdown_timeout: ANSWER,
            exit_grace: ANSWER,
        };
        let report = if asynchronous {
            multi_thread_runtime().block_on(childguard_lsp::close_async(handle, how))
        } else {
            childguard_lsp::close(handle, how)
        };
        let report = report.unwrap();
        eprintln!("socketpair (async: {asynchronous}): {report}");
        assert_eq!(report.shutdown, Shutdown::Answered, "{report}");
        assert_eq!(report.refused, 1, "{report}");
        assert_eq!(report.ended_by, Ended::Exit, "{report}");
        assert!(report.is_clean(), "{report}");
        assert_nothing_left(&report.close, &dir, &members);
    }
}
