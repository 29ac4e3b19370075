//! The guardian (issue 21, item 4): one per supervising process, forked without exec (no
//! `/bin/sh`), holding none of our fds, never able to block or `SIGPIPE` the host, with the
//! freeze fallback where `cgroup.kill` is missing. Each test runs `cg-supervisor` (or this
//! process) with contained `exit_with_parent` servers and looks at the guardian from outside,
//! through `/proc`.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use childguard::{ChildHandle, Containment, SocketMode};
use childguard_tests::cgroups::{cgroup_mount, cgroup_of, guardians_of, own_cgroup_dir, serial};
use childguard_tests::{
    bin, eventually, exited_within, next_supervised_child, pidfd, proc_ppid, proc_state,
};

/// A `cg-supervisor` of contained `exit_with_parent` servers (slowserver with `server_args`),
/// with `ours` flags; returns it with every server's pid and ready line once all are ready.
fn supervisor(ours: &[&str], server_args: &[&str]) -> (Child, Vec<(u32, String)>) {
    supervisor_of(&bin("cg-slowserver"), ours, server_args)
}

/// [`supervisor`] of another program.
fn supervisor_of(
    program: &std::path::Path,
    ours: &[&str],
    server_args: &[&str],
) -> (Child, Vec<(u32, String)>) {
    let mut sup = Command::new(bin("cg-supervisor"))
        .arg(program)
        .args(["--exit-with-parent", "--contain"])
        .args(ours)
        .arg("--")
        .args(server_args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let count: usize = ours
        .iter()
        .position(|a| *a == "--count")
        .map_or(1, |i| ours[i + 1].parse().unwrap());
    let mut out = std::io::BufReader::new(sup.stdout.take().unwrap());
    let mut servers = Vec::new();
    for _ in 0..count {
        servers.push(next_supervised_child(&mut out));
    }
    (sup, servers)
}

/// The cgroup directory of a contained server.
fn cgroup_dir(pid: u32) -> PathBuf {
    let path = cgroup_of(pid).expect("the server's /proc/PID/cgroup");
    cgroup_mount().join(path.trim_start_matches('/'))
}

/// A pid from a slowserver ready line (`key=` field).
fn field(ready: &str, key: &str) -> u32 {
    ready
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {ready:?}"))
}

/// `SIGKILL`s the supervisor, then asserts every pinned process exits and every directory
/// goes within 20 s; `SIGKILL`s what is left either way, so a failure leaves nothing.
fn kill_supervisor_and_expect_all_gone(mut sup: Child, pins: &[(u32, OwnedFd)], dirs: &[PathBuf]) {
    sup.kill().unwrap();
    sup.wait().unwrap();
    let outlived: Vec<u32> = pins
        .iter()
        .filter(|(_, fd)| !exited_within(fd, Duration::from_secs(20)))
        .map(|(pid, _)| *pid)
        .collect();
    for (_, fd) in pins {
        let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
    }
    let left: Vec<&PathBuf> = dirs
        .iter()
        .filter(|d| !eventually(Duration::from_secs(20), || !d.exists()))
        .collect();
    for (_, fd) in pins {
        exited_within(fd, Duration::from_secs(20));
    }
    for dir in &left {
        let _ = std::fs::remove_dir(dir);
    }
    assert!(
        outlived.is_empty(),
        "outlived their SIGKILLed supervisor by 20 s: {outlived:?}"
    );
    assert!(left.is_empty(), "cgroups left after 20 s: {left:?}");
}

#[test]
fn twenty_contained_children_share_one_guardian_which_kills_and_removes_all_at_the_supervisors_death(
) {
    let _serial = serial();
    let (sup, servers) = supervisor(&["--count", "20"], &["--daemonize"]);
    let guardians = guardians_of(sup.id());
    // Pin everything before judging, so that a failure still cleans up.
    let mut pins = Vec::new();
    let mut dirs = Vec::new();
    for (leader, ready) in &servers {
        dirs.push(cgroup_dir(*leader));
        pins.push((*leader, pidfd(*leader)));
        let daemon = field(ready, "grandchild=");
        pins.push((daemon, pidfd(daemon)));
    }
    let guardian_pins: Vec<(u32, OwnedFd)> = guardians.iter().map(|&g| (g, pidfd(g))).collect();
    assert_eq!(dirs.len(), 20);
    let one = guardians.len() == 1;
    kill_supervisor_and_expect_all_gone(sup, &pins, &dirs);
    assert!(
        one,
        "20 contained children, {} guardians: {guardians:?}",
        guardians.len()
    );
    for (pid, fd) in &guardian_pins {
        assert!(
            exited_within(fd, Duration::from_secs(20)),
            "the guardian {pid} outlived its job by 20 s"
        );
    }
}

#[test]
fn the_guardian_holds_only_its_own_two_fds_runs_no_shell_and_ignores_the_terminals_signals() {
    let _serial = serial();
    // The supervisor holds an fd without O_CLOEXEC: std's Command passes such fds on.
    let (sup, servers) = supervisor(&["--leak-fd"], &[]);
    let (leader, _) = servers[0];
    let dir = cgroup_dir(leader);
    let pins = [(leader, pidfd(leader))];
    let guardians = guardians_of(sup.id());
    let facts = guardians.first().map(|&g| {
        let fds: Vec<String> = std::fs::read_dir(format!("/proc/{g}/fd"))
            .unwrap()
            .flatten()
            .map(|e| std::fs::read_link(e.path()).unwrap().display().to_string())
            .collect();
        let exe = std::fs::read_link(format!("/proc/{g}/exe")).unwrap();
        let cwd = std::fs::read_link(format!("/proc/{g}/cwd")).unwrap();
        let status = std::fs::read_to_string(format!("/proc/{g}/status")).unwrap();
        let ignored = status
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
            .unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{g}/stat")).unwrap();
        let after = stat.rsplit_once(')').unwrap().1;
        let session: u32 = after.split_whitespace().nth(3).unwrap().parse().unwrap();
        (g, fds, exe, cwd, ignored, session)
    });
    let sup_exe = std::fs::read_link(format!("/proc/{}/exe", sup.id())).unwrap();
    let sup_pid = sup.id();
    kill_supervisor_and_expect_all_gone(sup, &pins, &[dir]);

    assert_eq!(
        guardians.len(),
        1,
        "guardians of the supervisor: {guardians:?}"
    );
    let (g, mut fds, exe, cwd, ignored, session) = facts.unwrap();
    fds.sort();
    assert_eq!(fds.len(), 2, "the guardian's fds: {fds:?}");
    assert!(
        fds[0] == "anon_inode:[pidfd]" && fds[1].starts_with("socket:["),
        "the guardian's fds: {fds:?}"
    );
    assert_eq!(
        exe,
        sup_exe,
        "the guardian runs {} (a shell?)",
        exe.display()
    );
    assert_eq!(cwd, PathBuf::from("/"));
    assert_ne!(
        proc_ppid(g),
        Some(sup_pid),
        "the guardian is the supervisor's child"
    );
    assert_eq!(session, g, "the guardian leads no session of its own");
    for signo in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
        assert!(
            ignored & (1 << (signo - 1)) != 0,
            "signal {signo} not ignored by the guardian (SigIgn {ignored:x})"
        );
    }
}

