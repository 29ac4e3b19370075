//! The tokio face (`close_async`, `kill_async`, drop inside a runtime) and coexistence with
//! `tokio::process` and with a host's own `SIGCHLD` handlers.

use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, CloseReport, Ending, Signal, SocketMode};
use childguard_tests::*;

/// slowserver ignoring HUP and EOF: it takes a second rung to end it. Its ladders here start
/// with `NOSKIP,`: the ignored HUP is sent and its grace spent, which is what holds a close
/// mid-ladder (skipping it is tests/skip_ignored.rs's).
const STUBBORN: &[&str] = &["--ignore", "HUP", "--ignore-eof"];

/// How long a reaped child may take to leave `/proc` once its last rung is due.
const GENEROUS: Duration = Duration::from_secs(10);

fn runtime(multi_thread: bool) -> tokio::runtime::Runtime {
    if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }
}

/// slowserver `args` over a socketpair with `ladder`, on the pidfd or the portable mechanism.
fn spawn_with(args: &[&str], ladder: &str, portable: bool) -> (ChildHandle, Ready) {
    let handle = ChildHandle::builder(slowserver(args))
        .socket(SocketMode::Stdio)
        .ladder(ladder.parse().unwrap())
        .force_portable(portable)
        .spawn()
        .expect("spawning slowserver");
    let ready = read_ready(&handle);
    (handle, ready)
}

/// What must not depend on who drove the close: everything but the timings.
fn shape(report: &CloseReport) -> impl PartialEq + std::fmt::Debug {
    (
        report.ended_by,
        report
            .signals
            .iter()
            .map(|s| (s.signal, s.rung, s.to_group))
            .collect::<Vec<_>>(),
        report.status.map(|s| (s.code(), s.signal())),
        report.shutdown.is_some(),
        report.exited.is_some(),
        report.reaped.is_some(),
        report.handed_to_reaper,
        report.outlived_ladder,
        report.socket_may_be_held,
        report.group_survivors.clone(),
        report.notes.clone(),
    )
}

fn assert_reaped_eventually(pid: u32, what: &str) {
    assert!(
        eventually(GENEROUS, || proc_state(pid).is_none()),
        "{what}: child {pid} still in /proc (state {:?}) after {GENEROUS:?}",
        proc_state(pid)
    );
}

#[test]
fn drop_in_current_thread_runtime_returns_at_once_and_child_is_reaped_later() {
    let (handle, ready) = spawn_slow(STUBBORN, "NOSKIP,HUP:5s,KILL:1s", false);
    let took = runtime(false).block_on(async move {
        let started = Instant::now();
        drop(handle);
        started.elapsed()
    });
    eprintln!("drop inside a current-thread runtime took {took:?}");
    // A few system calls, with slack for a slow machine (it was 5 ms, and a preempted drop
    // broke it); a drop that blocked would wait out HUP's 5 s grace.
    assert!(
        took < Duration::from_secs(2),
        "drop blocked the runtime thread for {took:?}"
    );
    // HUP is ignored: the KILL rung is still seconds away, owned by the reaper.
    assert!(
        is_alive(ready.pid),
        "the child died before its KILL rung was due"
    );
    assert_reaped_eventually(ready.pid, "dropped in a current-thread runtime");
}

#[test]
fn drop_in_multi_thread_task_returns_at_once_and_child_is_reaped_later() {
    let (handle, ready) = spawn_slow(STUBBORN, "NOSKIP,HUP:5s,KILL:1s", false);
    let rt = runtime(true);
    let took = rt
        .block_on(rt.spawn(async move {
            let started = Instant::now();
            drop(handle);
            started.elapsed()
        }))
        .unwrap();
    // Slack for a slow machine; a drop that blocked would wait out HUP's 5 s grace.
    assert!(took < Duration::from_secs(2), "drop blocked for {took:?}");
    assert_reaped_eventually(ready.pid, "dropped in a multi-thread task");
}

