//! Many contained servers at once (issue 21, "Must show"): contained (a cgroup each), stderr
//! captured, `Ready::output`-awaited servers, many alive at once in this one process. The bench
//! (`childguard-bench --json scale`) measures 1,000 against 100; these tests check the same
//! promises at 200, cheaply enough for a 2-CPU CI:
//! - all spawn, all get ready, all close, and nothing is left: no cgroup, no process;
//! - no inotify instance for their `cgroup.events` watches, which are epoll registrations
//!   (`fs.inotify.max_user_instances` is 128 per user, shared with every other program of that
//!   user: one instance per child made contained spawn #129 fail with `inotify_init1: Too many
//!   open files`);
//! - the library's threads stay within a constant bound, the same at 20 servers as at 200.
//!
//! Every test holds `serial()`: each counts this process's threads, fds, cgroups and children.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

use childguard::{Capture, ChildHandle, Containment, Ladder, Ready, SocketMode};
use childguard_tests::cgroups::{cgroup_of, own_cgroup_dir, serial};
use childguard_tests::{exited_within, is_alive, our_children, pidfd, slowserver};

/// Servers alive at once.
const N: usize = 200;
/// The small fleet the thread count at [`N`] is compared with.
const FEW: usize = 20;
/// The most threads the library may run in this process, whatever the number of children: the
/// issue's bound (6, "peak threads ≤ 6 whatever N"). Counted as the threads whose name starts
/// with `childguard` (the library names every thread it starts so; the test harness's are named
/// after the tests). To be replaced by the library's documented constant once it has one (the
/// event-core work, likely `childguard::MAX_BACKGROUND_THREADS`).
const MAX_LIBRARY_THREADS: usize = 6;
/// The ready line: slowserver `--stderr-flood 100` writes one 100-byte numbered log line
/// (`slowserver log line 0 ……`) on stderr before its `READY` on the socket.
const READY_TEXT: &str = "slowserver log line";
/// Only a guard against a server that never gets ready (a contained spawn is ~3 ms idle, ~30 ms
/// on a loaded 2-CPU machine).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// One contained, captured, `Ready::output`-awaited server, spawn number `number` of `of`.
fn spawn_server(number: usize, of: usize) -> ChildHandle {
    ChildHandle::builder(slowserver(&["--stderr-flood", "100"]))
        .socket(SocketMode::Stdio)
        // slowserver exits on EOF; the KILL is only a guard.
        .ladder("EOF:10s,KILL:10s".parse::<Ladder>().unwrap())
        .contain(Containment::Cgroup)
        .capture(Capture::stderr())
        .ready(Ready::output(READY_TEXT))
        .ready_timeout(READY_TIMEOUT)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "contained spawn #{number} of {of} failed: {e} (containment needs a writable \
                 cgroup v2: CI runs as root)"
            )
        })
}

/// Spawns servers until `fleet` holds `upto`, sampling the library's threads after each spawn;
/// returns the most seen.
fn grow(fleet: &mut Vec<ChildHandle>, upto: usize, of: usize) -> usize {
    let mut peak = library_threads().len();
    while fleet.len() < upto {
        let handle = spawn_server(fleet.len() + 1, of);
        let tail = handle.output_tail().unwrap_or_default();
        assert!(
            tail.contains(READY_TEXT),
            "server #{} returned from spawn() without its ready line in the tail: {tail:?}",
            fleet.len() + 1
        );
        fleet.push(handle);
        peak = peak.max(library_threads().len());
    }
    peak
}

/// Closes every handle; each close must remove its cgroup. Returns the most library threads
/// seen during the closes.
fn close_all(fleet: Vec<ChildHandle>) -> usize {
    let mut peak = library_threads().len();
    for (i, handle) in fleet.into_iter().enumerate() {
        let report = handle
            .close()
            .unwrap_or_else(|e| panic!("close #{} failed: {e}", i + 1));
        let cgroup = report
            .cgroup
            .as_ref()
            .expect("a contained close reports its cgroup");
        assert!(
            cgroup.removed && cgroup.members_left == 0 && report.status.is_some(),
            "close #{}: not reaped or cgroup not removed: {report}",
            i + 1
        );
        peak = peak.max(library_threads().len());
    }
    peak
}

/// The names of this process's threads that the library started (`/proc/self/task/*/comm`
/// starting with `childguard`; the kernel keeps 15 bytes of a name, e.g. `childguard-capt`).
fn library_threads() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .filter(|name| name.starts_with("childguard"))
        .collect()
}

/// This process's inotify instances: fds whose link reads `anon_inode:inotify`.
fn inotify_instances() -> usize {
    childguard_tests::fd_table()
        .iter()
        .filter(|(_, target)| target == "anon_inode:inotify")
        .count()
}

