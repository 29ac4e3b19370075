//! Issue 14, part 3: `spawn()` returns once the server is ready — `Notify`, `Output`,
//! `Connect`, `Accepted` — and fails clearly when it is not; `EXTEND_TIMEOUT_USEC=` and
//! `STOPPING=1` during the close. Against slowserver (`--notify`, `--ready-after`, `--listen`).

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use childguard::{Capture, ChildHandle, Ending, ErrorKind, Ready, Reap, Signal, SocketMode};
use childguard_tests::*;

/// `CLOCK_MONOTONIC` now, in ns (what slowserver's `--ready-stamp` writes).
fn monotonic_ns() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

fn stamp(path: &Path) -> u128 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: no ready stamp ({e}): spawn() returned before the server was ready",
            path.display()
        )
    });
    text.trim().parse().expect("a stamp in ns")
}

/// A scratch directory with the socket `s` a [`Listening::server`] listens on and the `stamp`
/// file it writes when ready; removed on drop.
struct Listening {
    dir: PathBuf,
    socket: PathBuf,
    stamp: PathBuf,
}

impl Listening {
    fn new(name: &str) -> Listening {
        let dir = fresh_dir(name);
        let (socket, stamp) = (dir.join("s"), dir.join("stamp"));
        Listening { dir, socket, stamp }
    }

    /// slowserver that becomes ready after 200 ms and then listens on the socket (and, with
    /// `notify`, sends `READY=1`), stamping the moment.
    fn server(&self, notify: bool) -> Command {
        let mut args = vec![
            "--ready-after",
            "200ms",
            "--ready-stamp",
            self.stamp.to_str().unwrap(),
            "--listen",
            self.socket.to_str().unwrap(),
            "--ignore-eof",
        ];
        if notify {
            args.push("--notify");
        }
        slowserver(&args)
    }

