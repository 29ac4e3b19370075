//! Issue 23 item 4: `MAINPID=` against slowserver `--main-worker` (a wrapper that forks its
//! server and names it): the close's catchable rungs go to the named process, not the child;
//! a `MAINPID=` outside the child's tree (or cgroup), `0`, garbage or a process that does not
//! exist is refused and noted, and the ladder stays on the child.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use childguard::{ChildHandle, Containment, Ready, Signal};
use childguard_tests::cgroups::serial;
use childguard_tests::*;

/// The signals slowserver logged, without the `CONT` that follows every catchable rung: it is
/// best effort, and whether it arrives before the worker exits on the TERM is the scheduler's
/// choice (under load it does, and the signal thread may log it first).
fn logged(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| *l != "CONT")
        .map(str::to_owned)
        .collect()
}

fn redirects_the_ladder(name: &str, contain: bool) {
    let worker_log = scratch(&format!("{name}-worker.log"));
    let wrapper_log = scratch(&format!("{name}-wrapper.log"));
    let cmd: Command = slowserver(&[
        "--notify",
        "--main-worker",
        worker_log.to_str().unwrap(),
        "--log",
        wrapper_log.to_str().unwrap(),
        "--ignore-eof",
    ]);
    let mut builder = ChildHandle::builder(cmd)
        .ready(Ready::Notify)
        .ladder(ladder("TERM:10s,KILL:1s"));
    if contain {
        builder = builder.contain(Containment::Cgroup);
    }
    let handle = builder.spawn().expect("spawn");
    let child = handle.id().unwrap();
    let report = handle.close().expect("close");
    let notify = report.notify.clone().expect("a notify report");
    let main = notify.main_pid.expect("MAINPID accepted");
    assert_ne!(main, child);
    assert!(
        notify.main[0] == format!("MAINPID={main} accepted: the close's catchable rungs go to it"),
        "{notify:?}"
    );
    assert!(
        notify
            .main
            .contains(&format!("TERM to the main process {main}")),
        "{notify:?}"
    );
    // The worker got TERM and the wrapper did not: it exited because its server did, with the
    // server's 128 + TERM.
    assert_eq!(logged(&worker_log), ["TERM"], "{report}");
    assert!(
        logged(&wrapper_log).is_empty(),
        "{:?}",
        logged(&wrapper_log)
    );
    assert_eq!(
        report.status.and_then(|s| s.code()),
        Some(128 + libc::SIGTERM),
        "{report}"
    );
    assert_eq!(report.signals.len(), 1, "{report}");
    let sent = report.signals[0];
    assert_eq!(sent.signal, Signal::TERM);
    assert!(!sent.to_group && !sent.to_cgroup, "{report}");
}

#[test]
fn mainpid_of_a_forked_worker_gets_the_ladder_instead_of_the_child() {
    redirects_the_ladder("mainpid", false);
}

#[test]
fn mainpid_in_the_cgroup_gets_the_ladder_when_contained() {
    let _serial = serial();
    redirects_the_ladder("mainpid-contained", true);
}

fn refused(contain: bool) -> (childguard::CloseReport, Vec<String>) {
    let mut builder = ChildHandle::builder(slowserver(&[
        "--notify",
        "--notify-send",
        "MAINPID=1",
        "--notify-send",
        "MAINPID=0\\nMAINPID=garbage\\nMAINPID=-4",
        "--notify-send",
        "MAINPID=4294967295",
        "--ignore-eof",
    ]))
    .ready(Ready::Notify)
    .ladder(ladder("TERM:10s,KILL:1s"));
    if contain {
        builder = builder.contain(Containment::Cgroup);
    }
    let report = builder.spawn().expect("spawn").close().expect("close");
    let notify = report.notify.clone().expect("a notify report");
    assert_eq!(notify.main_pid, None, "{notify:?}");
    for bad in ["\"0\"", "\"garbage\"", "\"-4\"", "\"4294967295\""] {
        let want = format!("MAINPID={bad} from pid");
        assert!(
            notify
                .main
                .iter()
                .any(|n| n.starts_with(&want) && n.ends_with("refused: not a process id")),
            "{want}: {notify:?}"
        );
    }
    // The ladder stayed on the child, which TERM ended.
    assert_eq!(
        report.status.and_then(|s| s.signal()),
        Some(libc::SIGTERM),
        "{report}"
    );
    (report, notify.main)
}

#[test]
fn mainpid_outside_the_tree_and_garbage_are_refused_and_noted() {
    let (_, main) = refused(false);
    assert!(
        main.iter()
            .any(|n| n.starts_with("MAINPID=1 refused: not a descendant of the child")),
        "{main:?}"
    );
}

#[test]
fn mainpid_outside_the_cgroup_is_refused_when_contained() {
    let _serial = serial();
    let (_, main) = refused(true);
    assert!(
        main.iter()
            .any(|n| n.starts_with("MAINPID=1 refused: outside the child's cgroup")),
        "{main:?}"
    );
}

#[test]
fn a_main_handed_over_twice_is_closed_through_the_last_one() {
    // A wrapper that forks a main, names it, replaces it (the first one ends) with a second,
    // names that one with READY=1, and waits for it: the close reaches the server through the
    // last MAINPID= (issue 34 item 5: the main process is a pinned target, as the watchdog's).
    let notify = bin("cg-notify");
    let script = format!(
        "sleep 60 & first=$!; '{n}' MAINPID=$first; kill $first; wait $first; \
         sleep 60 & second=$!; echo $first $second; '{n}' MAINPID=$second READY=1; wait $second",
        n = notify.display()
    );
    let mut cmd = sh(&script);
    cmd.stdout(std::process::Stdio::piped());
    // Contained: cg-notify sends and exits, and sh reaps it at once; uncontained, a sender
    // reaped before its datagram is read has no parent left to judge it by (refused), while
    // the kernel keeps a reaped process's cgroup.
    let _serial = serial();
    let mut handle = ChildHandle::builder(cmd)
        .ready(Ready::Notify)
        .contain(Containment::Cgroup)
        .ladder(ladder("TERM:10s,KILL:1s"))
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(handle.stdout().expect("stdout")),
        &mut line,
    )
    .expect("the mains' pids");
    let pids: Vec<u32> = line
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect();
    let (first, second) = (pids[0], pids[1]);
    let report = handle.close().expect("close");
    let notify = report.notify.clone().expect("a notify report");
    assert_eq!(notify.main_pid, Some(second), "{notify:?}");
    assert!(
        notify
            .main
            .contains(&format!("TERM to the main process {second}")),
        "{notify:?}"
    );
    assert!(
        !notify
            .main
            .iter()
            .any(|n| n.contains(&format!("to the main process {first}"))),
        "{notify:?}"
    );
    // The wrapper exited because its server did: `wait` gives 128 + TERM.
    assert_eq!(
        report.status.and_then(|s| s.code()),
        Some(128 + libc::SIGTERM),
        "{report}"
    );
    assert_eq!(report.signals.len(), 1, "{report}");
    assert!(!is_alive(first) && !is_alive(second), "{report}");
}
