//! Issue 31 item 3: the server's piped stdin/stdout as tokio halves (`async_stdin`,
//! `async_stdout`) moved into tasks, while the handle's close still owns the process: it
//! closes stdin under a live writer half (EOF for the server; a writer waiting for room wakes
//! with `BrokenPipe`) and keeps stdout open through the ladder (no `SIGPIPE` mid-shutdown).

use std::io;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use childguard::tokio::{AsyncStdin, AsyncStdout};
use childguard::{ChildHandle, Ending, Signal};
use childguard_tests::*;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Far above any wait here: a close, a task's end. Only a hang reaches it.
const GENEROUS: Duration = Duration::from_secs(30);

fn runtime() -> tokio::runtime::Runtime {
    childguard_tests::multi_thread_runtime()
}

/// `cmd` with stdin and stdout piped, spawned with `ladder`; its two async halves.
fn spawn_piped(
    mut cmd: std::process::Command,
    ladder: &str,
) -> (ChildHandle, AsyncStdin, AsyncStdout) {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut handle = ChildHandle::builder(cmd)
        .ladder(childguard_tests::ladder(ladder))
        .spawn()
        .expect("spawn");
    let stdin = handle.async_stdin().expect("stdin piped");
    let stdout = handle.async_stdout().expect("stdout piped");
    // Handed out: the sync accessors and a second hand-out find nothing.
    assert!(handle.stdin().is_none() && handle.stdout().is_none());
    assert!(handle.async_stdin().is_none() && handle.async_stdout().is_none());
    (handle, stdin, stdout)
}

/// 20,000 lines (well over a pipe's 64 KiB each way) through `cat`, written by one task and
/// read by another at once; then `close_async` with the writer half still alive: `cat` reads
/// EOF and exits 0 before any signal, and the writer's next write is `BrokenPipe`.
#[test]
fn echo_round_trip_through_cat_from_two_tasks() {
    let rt = runtime();
    rt.block_on(async {
        let (handle, mut stdin, stdout) = spawn_piped(sh("exec cat"), "EOF:10s,TERM:2s,KILL:2s");
        const LINES: usize = 20_000;
        let writer = tokio::spawn(async move {
            for i in 0..LINES {
                stdin.write_all(format!("line {i}\n").as_bytes()).await?;
            }
            Ok::<_, io::Error>(stdin)
        });
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut got = Vec::with_capacity(LINES);
            while got.len() < LINES {
                match lines.next_line().await? {
                    Some(line) => got.push(line),
                    None => break,
                }
            }
            Ok::<_, io::Error>((got, lines))
        });
        let mut stdin = tokio::time::timeout(GENEROUS, writer)
            .await
            .expect("the writer hung")
            .unwrap()
            .expect("writing");
        let (got, mut lines) = tokio::time::timeout(GENEROUS, reader)
            .await
            .expect("the reader hung")
            .unwrap()
            .expect("reading");
        assert_eq!(got.len(), LINES);
        for (i, line) in got.iter().enumerate() {
            assert_eq!(line, &format!("line {i}"));
        }
        assert!(stdin.is_open());
        let report = tokio::time::timeout(GENEROUS, handle.close_async())
            .await
            .expect("the close hung")
            .expect("close");
        assert_eq!(report.ended_by, Ending::Eof, "{report}");
        assert!(report.signals.is_empty(), "{report}");
        assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
        // The close closed our end under the live writer half.
        assert!(!stdin.is_open());
        let err = stdin.write_all(b"late\n").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
        // cat is gone: its stdout ends.
        assert_eq!(lines.next_line().await.unwrap(), None);
    });
}