    /// spawn(), which returned at `returned` (ns, [`monotonic_ns`]), did not return before the
    /// server was ready, and the server listens.
    fn listens_since_ready(&self, returned: u128) {
        assert!(
            stamp(&self.stamp) <= returned,
            "returned before the socket listened"
        );
        std::os::unix::net::UnixStream::connect(&self.socket).expect("listening after spawn()");
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn notify_spawn_returns_once_ready_and_the_close_records_stopping() {
    let stamp_file = scratch("notify-stamp");
    let began = Instant::now();
    let handle = ChildHandle::builder(slowserver(&[
        "--notify",
        "--ready-after",
        "200ms",
        "--ready-stamp",
        stamp_file.to_str().unwrap(),
        "--ignore-eof",
    ]))
    .socket(SocketMode::Stdio)
    .ready(Ready::Notify)
    .ladder(ladder("TERM:10s,KILL:1s"))
    .spawn()
    .expect("spawn with Ready::Notify");
    let returned = monotonic_ns();
    assert!(began.elapsed() >= Duration::from_millis(200));
    let ready_at = stamp(&stamp_file);
    assert!(ready_at <= returned, "spawn returned before the stamp");
    let ready = read_ready(&handle);
    assert_eq!(Some(ready.pid), handle.id());
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    let notify = report.notify.expect("a notify report");
    assert_eq!(notify.status.as_deref(), Some("ready"));
    assert!(
        notify.stopping.is_some(),
        "STOPPING=1 not recorded: {notify:?}"
    );
    assert!(notify.ignored.is_empty(), "{notify:?}");
    let _ = std::fs::remove_file(&stamp_file);
}

/// slowserver with `--notify`, asking for `ask` more on TERM (`EXTEND_TIMEOUT_USEC=`) and
/// taking `slow_exit` to exit after it, logging to `log` if given; spawned with
/// `Ready::Notify`, the extension cap `cap` and `ladder`, `reap` if given. Returned past its
/// READY line: a close before it would end it by EPIPE on that write.
fn extending(
    [ask, slow_exit]: [&str; 2],
    log: Option<&Path>,
    cap: Duration,
    ladder_text: &str,
    reap: Option<Reap>,
) -> ChildHandle {
    let mut args = vec![
        "--notify",
        "--notify-extend",
        ask,
        "--slow-exit",
        slow_exit,
        "--ignore-eof",
    ];
    if let Some(log) = log {
        args.extend(["--log", log.to_str().unwrap()]);
    }
    let mut builder = ChildHandle::builder(slowserver(&args))
        .socket(SocketMode::Stdio)
        .ready(Ready::Notify)
        .notify_extend_max(cap)
        .ladder(ladder(ladder_text));
    if let Some(reap) = reap {
        builder = builder.reap(reap);
    }
    let handle = builder.spawn().expect("spawn");
    let _ = read_ready(&handle);
    handle
}

/// The TERM rung ended the server after its 3 s linger, with the one 6 s extension it asked
/// for recorded.
fn ended_by_term_after_the_linger(report: &childguard::CloseReport) {
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    assert_eq!(report.status.and_then(|s| s.code()), Some(143), "{report}");
    assert_eq!(report.signals.len(), 1, "{report}");
    let notify = report.notify.clone().unwrap();
    assert_eq!(notify.extensions.len(), 1, "{notify:?}");
    assert_eq!(notify.extensions[0].asked, Duration::from_secs(6));
    assert!(
        report.exited.unwrap() >= Duration::from_millis(2900),
        "{report}"
    );
}

/// The server asks for 6 s on TERM and needs 3 s to exit: without the extension the 2 s
/// rung would run out and KILL it. (The 2 s grace is the time the extension has to arrive; the
/// 3 s it asks beyond the linger are the time the exit has to be seen.)
#[test]
fn extend_timeout_usec_extends_the_rung_and_the_server_exits_from_term() {
    let handle = extending(
        ["6s", "3s"],
        None,
        Duration::from_secs(10),
        "TERM:2s,KILL:1s",
        None,
    );
    ended_by_term_after_the_linger(&handle.close().unwrap());
}

/// [`extending`] with a 6 s ask and a 3 s linger that ends in `EXIT 143`, logged to a scratch
/// `log`, a 10 s cap and `TERM:2s,KILL:1s`: without the extension the KILL rung ends it at
/// 2 s and no `EXIT` line is written. (The 2 s grace is the time the extension has to
/// arrive.) With a pidfd pinning it, opened before any close.
fn extending_server(log: &str, reap: Reap) -> (ChildHandle, std::os::fd::OwnedFd, PathBuf) {
    let log = scratch(log);
    let handle = extending(
        ["6s", "3s"],
        Some(&log),
        Duration::from_secs(10),
        "TERM:2s,KILL:1s",
        Some(reap),
    );
    let pin = pidfd(handle.id().unwrap());
    (handle, pin, log)
}

/// Waits (generously) until the server pinned by `pin` has exited, then asserts that its
/// linger ran to its end ([`ran_out`]; `context` for the message). A pidfd, opened before
/// the close: once reaped, its pid may be reused by another process, which `/proc/<pid>`
/// would show.
fn lingered_to_the_end(pin: &std::os::fd::OwnedFd, log: &Path, context: &str) {
    assert!(
        exited_within(pin, Duration::from_secs(30)),
        "the server still runs 30 s after the close"
    );
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    assert!(
        ran_out(&text),
        "KILLed during its linger: {text:?}; {context}"
    );
}

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// TERM reached it and the linger ran out: no KILL came during it (a KILL leaves no `EXIT`
/// line). Where the ladder's `CONT` lands is not asserted: the kernel may run its handler on
/// another thread before TERM's, so `CONT` can be logged first (seen in CI), or not at all
/// once the signal thread is lingering.
fn ran_out(log: &str) -> bool {
    log.lines().any(|line| line == "TERM") && log.ends_with("EXIT 143\n")
}

/// The reaper's climb (`Reap::Background`: the close returns after the TERM rung) reads the
/// notify socket too: the extension keeps the KILL rung away until the server has exited.
#[test]
fn extend_timeout_usec_is_honoured_by_the_reaper() {
    let (handle, pin, log) = extending_server("extend-reaper.log", Reap::Background);
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, Ending::InBackground, "{report}");
    assert!(report.notify.is_some(), "{report}");
    lingered_to_the_end(&pin, &log, &report.to_string());
}

/// A handle dropped inside a tokio runtime goes to the reaper, climb and notify socket
/// together.
#[test]
fn extend_timeout_usec_is_honoured_after_a_drop_inside_a_runtime() {
    let (handle, pin, log) = extending_server("extend-drop.log", Reap::Blocking);
    let rt = current_thread_runtime();
    rt.block_on(async move { drop(handle) });
    lingered_to_the_end(&pin, &log, "");
}

/// `close_async` waits on the notify socket with the pidfd: the extension holds, the report
/// has it, and TERM ended the server.
#[test]
fn extend_timeout_usec_is_honoured_by_close_async() {
    let (handle, pin, log) = extending_server("extend-async.log", Reap::Blocking);
    let rt = current_thread_runtime();
    let report = rt.block_on(handle.close_async()).unwrap();
    ended_by_term_after_the_linger(&report);
    let notify = report.notify.clone().unwrap();
    assert!(notify.stopping.is_some(), "{notify:?}");
    lingered_to_the_end(&pin, &log, "");
}

/// A `close_async` cancelled mid-grace hands the climb (with its notify socket) to the
/// reaper, which keeps honouring the extension.
#[test]
fn extend_timeout_usec_is_honoured_after_close_async_is_cancelled() {
    let (handle, pin, log) = extending_server("extend-cancel.log", Reap::Blocking);
    let rt = current_thread_runtime();
    let cancelled = rt.block_on(async move {
        tokio::time::timeout(Duration::from_millis(100), handle.close_async()).await
    });
    assert!(cancelled.is_err(), "the close finished within 100 ms?");
    lingered_to_the_end(&pin, &log, "");
}

/// A server asking for a minute gets the cap (700 ms beyond the 2 s grace), then KILL. (The
/// 2 s grace is the time the extension has to arrive.)
#[test]
fn the_extension_cap_holds() {
    let handle = extending(
        ["60s", "60s"],
        None,
        Duration::from_millis(700),
        "TERM:2s,KILL:2s",
        None,
    );
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(1, Signal::KILL), "{report}");
    // Not before the cap; well before the 60 s asked (6 s of slack for a loaded machine).
    let kill_at = report.signals[1].at;
    assert!(
        kill_at >= Duration::from_millis(2650) && kill_at < Duration::from_secs(8),
        "KILL at {kill_at:?}, expected at the cap (2.7 s): {report}"
    );
    assert_eq!(report.notify.unwrap().extensions.len(), 1);
}