/// The `childguard-<our pid>-*` cgroups in the containment parent (the cgroup this process
/// runs in, found from mountinfo): made by us and not removed.
fn our_cgroups() -> Vec<PathBuf> {
    let prefix = format!("childguard-{}-", std::process::id());
    std::fs::read_dir(own_cgroup_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// Each server holds ~6 fds of ours (socket, pidfd, capture pipe, cgroup files): 200 need more
/// than a CI runner's default soft limit of 1,024. Raises the soft limit to the hard one.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    setrlimit(Resource::Nofile, limit).expect("raising RLIMIT_NOFILE to its hard limit");
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    assert!(
        soft >= (20 * N) as u64,
        "precondition: RLIMIT_NOFILE hard limit {soft} is below {} (20 fds per server)",
        20 * N
    );
}

/// Live children of this process (alive: state not `Z`).
fn live_children() -> Vec<u32> {
    our_children()
        .into_iter()
        .filter(|&p| is_alive(p))
        .collect()
}

/// Precondition of the leftover counts: no cgroup of ours is there before. Returns the live
/// children of ours after one warm-up server was spawned and closed: whatever the library
/// starts once per process on first use (a helper process, as one guardian per process may
/// be) is not a leftover of the fleet.
fn warm_up_and_require_nothing_left(test: &str) -> Vec<u32> {
    let cgroups = our_cgroups();
    assert!(
        cgroups.is_empty(),
        "{test}: precondition: cgroups of ours already there: {cgroups:?}"
    );
    let report = spawn_server(1, 1).close().expect("warm-up close");
    assert!(
        report.cgroup.as_ref().is_some_and(|c| c.removed),
        "{test}: warm-up: {report}"
    );
    live_children()
}

#[test]
fn two_hundred_contained_captured_servers_alive_at_once_spawn_get_ready_close_and_leave_nothing() {
    let _serial = serial();
    raise_nofile();
    let helpers = warm_up_and_require_nothing_left("two_hundred_contained_servers");
    let mut fleet = Vec::with_capacity(N);
    grow(&mut fleet, N, N);
    // All alive at once, each in a cgroup of its own; pinned so that the check after the close
    // asks these processes, never a later one that reuses a pid.
    let mut pins: Vec<(u32, OwnedFd)> = Vec::with_capacity(N);
    let mut cgroups = std::collections::HashSet::new();
    for handle in &fleet {
        let pid = handle.id().expect("a spawned handle has a pid");
        assert!(is_alive(pid), "server {pid} is not alive with the fleet up");
        let cgroup = cgroup_of(pid).unwrap_or_default();
        assert!(
            cgroup.contains(&format!("childguard-{}-", std::process::id())),
            "server {pid} is not in a cgroup of ours: {cgroup:?}"
        );
        cgroups.insert(cgroup);
        pins.push((pid, pidfd(pid)));
    }
    assert_eq!(cgroups.len(), N, "{N} servers share cgroups");
    assert_eq!(our_cgroups().len(), N);
    close_all(fleet);
    let left = our_cgroups();
    assert!(
        left.is_empty(),
        "{} cgroups left after the close: {left:?}",
        left.len()
    );
    // close() returns once its child is reaped: every pidfd is readable by now.
    let alive: Vec<u32> = pins
        .iter()
        .filter(|(_, pin)| !exited_within(pin, Duration::ZERO))
        .map(|(pid, _)| *pid)
        .collect();
    assert!(
        alive.is_empty(),
        "{} servers alive after the close: {alive:?}",
        alive.len()
    );
    let others: Vec<u32> = live_children()
        .into_iter()
        .filter(|p| !helpers.contains(p))
        .collect();
    assert!(
        others.is_empty(),
        "live children of ours after the close, other than the per-process ones there \
         before the fleet ({helpers:?}): {others:?}"
    );
}

#[test]
fn no_inotify_instance_watches_any_contained_server() {
    let _serial = serial();
    raise_nofile();
    let before = inotify_instances();
    assert_eq!(
        before, 0,
        "precondition: {before} inotify instances before any server of this test"
    );
    let mut fleet = Vec::with_capacity(N);
    for upto in [FEW, N] {
        grow(&mut fleet, upto, N);
        let now = inotify_instances();
        assert_eq!(
            now, 0,
            "{upto} contained servers alive hold {now} inotify instances; want none: their \
             cgroup.events watches are in the event loop's epoll set"
        );
    }
    close_all(fleet);
}

#[test]
fn library_threads_stay_within_the_bound_and_the_same_at_20_and_200_servers() {
    let _serial = serial();
    raise_nofile();
    // Like with like: each fleet is grown and closed, and its peak is the most library threads
    // seen after any of its spawns or closes (what the first fleet starts on first use is
    // counted in both).
    let mut peaks = Vec::new();
    for n in [FEW, N] {
        let mut fleet = Vec::with_capacity(n);
        let grown = grow(&mut fleet, n, n);
        let names = library_threads();
        peaks.push((n, grown.max(close_all(fleet)), names));
    }
    let [(_, at_few, names_at_few), (_, at_many, names_at_many)] = &peaks[..] else {
        unreachable!("two fleets")
    };
    assert!(
        *at_few <= MAX_LIBRARY_THREADS && *at_many <= MAX_LIBRARY_THREADS,
        "library threads: {at_few} at {FEW} servers ({names_at_few:?}), {at_many} at {N} \
         ({names_at_many:?}); the bound is {MAX_LIBRARY_THREADS}"
    );
    assert_eq!(
        at_few, at_many,
        "library threads grew with the servers: {at_few} at {FEW} ({names_at_few:?}), {at_many} \
         at {N} ({names_at_many:?})"
    );
}
