//! Issue 21, item 1: one event loop per process. Every contained, captured server is watched
//! from the one loop thread: its pidfd, its pipe, and its `cgroup.events` in the loop's epoll
//! set — no inotify instance at all, so more contained servers than
//! `fs.inotify.max_user_instances` (128) can be alive at once — and the library's threads do
//! not grow with their number.

use std::collections::BTreeMap;
use std::time::Duration;

use childguard::{Capture, ChildHandle, Containment, Ready, MAX_BACKGROUND_THREADS};
use childguard_tests::cgroups::own_cgroup_dir;
use childguard_tests::*;

/// This process's threads named by the library (`childguard-…`), by name.
fn library_threads() -> BTreeMap<String, usize> {
    let mut names = BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let Ok(comm) = std::fs::read_to_string(task.unwrap().path().join("comm")) else {
            continue; // a thread that just ended
        };
        if comm.starts_with("childguard-") {
            *names.entry(comm.trim().to_owned()).or_insert(0) += 1;
        }
    }
    names
}

/// This process's open fds, and how many of them are inotify instances.
fn fds_and_inotify_instances() -> (usize, usize) {
    let mut fds = 0;
    let mut inotify = 0;
    for fd in std::fs::read_dir("/proc/self/fd").unwrap() {
        let Ok(target) = std::fs::read_link(fd.unwrap().path()) else {
            continue; // the directory's own fd, closed by now
        };
        fds += 1;
        if target.to_string_lossy() == "anon_inode:inotify" {
            inotify += 1;
        }
    }
    (fds, inotify)
}

fn our_cgroups() -> Vec<String> {
    let prefix = format!("childguard-{}-", std::process::id());
    std::fs::read_dir(own_cgroup_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.starts_with(&prefix).then_some(name)
        })
        .collect()
}

/// 200 servers at once, each contained, its stderr captured with an `on_line`, awaited by
/// `Ready::output`: all spawn and get ready; the process holds no inotify instance (the
/// `cgroup.events` watches are epoll registrations) and at most `MAX_BACKGROUND_THREADS`
/// library threads; all close, leaving no cgroup and no child. With an instance per server,
/// spawn #129 failed: `inotify_init1: Too many open files`.
#[test]
fn two_hundred_contained_captured_servers_at_once_need_no_inotify_instance_and_share_the_threads() {
    const N: usize = 200;
    let (fds_before, inotify_before) = fds_and_inotify_instances();
    assert_eq!(inotify_before, 0, "precondition: no inotify instance yet");
    let handles: Vec<ChildHandle> = (0..N)
        .map(|i| {
            ChildHandle::builder(sh("echo ready >&2; exec sleep 600"))
                .contain(Containment::Cgroup)
                .capture(Capture::stderr().on_line(|_, _| {}))
                .ready(Ready::output("ready"))
                .ready_timeout(Duration::from_secs(60))
                .ladder(ladder("TERM:10s,KILL:5s"))
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "contained spawn #{} (needs a writable cgroup v2: CI runs as root): {e}",
                        i + 1
                    )
                })
        })
        .collect();
    let (fds, inotify) = fds_and_inotify_instances();
    let threads = library_threads();
    eprintln!(
        "{N} contained captured servers: {inotify} inotify instance(s), {:.1} fds per server, \
         library threads {threads:?}",
        (fds - fds_before) as f64 / N as f64
    );
    assert_eq!(
        inotify, 0,
        "no inotify instance: every cgroup.events watch is in the loop's epoll set"
    );
    let total: usize = threads.values().sum();
    assert!(
        total <= MAX_BACKGROUND_THREADS,
        "{total} library threads (MAX_BACKGROUND_THREADS is {MAX_BACKGROUND_THREADS}): {threads:?}"
    );
    assert_eq!(threads.get("childguard-loop"), Some(&1), "{threads:?}");
    for handle in handles {
        let report = handle.close().unwrap();
        assert!(report.cgroup.as_ref().unwrap().removed, "{report}");
    }
    assert_eq!(our_cgroups(), Vec::<String>::new());
    assert_eq!(our_children(), Vec::<u32>::new());
    let total: usize = library_threads().values().sum();
    assert!(total <= MAX_BACKGROUND_THREADS, "{:?}", library_threads());
}