/// Without the notify socket read during the close, a zero cap: extensions are ignored.
#[test]
fn a_zero_cap_ignores_extensions() {
    let handle = extending(
        ["10s", "10s"],
        None,
        Duration::ZERO,
        "TERM:300ms,KILL:2s",
        None,
    );
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(1, Signal::KILL), "{report}");
    // Honoured, the 10 s extension would keep KILL away for 10 s.
    assert!(report.signals[1].at < Duration::from_secs(5), "{report}");
}

#[test]
fn a_child_that_exits_during_start_up_fails_the_spawn_at_once_with_its_status_and_output() {
    let err = spawn_fails_as_the_child_exits(
        ChildHandle::builder(sh("echo 'FATAL: no config' >&2; exit 3"))
            .ready(Ready::Notify)
            .capture(Capture::stderr())
            .ready_timeout(Duration::from_secs(60)),
        3,
        Duration::from_secs(20),
    );
    assert_eq!(err.kind(), ErrorKind::Ready);
    let text = err.to_string();
    assert!(text.contains("awaiting READY=1 on NOTIFY_SOCKET"), "{text}");
    assert!(text.contains("last output:\n  FATAL: no config"), "{text}");
    let report = err.close_report().expect("a close report");
    assert_eq!(report.status.and_then(|s| s.code()), Some(3));
    assert_eq!(report.ended_by, childguard::Ending::BeforeClose, "{report}");
}