/// `SIGSTOP`s `pid` and waits until `/proc` says it is stopped.
fn stop(pid: u32) {
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::STOP,
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || proc_state(pid) == Some('T')),
        "{pid} not stopped after 20 s"
    );
}

#[test]
fn a_stopped_guardian_does_not_block_a_close() {
    let _serial = serial();
    let handle = ChildHandle::builder(childguard_tests::slowserver(&[]))
        .socket(SocketMode::Stdio)
        .contain(Containment::Cgroup)
        .exit_with_parent(true)
        .spawn()
        .expect("contained spawn (needs a writable cgroup v2: CI runs as root)");
    childguard_tests::read_ready(&handle);
    let guardians = guardians_of(std::process::id());
    assert_eq!(
        guardians.len(),
        1,
        "guardians of this process: {guardians:?}"
    );
    let guardian = guardians[0];
    stop(guardian);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(handle.close());
    });
    let closed = rx.recv_timeout(Duration::from_secs(20));
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(guardian as i32).unwrap(),
        rustix::process::Signal::CONT,
    );
    let report = closed
        .expect("the close did not return within 20 s with the guardian stopped")
        .expect("close");
    let cgroup = report
        .cgroup
        .clone()
        .expect("a contained close reports its cgroup");
    assert!(cgroup.removed && !cgroup.path.exists(), "{report}");
}