#[test]
fn cancelled_close_async_leaves_no_zombie() {
    for portable in [false, true] {
        // HUP's grace leaves seconds between the cancellation and the is_alive check below.
        let (handle, ready) = spawn_with(STUBBORN, "NOSKIP,HUP:5s,KILL:1s", portable);
        let outcome = runtime(false).block_on(async move {
            tokio::time::timeout(Duration::from_millis(50), handle.close_async()).await
        });
        assert!(outcome.is_err(), "close_async finished within 50 ms");
        assert!(
            is_alive(ready.pid),
            "portable={portable}: cancelled mid-ladder, the child should await its KILL rung"
        );
        assert!(childguard::reaper::in_flight() >= 1);
        assert_reaped_eventually(ready.pid, &format!("cancelled, portable={portable}"));
    }
}

#[test]
fn close_async_on_both_flavours_reports_like_sync_close() {
    for portable in [false, true] {
        let (handle, _) = spawn_with(STUBBORN, "NOSKIP,HUP:100ms,TERM:10s", portable);
        let sync = handle.close().unwrap();
        assert_eq!(sync.ended_by, rung(1, Signal::TERM), "{sync}");
        for multi in [false, true] {
            let (handle, ready) = spawn_with(STUBBORN, "NOSKIP,HUP:100ms,TERM:10s", portable);
            let report = runtime(multi)
                .block_on(async move { tokio::spawn(handle.close_async()).await })
                .unwrap()
                .unwrap();
            let what = format!("portable={portable} multi_thread={multi}: {report}");
            assert_eq!(shape(&report), shape(&sync), "{what}");
            assert!(
                report.signals[1].at >= report.signals[0].at + Duration::from_millis(100),
                "TERM before HUP's grace ran out: {what}"
            );
            // A lost wake-up would wait out TERM's 10 s grace; 5 s is slack for a slow machine.
            assert!(report.total < Duration::from_secs(5), "{what}");
            assert_eq!(proc_state(ready.pid), None, "{what}");
        }
    }
}

#[test]
fn close_async_of_eof_server_and_of_group_matches_sync() {
    for (args, ladder, group) in [
        (&[][..], "EOF:5s,KILL:1s", false),
        // The EOF grace is waited out in full while the worker lives: 2 s for a slow machine to
        // see the leader exit on EOF (with 50 ms it was sometimes HUP, and the shapes differed).
        (&["--fork-grandchild"][..], "EOF:2s,HUP:5s,KILL:5s", true),
    ] {
        let (handle, _) = spawn_slow(args, ladder, group);
        let sync = handle.close().unwrap();
        let (handle, ready) = spawn_slow(args, ladder, group);
        let report = runtime(false).block_on(handle.close_async()).unwrap();
        assert_eq!(shape(&report), shape(&sync), "{report} vs {sync}");
        assert_eq!(report.ended_by, Ending::Eof, "{report}");
        if group {
            assert!(!is_alive(ready.grandchild), "grandchild survived: {report}");
        }
    }
}

