//! Issue 23 item 4: the sd_notify watchdog (`Builder::watchdog`) against slowserver
//! (`--watchdog-every`, `--watchdog-for`, `--watchdog-trigger`, `--notify-send`): kept alive,
//! missed (the ladder in the background, the report), triggered (the callback), the interval
//! changed by the server, bad input noted, and the refusals.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, ErrorKind, Ready, Signal};
use childguard_tests::*;

/// The child's environment, as `/proc/PID/environ` shows it.
fn environ(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    raw.split(|&b| b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// Waits (up to 20 s) for the handle to see a watchdog miss.
fn await_miss(handle: &ChildHandle) -> childguard::WatchdogMiss {
    let mut miss = None;
    eventually(Duration::from_secs(20), || {
        miss = handle.watchdog_missed();
        miss.is_some()
    });
    miss.expect("no watchdog miss within 20 s")
}

#[test]
fn a_server_that_keeps_pinging_is_left_alone_and_gets_watchdog_usec_and_its_own_pid_even_after_env_clear(
) {
    let mut cmd = slowserver(&pinging(None));
    // env_clear, and a WATCHDOG_PID of a supervisor of ours that must not reach the child:
    // it gets its own pid there instead, as systemd sets it.
    cmd.env_clear().env("WATCHDOG_PID", "1");
    let interval = Duration::from_secs(3);
    let handle = ChildHandle::builder(cmd)
        .ready(Ready::Notify)
        .watchdog(interval)
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect("spawn");
    let pid = handle.id().unwrap();
    let env = environ(pid);
    assert!(
        env.contains(&"WATCHDOG_USEC=3000000".to_string()),
        "{env:?}"
    );
    let watchdog_pids: Vec<&String> = env
        .iter()
        .filter(|v| v.starts_with("WATCHDOG_PID="))
        .collect();
    assert_eq!(watchdog_pids, [&format!("WATCHDOG_PID={pid}")], "{env:?}");
    assert!(
        env.iter().any(|v| v.starts_with("NOTIFY_SOCKET=")),
        "{env:?}"
    );
    // Longer than one interval: a watchdog that ignored the pings would have missed by now.
    let pin = pidfd(pid);
    assert!(
        !exited_within(&pin, interval + Duration::from_secs(1)),
        "the server was closed though it pinged"
    );
    assert_eq!(handle.watchdog_missed(), None);
    let report = handle.close().expect("close");
    let notify = report.notify.clone().expect("a notify report");
    assert!(notify.watchdog.is_empty(), "{notify:?}");
    assert!(!report.to_string().contains("watchdog"), "{report}");
}

#[test]
fn a_server_that_stops_pinging_is_closed_with_its_ladder_and_the_report_says_so() {
    let log = scratch("watchdog-missed.log");
    let began = Instant::now();
    let mut args = pinging(Some("300ms"));
    args.extend(["--log", log.to_str().unwrap()]);
    let handle = ChildHandle::builder(slowserver(&args))
        .ready(Ready::Notify)
        .watchdog(Duration::from_millis(500))
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .expect("spawn");
    let pid = handle.id().unwrap();
    let pin = pidfd(pid);
    // Nobody calls anything on the handle: the watchdog closes the server by itself.
    assert!(
        exited_within(&pin, Duration::from_secs(20)),
        "the watchdog did not close a server that stopped pinging"
    );
    let miss = handle.watchdog_missed().expect("the miss is recorded");
    assert!(!miss.triggered);
    assert_eq!(miss.pid, pid);
    assert_eq!(miss.interval, Duration::from_millis(500));
    // The deadline is 500 ms after the arming (at readiness) at the earliest. (Not 800 ms:
    // under load slowserver's last ping may come well before its 300 ms are up.)
    assert!(miss.at >= Duration::from_millis(500), "{miss:?}");
    assert!(miss.at <= began.elapsed(), "{miss:?}");
    let report = handle.close().expect("close");
    let text = report.to_string();
    assert!(text.contains("watchdog missed at +"), "{text}");
    let notify = report.notify.clone().expect("a notify report");
    assert!(
        notify.watchdog[0].starts_with("watchdog missed at +"),
        "{notify:?}"
    );
    assert_noted(&notify.watchdog, "watchdog: sent TERM at +");
    // The server got TERM from the watchdog (logged by slowserver), and exited by it.
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged.lines().any(|l| l == "TERM"), "{logged:?}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        report.status.and_then(|s| s.signal()),
        Some(libc::SIGTERM),
        "{report}"
    );
    // The close itself sent nothing: the server was gone already.
    assert!(report.signals.is_empty(), "{report}");
}

#[test]
fn watchdog_trigger_is_a_miss_at_once_and_the_callback_gets_it_instead_of_a_close() {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let handle = ChildHandle::builder(slowserver(&[
        "--notify",
        "--watchdog-every",
        "20ms",
        "--watchdog-trigger",
        "200ms",
        "--ignore-eof",
    ]))
    .ready(Ready::Notify)
    // A deadline far away: only the trigger can make a miss.
    .watchdog(Duration::from_secs(600))
    .on_watchdog(move |miss| {
        let _ = tx.lock().unwrap().send(miss);
    })
    .ladder(ladder("TERM:5s,KILL:1s"))
    .spawn()
    .expect("spawn");
    let pid = handle.id().unwrap();
    let miss = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the callback was not called within 20 s");
    assert!(miss.triggered, "{miss:?}");
    assert_eq!(miss.pid, pid);
    assert!(miss.to_string().contains("WATCHDOG=trigger"), "{miss}");
    assert_eq!(handle.watchdog_missed(), Some(miss));
    // The callback replaced the close: the server still runs.
    assert!(!exited_within(&pidfd(pid), Duration::from_millis(300)));
    let report = handle.close().expect("close");
    assert_eq!(report.signals.first().map(|s| s.signal), Some(Signal::TERM));
    assert!(
        report.to_string().contains("watchdog missed at +"),
        "{report}"
    );
}

#[test]
fn watchdog_usec_from_the_server_changes_the_interval() {
    // The server asks for 200 ms and never pings; the builder's 600 s would never fire.
    let handle = ChildHandle::builder(slowserver(&[
        "--notify",
        "--notify-send",
        "WATCHDOG_USEC=200000",
        "--ignore-eof",
    ]))
    .ready(Ready::Notify)
    .watchdog(Duration::from_secs(600))
    .on_watchdog(|_| {})
    .spawn()
    .expect("spawn");
    let miss = await_miss(&handle);
    assert_eq!(miss.interval, Duration::from_millis(200), "{miss:?}");
    assert!(!miss.triggered);
    let _report = handle.close().expect("close");
}

#[test]
fn bad_watchdog_messages_are_noted_never_a_panic_and_a_huge_interval_saturates() {
    let handle = ChildHandle::builder(slowserver(&[
        "--notify",
        "--notify-send",
        "WATCHDOG=2\\nWATCHDOG_USEC=garbage\\nWATCHDOG_USEC=-5",
        "--notify-send",
        &format!("WATCHDOG_USEC={}", u64::MAX),
        "--ignore-eof",
    ]))
    .ready(Ready::Notify)
    .watchdog(Duration::from_millis(100))
    .on_watchdog(|_| {})
    .spawn()
    .expect("spawn");
    // The huge interval (the last valid WATCHDOG_USEC=) replaced the 100 ms one: no miss.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(handle.watchdog_missed(), None);
    let report = handle.close().expect("close");
    let ignored = report.notify.expect("a notify report").ignored;
    for bad in [
        "WATCHDOG=\"2\"",
        "WATCHDOG_USEC=\"garbage\"",
        "WATCHDOG_USEC=\"-5\"",
    ] {
        assert!(
            ignored.iter().any(|i| i.starts_with(bad)),
            "{bad}: {ignored:?}"
        );
    }
}

#[test]
fn a_watchdog_needs_ready_notify_and_a_non_zero_interval() {
    let err = ChildHandle::builder(slowserver(&[]))
        .ready(Ready::output("READY"))
        .watchdog(Duration::from_secs(1))
        .spawn()
        .expect_err("a watchdog without a notify socket");
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(
        err.to_string().contains("watchdog needs Ready::Notify"),
        "{err}"
    );
    let err = ChildHandle::builder(slowserver(&["--notify"]))
        .ready(Ready::Notify)
        .watchdog(Duration::ZERO)
        .spawn()
        .expect_err("a zero interval");
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("more than zero"), "{err}");
}