/// A writer task waiting for room in a full pipe (the server never reads stdin) when
/// `close_async` runs: the close closes stdin, wakes the writer (which gets `BrokenPipe`),
/// climbs its ladder (the server ignores EOF: TERM ends it) and returns. Nothing hangs.
#[test]
fn writer_waiting_on_a_full_pipe_wakes_with_broken_pipe_at_close() {
    let rt = runtime();
    rt.block_on(async {
        let (handle, mut stdin, _stdout) =
            spawn_piped(sh("exec sleep 600"), "EOF:300ms,TERM:5s,KILL:2s");
        let pid = handle.id().unwrap();
        let written = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&written);
        let writer = tokio::spawn(async move {
            let chunk = [b'x'; 4096];
            // Never ends on its own: nobody reads, and a pipe holds at most 1 MiB.
            loop {
                let n = stdin.write(&chunk).await?;
                counted.fetch_add(n, Ordering::SeqCst);
            }
            #[allow(unreachable_code)]
            Ok::<(), io::Error>(())
        });
        // The pipe fills (64 KiB by default, a page when a user is over its pipe quota); the
        // writer then waits for room. Seen started, it cannot finish: nobody reads. Whether it
        // is parked yet when the close runs or only polls again after, it must end with
        // `BrokenPipe` (the parked case is the unit test's in `spawn::shared_stdin`).
        let filled = async {
            while written.load(Ordering::SeqCst) < 4096 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(GENEROUS, filled)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the pipe never filled: {} bytes",
                    written.load(Ordering::SeqCst)
                )
            });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !writer.is_finished(),
            "the writer cannot finish while nobody reads"
        );
        let report = tokio::time::timeout(GENEROUS, handle.close_async())
            .await
            .expect("the close hung")
            .expect("close");
        assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
        let result = tokio::time::timeout(GENEROUS, writer)
            .await
            .expect("the writer was never woken")
            .unwrap();
        let err = result.expect_err("a write after the close");
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe, "{err}");
        assert!(err.to_string().contains("the handle was closed"), "{err}");
        assert!(!is_alive(pid), "the server outlived its close");
    });
}

/// The server exits on EOF, writing its last words after it: the close's EOF ends it (exit 0,
/// no signal) — with the writer half alive in a task, and whether the reader half was dropped
/// before the close (the handle's share of stdout keeps the pipe open through the ladder: no
/// `SIGPIPE`, the exit is 0) or kept (it reads the last words after the close, then EOF).
#[test]
fn server_exiting_on_eof_ends_by_eof_with_the_halves_alive_or_dropped() {
    let rt = runtime();
    for keep_reader in [false, true] {
        rt.block_on(async {
            let script = "while read -r l; do echo \"got $l\"; done; sleep 0.2; echo bye";
            let (handle, mut stdin, stdout) = spawn_piped(sh(script), "EOF:10s,TERM:2s,KILL:2s");
            stdin.write_all(b"a\n").await.unwrap();
            let mut stdout = BufReader::new(stdout);
            let mut line = String::new();
            stdout.read_line(&mut line).await.unwrap();
            assert_eq!(line, "got a\n");
            // The writer half lives on in a task that never writes again.
            let (hold_tx, hold_rx) = tokio::sync::oneshot::channel::<()>();
            let holder = tokio::spawn(async move {
                let _ = hold_rx.await;
                stdin.is_open()
            });
            let kept = keep_reader.then_some(stdout);
            let report = tokio::time::timeout(GENEROUS, handle.close_async())
                .await
                .expect("the close hung")
                .expect("close");
            assert_eq!(
                report.ended_by,
                Ending::Eof,
                "keep_reader {keep_reader}: {report}"
            );
            assert!(report.signals.is_empty(), "{report}");
            assert_eq!(
                report.status.and_then(|s| s.code()),
                Some(0),
                "keep_reader {keep_reader}: the server did not exit 0 (SIGPIPE?): {report}"
            );
            hold_tx.send(()).unwrap();
            assert!(!holder.await.unwrap(), "the close left stdin open");
            if let Some(mut stdout) = kept {
                let mut rest = String::new();
                tokio::time::timeout(GENEROUS, stdout.read_to_string(&mut rest))
                    .await
                    .expect("no EOF on stdout after the close")
                    .unwrap();
                assert_eq!(rest, "bye\n");
            }
        });
    }
}

/// Shutting the writer half down closes stdin at once (EOF for the server), without the
/// handle's close; a handle whose `Command` piped nothing hands out nothing.
#[test]
fn shutdown_of_the_writer_half_is_eof_and_unpiped_gives_none() {
    let rt = runtime();
    rt.block_on(async {
        let (mut handle, mut stdin, mut stdout) =
            spawn_piped(sh("cat; echo done"), "TERM:2s,KILL:2s");
        stdin.write_all(b"x\n").await.unwrap();
        stdin.shutdown().await.unwrap();
        assert!(!stdin.is_open());
        let mut out = String::new();
        tokio::time::timeout(GENEROUS, stdout.read_to_string(&mut out))
            .await
            .expect("no EOF after the shutdown")
            .unwrap();
        assert_eq!(out, "x\ndone\n");
        let status = handle.wait_timeout_async(GENEROUS).await.unwrap();
        assert_eq!(status.and_then(|s| s.code()), Some(0));
        drop(handle.close_async().await.unwrap());

        let mut plain = ChildHandle::builder(sh("exit 0")).spawn().unwrap();
        assert!(plain.async_stdin().is_none() && plain.async_stdout().is_none());
        drop(plain.close_async().await.unwrap());
    });
}