#[test]
fn a_timeout_closes_the_child_with_its_ladder_and_says_what_was_awaited() {
    let err = ChildHandle::builder(slowserver(&["--ignore-eof"]))
        .socket(SocketMode::Stdio)
        .ready(Ready::Notify)
        .ready_timeout(Duration::from_millis(300))
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect_err("slowserver without --notify never sends READY=1");
    assert_eq!(err.kind(), ErrorKind::Ready);
    assert_eq!(err.io_kind(), std::io::ErrorKind::TimedOut);
    let text = err.to_string();
    assert!(
        text.contains("not ready after 300ms: awaited READY=1 on NOTIFY_SOCKET"),
        "{text}"
    );
    let report = err.close_report().expect("a close report");
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    assert_eq!(report.status.and_then(|s| s.signal()), Some(libc::SIGTERM));
    assert!(report.notify.is_some());
}

#[test]
fn output_spawn_returns_once_the_line_is_written() {
    let began = Instant::now();
    let handle = ChildHandle::builder(sh(
        "echo starting; sleep 0.3; echo 'server is listening on port 1'; exec sleep 30",
    ))
    .ready(Ready::output("listening on"))
    .ladder(ladder("TERM:5s,KILL:1s"))
    .spawn()
    .expect("spawn with Ready::Output");
    assert!(began.elapsed() >= Duration::from_millis(300));
    let tail = handle.output_tail().expect("Output turns a capture on");
    assert!(tail.ends_with("listening on port 1\n"), "{tail:?}");
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
}

/// The 2 s timeout is the time the shell has to start and print its line (the tail asserted):
/// a timeout before it would close the shell before it said anything.
#[test]
fn output_that_never_comes_times_out() {
    let err = ChildHandle::builder(sh("echo nothing useful; exec sleep 30"))
        .ready(Ready::output("listening"))
        .ready_timeout(Duration::from_secs(2))
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect_err("no such line");
    let text = err.to_string();
    assert!(
        text.contains("awaited an output line containing \"listening\""),
        "{text}"
    );
    assert_eq!(err.output_tail(), Some("nothing useful\n"));
}

#[test]
fn connect_spawn_returns_once_the_unix_socket_accepts() {
    let site = Listening::new("connect-dir");
    let handle = ChildHandle::builder(site.server(false))
        .socket(SocketMode::Stdio)
        .ready(Ready::connect(site.socket.as_path()))
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect("spawn with Ready::Connect");
    site.listens_since_ready(monotonic_ns());
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
}

#[test]
fn connect_tcp_to_a_server_that_exits_fails_at_once() {
    // A port bound but not listening: connections are refused, and (held, without
    // SO_REUSEADDR) no other socket can take it and listen there meanwhile — as one could on a
    // port merely found free and released.
    let held = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::STREAM,
        None,
    )
    .unwrap();
    let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    rustix::net::bind(&held, &loopback).unwrap();
    let addr = std::net::SocketAddr::try_from(rustix::net::getsockname(&held).unwrap()).unwrap();
    // The default 30 s readiness timeout never comes: the exit ends the wait.
    let err = spawn_fails_as_the_child_exits(
        ChildHandle::builder(sh("exit 9")).ready(Ready::connect(addr)),
        9,
        Duration::from_secs(20),
    );
    assert!(err.to_string().contains(&format!("tcp {addr}")), "{err}");
    drop(held);
}

#[test]
fn accepted_is_activation_and_nothing_else() {
    let err = ChildHandle::builder(sh("true"))
        .ready(Ready::Accepted)
        .spawn()
        .expect_err("Accepted without activation");
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("SocketMode::Activation"), "{err}");
}

