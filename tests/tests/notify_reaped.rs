//! Issue 22, item 4: a helper that sends `READY=1` and exits at once
//! (`sh -c 'helper; exec server'`), judged after the shell has already reaped it — made
//! certain, not left to the scheduler, by the `failpoints` hook that holds the notify socket
//! between reading each datagram and judging its sender until the sender is reaped. A test
//! process of its own: the hook is process-wide, armed by every test here and never disarmed.

use std::time::Duration;

use childguard::{ChildHandle, Containment, NotifyAccess, Ready};
use childguard_tests::*;

/// 40 spawns, every one ready: the contained child's cgroup is what the kernel still knows of
/// a reaped sender (`PIDFD_INFO_EXIT`), read through the pidfd it attached when it sent.
/// (Old code, which walked `/proc` from the pid after the fact: the first spawn timed out with
/// "a datagram from pid …, not the child or a descendant".)
#[test]
fn a_helper_reaped_before_its_ready_is_read_still_counts_40_times() {
    childguard::failpoint::set_notify_await_reaped(true);
    let helper = bin("cg-notify");
    for i in 0..40 {
        let script = format!(
            "{} READY=1 STATUS=helper-{i}; exec sleep 600",
            helper.display()
        );
        let handle = ChildHandle::builder(sh(&script))
            .ready(Ready::Notify)
            .notify_access(NotifyAccess::All)
            .contain(Containment::Cgroup)
            .ready_timeout(Duration::from_secs(30))
            .ladder(ladder("KILL:10s"))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {i}: {e}"));
        let report = handle.close().expect("close");
        let notify = report.notify.expect("a notify report");
        assert_eq!(
            notify.status,
            Some(format!("helper-{i}")),
            "spawn {i}: {notify:?}"
        );
        assert!(notify.ignored.is_empty(), "spawn {i}: {notify:?}");
    }
}

/// Uncontained, the kernel forgets a reaped sender's parent: the helper's `READY=1` cannot
/// be placed and is refused, and the note says why and what keeps it (`contain()`); the main
/// process's own `READY=1` then counts.
#[test]
fn uncontained_a_reaped_helper_is_refused_with_the_reason() {
    childguard::failpoint::set_notify_await_reaped(true);
    let helper = bin("cg-notify");
    let script = format!(
        "{h} READY=1 STATUS=helper; exec {h} READY=1 STATUS=main -- sleep 600",
        h = helper.display()
    );
    let handle = ChildHandle::builder(sh(&script))
        .ready(Ready::Notify)
        .ready_timeout(Duration::from_secs(60))
        .ladder(ladder("KILL:10s"))
        .process_group(true)
        .spawn()
        .expect("spawn");
    let notify = handle
        .close()
        .expect("close")
        .notify
        .expect("a notify report");
    assert_eq!(notify.status.as_deref(), Some("main"), "{notify:?}");
    assert_eq!(notify.ignored.len(), 1, "{notify:?}");
    assert!(
        notify.ignored[0].contains("exited and was reaped before its datagram was read")
            && notify.ignored[0].contains("contain()"),
        "{notify:?}"
    );
}