/// A server whose two `setsid`'d sleepers never end by themselves (no socket writes that
/// could `SIGPIPE` them, no reads that could see EOF): only a kill of every member of its
/// cgroup ends them once the leader is gone.
const SLEEPERS: &str = "setsid sleep 1000 & setsid sleep 1000 & echo READY; exec sleep 1000";

#[test]
fn without_cgroup_kill_the_guardian_freezes_kills_each_member_and_removes_the_cgroup() {
    let _serial = serial();
    // A parent of our own: another process's sweep of stale cgroups (which kills those of
    // dead supervisors in the parent it uses) must not do the guardian's job for it.
    let parent =
        Parent(own_cgroup_dir().join(format!("cg-guardian-freeze-{}", std::process::id())));
    std::fs::create_dir(&parent.0).unwrap();
    let (sup, servers) = supervisor_of(
        std::path::Path::new("/bin/sh"),
        &[
            "--no-cgroup-kill",
            "--cgroup-parent",
            parent.0.to_str().unwrap(),
        ],
        &["-c", SLEEPERS],
    );
    let (leader, _) = servers[0];
    let dir = cgroup_dir(leader);
    assert!(
        dir.join("cgroup.freeze").exists(),
        "this kernel has no cgroup.freeze"
    );
    let members: Vec<u32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let pins: Vec<(u32, OwnedFd)> = members.iter().map(|&p| (p, pidfd(p))).collect();
    assert!(
        members.len() >= 3,
        "members of the server's cgroup: {members:?}"
    );
    kill_supervisor_and_expect_all_gone(sup, &pins, &[dir]);
}

/// A cgroup directory of the test's, removed when the test ends (passed or failed).
struct Parent(PathBuf);

impl Drop for Parent {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_guardian_killed_by_hand_is_replaced_at_the_next_spawn_and_its_cgroups_handed_over() {
    let _serial = serial();
    // A parent of our own: another process's stale sweep must not do the guardian's job.
    let parent = Parent(own_cgroup_dir().join(format!("cg-guardian-again-{}", std::process::id())));
    std::fs::create_dir(&parent.0).unwrap();
    let mut sup = Command::new(bin("cg-supervisor"))
        .arg("/bin/sh")
        .args([
            "--exit-with-parent",
            "--contain",
            "--more-on-stdin",
            "--cgroup-parent",
        ])
        .arg(&parent.0)
        .args(["--", "-c", SLEEPERS])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(sup.stdout.take().unwrap());
    let (first, _) = next_supervised_child(&mut out);
    let first_dir = cgroup_dir(first);
    let members = |dir: &PathBuf| -> Vec<(u32, OwnedFd)> {
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .map(|p| (p, pidfd(p)))
            .collect()
    };
    let mut pins = members(&first_dir);
    let before = guardians_of(sup.id());
    assert_eq!(before.len(), 1, "guardians of the supervisor: {before:?}");
    let old = pidfd(before[0]);
    childguard_tests::sigkill(before[0]);
    assert!(
        exited_within(&old, Duration::from_secs(20)),
        "the guardian survived SIGKILL"
    );
    // The next guarded spawn.
    use std::io::Write;
    sup.stdin.as_mut().unwrap().write_all(b"more\n").unwrap();
    let (second, _) = next_supervised_child(&mut out);
    let second_dir = cgroup_dir(second);
    pins.extend(members(&second_dir));
    let after = guardians_of(sup.id());
    let sup_pid = sup.id();
    kill_supervisor_and_expect_all_gone(sup, &pins, &[first_dir, second_dir]);
    assert_eq!(
        after.len(),
        1,
        "guardians of {sup_pid} after the second spawn: {after:?}"
    );
    assert_ne!(after[0], before[0]);
}