/// A datagram from this test process (the child's parent, a stranger to it) is ignored; one
/// from a descendant of the child counts.
#[test]
fn notify_from_a_stranger_is_ignored_from_a_descendant_it_counts() {
    let path_file = scratch("notify-path");
    let script = format!(
        "echo \"$NOTIFY_SOCKET\" > '{}'; exec sleep 30",
        path_file.display()
    );
    let sender = std::thread::spawn({
        let path_file = path_file.clone();
        move || {
            assert!(eventually(Duration::from_secs(20), || {
                std::fs::read_to_string(&path_file).is_ok_and(|t| t.ends_with('\n'))
            }));
            let path = std::fs::read_to_string(&path_file).unwrap();
            let socket = std::os::unix::net::UnixDatagram::unbound().unwrap();
            socket
                .send_to(b"READY=1\n", path.trim())
                .expect("sending to NOTIFY_SOCKET");
        }
    });
    // The 3 s timeout is the time the shell and the sender thread have to get the stranger's
    // datagram in (after the timeout it would go nowhere).
    let err = ChildHandle::builder(sh(&script))
        .ready(Ready::Notify)
        .ready_timeout(Duration::from_secs(3))
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect_err("a stranger's READY=1 must not count");
    sender.join().unwrap();
    let ignored = &err.close_report().unwrap().notify.as_ref().unwrap().ignored;
    let me = std::process::id();
    assert!(
        ignored
            .iter()
            .any(|w| w.contains(&format!("pid {me}, not a descendant of the child"))),
        "{ignored:?}"
    );
    let _ = std::fs::remove_file(&path_file);

    // python3 as the child's grandchild sends READY=1 and stays (a sender that is gone by
    // the time we look cannot be traced, and is ignored).
    let python = "import os, socket, time\n\
                  s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
                  s.sendto(b'READY=1', os.environ['NOTIFY_SOCKET'])\n\
                  time.sleep(60)";
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "python3 -c \"$0\" & wait", python]);
    // A cold python3 start on a loaded machine took more than the default 30 s once (seen
    // with two CPU hogs): 120 s, which costs nothing when it is ready sooner.
    let handle = ChildHandle::builder(cmd)
        .ready(Ready::Notify)
        .ready_timeout(Duration::from_secs(120))
        .process_group(true)
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect("a descendant's READY=1 counts (needs python3)");
    let report = handle.close().unwrap();
    assert!(report.notify.unwrap().ignored.is_empty());
}

#[test]
fn the_notify_directory_is_private_and_removed_on_close() {
    let runtime = scratch("notify-runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let mut cmd = slowserver(&["--notify", "--ignore-eof"]);
    cmd.stderr(std::process::Stdio::piped());
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .ready(Ready::Notify)
        .runtime_dir(&runtime)
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect("spawn");
    let dirs: Vec<_> = std::fs::read_dir(&runtime)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dirs[0]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    assert_eq!(
        std::fs::read_dir(&runtime).unwrap().count(),
        0,
        "left behind"
    );
    let _ = std::fs::remove_dir(&runtime);
}

#[test]
fn spawn_async_awaits_readiness_without_blocking_the_runtime() {
    let rt = current_thread_runtime();
    rt.block_on(async {
        let ticker = tokio::spawn(async {
            let mut ticks = 0u32;
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                ticks += 1;
                if ticks == 5 {
                    return ticks;
                }
            }
        });
        // 1 s for 5 ticks of 10 ms: each may be woken late by ~200 ms on a loaded machine; a
        // blocked runtime runs none of them.
        let handle = ChildHandle::builder(slowserver(&["--notify", "--ready-after", "1s"]))
            .socket(SocketMode::Stdio)
            .ready(Ready::Notify)
            .ladder(ladder("EOF:5s,KILL:1s"))
            .spawn_async()
            .await
            .expect("spawn_async");
        // The one runtime thread kept running the ticker while the spawn waited.
        assert!(
            ticker.is_finished(),
            "the runtime was blocked during spawn_async"
        );
        let mut line = [0u8; 6];
        handle.socket().unwrap().read_exact(&mut line).unwrap();
        assert_eq!(&line, b"READY ");
        let report = handle.close_async().await.unwrap();
        assert_eq!(report.ended_by, childguard::Ending::Eof, "{report}");
    });
}