#[test]
fn kill_async_waits_without_blocking_then_close_async_reports_the_kill() {
    let (mut handle, ready) = spawn_slow(STUBBORN, "NOSKIP,HUP:1s,KILL:1s", false);
    let rt = runtime(false);
    rt.block_on(async {
        let ticks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ticker = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ticks.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        let started = Instant::now();
        // A wait of 1 s: time for the ticker's 10 ms sleeps to run even on a slow machine (with
        // 100 ms it could tick fewer than 5 times); a blocked runtime thread ticks none.
        let still = handle
            .kill_async(Signal::HUP, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(still, None, "HUP is ignored");
        assert!(started.elapsed() >= Duration::from_secs(1));
        // The other task ran during the wait: the runtime thread was not blocked.
        assert!(ticks.load(Ordering::SeqCst) >= 5, "runtime starved");
        ticker.abort();
        assert!(is_alive(ready.pid));
        let status = handle
            .kill_async(Signal::TERM, Duration::from_secs(30))
            .await
            .unwrap()
            .expect("TERM ends slowserver");
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        assert_eq!(
            handle.wait_timeout_async(Duration::ZERO).await.unwrap(),
            Some(status)
        );
        let report = handle.close_async().await.unwrap();
        assert_eq!(
            report.ended_by,
            Ending::Kill {
                signal: Signal::TERM
            },
            "{report}"
        );
        assert!(report.signals.is_empty(), "{report}");
    });
}

#[test]
fn many_handles_dropped_in_a_runtime_are_all_reaped() {
    let children: Vec<_> = (0..50)
        .map(|_| spawn_slow(STUBBORN, "NOSKIP,HUP:50ms,TERM:1s", false))
        .collect();
    let pids: Vec<u32> = children.iter().map(|(_, r)| r.pid).collect();
    let rt = runtime(true);
    rt.block_on(async move {
        let tasks: Vec<_> = children
            .into_iter()
            .map(|(h, _)| tokio::spawn(async move { drop(h) }))
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert!(childguard::reaper::drain(Instant::now() + GENEROUS));
    for pid in pids {
        assert_eq!(proc_state(pid), None, "{pid} left behind");
    }
}

/// A program that spawns and waits for its own `tokio::process` children while ours close.
#[test]
fn tokio_process_children_keep_working_alongside() {
    let rt = runtime(true);
    rt.block_on(async {
        for portable in [false, true] {
            let theirs = tokio::process::Command::new("sh")
                .args(["-c", "sleep 0.2; exit 7"])
                .spawn()
                .unwrap();
            let mut doomed = tokio::process::Command::new("sleep")
                .arg("30")
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            let doomed_pid = doomed.id().unwrap();
            let ours: Vec<_> = (0..4)
                .map(|_| spawn_with(STUBBORN, "NOSKIP,HUP:50ms,TERM:10s", portable).0)
                .collect();
            let closes: Vec<_> = ours
                .into_iter()
                .map(|h| tokio::spawn(h.close_async()))
                .collect();
            let sync_close = tokio::task::spawn_blocking(move || {
                spawn_with(STUBBORN, "NOSKIP,HUP:50ms,TERM:10s", portable)
                    .0
                    .close()
                    .unwrap()
            });
            let status = theirs.wait_with_output().await.unwrap().status;
            assert_eq!(status.code(), Some(7), "portable={portable}");
            for close in closes {
                let report = close.await.unwrap().unwrap();
                assert_eq!(
                    report.status.and_then(|s| s.signal()),
                    Some(libc::SIGTERM),
                    "portable={portable}: status lost or wrong: {report}"
                );
                assert!(report.notes.is_empty(), "{report}");
                // A lost wake-up would wait out TERM's 10 s; 5 s is slack for a slow machine.
                assert!(report.total < Duration::from_secs(5), "{report}");
            }
            let report = sync_close.await.unwrap();
            assert!(
                report.status.is_some() && report.notes.is_empty(),
                "{report}"
            );
            // tokio's own kill + wait still sees its child (we never reap what is not ours).
            doomed.kill().await.unwrap();
            assert_eq!(proc_state(doomed_pid), None);
        }
    });
}

/// A program with its own `SIGCHLD` listeners (tokio's and signal-hook's).
#[test]
fn own_sigchld_handlers_keep_working_alongside() {
    let flag = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(libc::SIGCHLD, flag.clone()).unwrap();
    let rt = runtime(false);
    rt.block_on(async {
        let mut listener =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).unwrap();
        for portable in [false, true] {
            flag.store(false, Ordering::SeqCst);
            let (handle, _) = spawn_with(STUBBORN, "NOSKIP,HUP:100ms,TERM:10s", portable);
            let report = handle.close_async().await.unwrap();
            assert_eq!(report.ended_by, rung(1, Signal::TERM), "{report}");
            // A lost wake-up would wait out TERM's 10 s; 5 s is slack for a slow machine.
            assert!(
                report.total < Duration::from_secs(5),
                "portable={portable}: our wake-up was lost: {report}"
            );
            // Theirs still fire.
            tokio::time::timeout(Duration::from_secs(5), listener.recv())
                .await
                .expect("tokio's SIGCHLD listener heard nothing")
                .unwrap();
            assert!(flag.load(Ordering::SeqCst), "signal-hook flag not set");
        }
    });
    // And the blocking close on the portable mechanism, under the same handlers.
    let (handle, _) = spawn_with(STUBBORN, "NOSKIP,HUP:100ms,TERM:10s", true);
    let report = handle.close().unwrap();
    assert!(report.total < Duration::from_secs(5), "{report}");
    assert!(report.status.is_some(), "{report}");
}
