//! A contained close waits without spinning. The cgroup's watch bell rang when the child joined
//! its cgroup and was emptied only after the leader's exit, so each wait of a contained close
//! returned at once while the leader ran: the closing thread (or the reaper) burnt a CPU
//! through the EOF wait and every grace, ~3,000 `ppoll`s a second, and on a busy machine took
//! that CPU from the very server it waited for (found by the bench's `stdio` scenario: a
//! Python MCP server exited on EOF in 1.4 s under ours against 0.5 s under the SDKs).
//!
//! The measure is CPU time, not wall time: a spinning 2 s wait uses hundreds of ms of CPU even
//! when it shares the cores with two hogs; a sleeping one a few ms. The bound (200 ms) is
//! generous both ways.

use std::process::Command;
use std::time::Duration;

use childguard::{ChildHandle, Containment, Reap, Signal};
use childguard_tests::cgroups::serial;
use childguard_tests::{exited_within, ladder, pidfd, rung};

/// The EOF wait the tests spend: `sleep` reads nothing, so all of it is waited out.
const LADDER: &str = "EOF:2s,KILL:5s";
const MOST_CPU: Duration = Duration::from_millis(200);

/// User + system CPU time from a `/proc/…/stat` file (fields 14 and 15, in clock ticks).
fn cpu_of(stat: &str) -> Duration {
    let text = std::fs::read_to_string(stat).unwrap();
    let fields: Vec<&str> = text[text.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let per_second = rustix::param::clock_ticks_per_second();
    Duration::from_secs_f64(ticks as f64 / per_second as f64)
}

fn contained_sleep(reap: Reap) -> ChildHandle {
    let mut cmd = Command::new("sleep");
    cmd.arg("30");
    ChildHandle::builder(cmd)
        .ladder(ladder(LADDER))
        .contain(Containment::Cgroup)
        .reap(reap)
        .spawn()
        .expect("contained spawn (needs a writable cgroup v2: CI runs as root)")
}

#[test]
fn a_contained_close_sleeps_through_its_eof_wait() {
    let _serial = serial();
    let handle = contained_sleep(Reap::Blocking);
    let before = cpu_of("/proc/thread-self/stat");
    let report = handle.close().unwrap();
    let used = cpu_of("/proc/thread-self/stat") - before;
    assert_eq!(report.ended_by, rung(0, Signal::KILL), "{report}");
    assert!(report.total >= Duration::from_secs(2), "{report}");
    assert!(
        used < MOST_CPU,
        "the close used {used:?} of CPU over its 2 s EOF wait: it spun ({report})"
    );
}

#[test]
fn the_reaper_sleeps_through_a_contained_eof_wait() {
    let _serial = serial();
    let handle = contained_sleep(Reap::Background);
    let pid = handle.id().unwrap();
    let pin = pidfd(pid);
    // Every thread of this process: the reaper climbs on the library's event loop thread.
    let before = cpu_of("/proc/self/stat");
    drop(handle);
    assert!(
        exited_within(&pin, Duration::from_secs(20)),
        "the reaper never killed {pid}"
    );
    let used = cpu_of("/proc/self/stat") - before;
    assert!(
        used < MOST_CPU,
        "the process used {used:?} of CPU while the reaper waited out a 2 s EOF wait: it spun"
    );
}

/// The tokio face did not spin (tokio's epoll is edge-triggered: the bell, rung once, woke it
/// once); kept so that it stays so.
#[test]
fn close_async_sleeps_through_a_contained_eof_wait() {
    let _serial = serial();
    let handle = contained_sleep(Reap::Blocking);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A current-thread runtime: the close's waits run on this very thread.
    let before = cpu_of("/proc/thread-self/stat");
    let report = runtime.block_on(handle.close_async()).unwrap();
    let used = cpu_of("/proc/thread-self/stat") - before;
    assert_eq!(report.ended_by, rung(0, Signal::KILL), "{report}");
    assert!(
        used < MOST_CPU,
        "close_async used {used:?} of CPU over its 2 s EOF wait: it spun ({report})"
    );
}