/// `any([Notify, Connect])` for a server built without notify support: its socket makes it
/// ready (the READY=1 that never comes does not hold the spawn up).
#[test]
fn any_is_ready_on_the_first_condition_that_holds() {
    let site = Listening::new("any-dir");
    let began = Instant::now();
    let handle = ChildHandle::builder(site.server(false))
        .socket(SocketMode::Stdio)
        .ready(Ready::any([
            Ready::Notify,
            Ready::connect(site.socket.as_path()),
        ]))
        .ready_timeout(Duration::from_secs(30))
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect("spawn with Ready::any");
    let returned = monotonic_ns();
    assert!(
        began.elapsed() < Duration::from_secs(20),
        "{:?}",
        began.elapsed()
    );
    site.listens_since_ready(returned);
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    // The NOTIFY_SOCKET was made for the Notify part: its report is there.
    assert!(report.notify.is_some(), "{report}");
}

/// `all([Notify, Connect])`: both hold (slowserver sends READY=1 and listens), spawn returns
/// after both; with a server that never sends READY=1 the same `all` times out naming both.
#[test]
fn all_waits_for_every_condition_and_times_out_naming_them() {
    let site = Listening::new("all-dir");
    let all = || Ready::all([Ready::Notify, Ready::connect(site.socket.as_path())]);
    let handle = ChildHandle::builder(site.server(true))
        .socket(SocketMode::Stdio)
        .ready(all())
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect("spawn with Ready::all");
    site.listens_since_ready(monotonic_ns());
    let report = handle.close().unwrap();
    assert_eq!(report.notify.unwrap().status.as_deref(), Some("ready"));
    let _ = std::fs::remove_file(&site.socket);
    let _ = std::fs::remove_file(&site.stamp);
    // No --notify: the socket listens, READY=1 never comes.
    let err = ChildHandle::builder(site.server(false))
        .socket(SocketMode::Stdio)
        .ready(all())
        .ready_timeout(Duration::from_millis(1500))
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect_err("READY=1 never comes");
    assert_eq!(err.kind(), ErrorKind::Ready);
    let text = err.to_string();
    assert!(
        text.contains("all of: READY=1 on NOTIFY_SOCKET; a connection to"),
        "{text}"
    );
    let report = err.close_report().expect("the close report");
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
}

/// A child that exits first fails an `any` at once, with its status.
#[test]
fn any_fails_at_once_when_the_child_exits() {
    let err = spawn_fails_as_the_child_exits(
        ChildHandle::builder(sh("echo bye; exit 4"))
            .ready(Ready::any([
                Ready::output("never printed"),
                Ready::connect(scratch("no-such-socket")),
            ]))
            .ready_timeout(Duration::from_secs(30)),
        4,
        Duration::from_secs(20),
    );
    let text = err.to_string();
    assert!(text.contains("any of: an output line"), "{text}");
}

#[test]
fn bad_combinations_are_config_errors() {
    let cases = [
        (Ready::any([]), "at least one condition"),
        (Ready::all([]), "at least one condition"),
        (
            Ready::any([Ready::all([Ready::Notify]), Ready::Notify]),
            "cannot be nested",
        ),
        (
            Ready::all([Ready::output("a"), Ready::output("b")]),
            "at most one Ready::Output",
        ),
        (Ready::any([Ready::Accepted]), "SocketMode::Activation"),
    ];
    for (ready, needle) in cases {
        let err = ChildHandle::builder(sh("exec sleep 30"))
            .ready(ready.clone())
            .spawn()
            .expect_err("a bad combination");
        assert_eq!(err.kind(), ErrorKind::Config, "{ready:?}: {err}");
        assert!(err.to_string().contains(needle), "{ready:?}: {err}");
    }
}
