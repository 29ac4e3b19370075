//! Containment leaves no cgroup behind (issue 22, item 3): the cgroups a server made inside
//! its own are removed bottom-up by the close; the stale cgroups of dead supervisors are
//! killed, removed and reported by the first contained spawn under their parent, those of live
//! ones left alone; and a child that cannot *join* its cgroup (a non-root supervisor with a
//! `cgroup_parent` outside its own subtree) falls back with `BestEffort`, and fails clearly
//! with `Cgroup`.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use childguard::{ChildHandle, Containment, Ladder, SocketMode};
use childguard_tests::cgroups::{self, cgroup_mount, force_remove, scratch_parent, serial, tree};
use childguard_tests::{bin, exited_within, our_children, pidfd, read_ready, slowserver};

/// The cgroup path of `pid` (its `0::` line); the process must exist.
fn cgroup_of(pid: u32) -> String {
    cgroups::cgroup_of(pid).unwrap_or_else(|| panic!("no /proc/{pid}/cgroup"))
}

/// A `sleep 1000` placed in the cgroup `dir` before it execs (it writes its pid to
/// `cgroup.procs` and says so on stdout, which we read).
fn sleeper_in(dir: &Path) -> Child {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("echo $$ > \"$1/cgroup.procs\" && echo in && exec sleep 1000")
        .arg("sh")
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(
        line.trim(),
        "in",
        "could not place a sleeper in {}",
        dir.display()
    );
    child
}

/// A server (`sh -c`, the cgroup2 mount as `$1`) that makes two levels of cgroups inside its
/// own, moves a sleeping child into the deepest, prints `ready <its pid>`, and stays — as a
/// nested `childguard run --contain` or a container runtime does.
const NESTING_SERVER: &str = r#"cg="$1$(sed -n 's/^0:://p' /proc/self/cgroup)"
mkdir -p "$cg/inner/deeper" "$cg/other/x" || exit 1
sleep 1000 &
echo $! > "$cg/inner/deeper/cgroup.procs" || exit 1
echo "ready $!"
exec sleep 1000"#;

#[test]
fn a_server_that_made_cgroups_of_its_own_leaves_no_cgroup_and_no_process() {
    let _serial = serial();
    // The server makes two levels of cgroups inside its own, moves a sleeping child into the
    // deepest, and stays (as a nested `childguard run --contain` or a container runtime does).
    let script = NESTING_SERVER;
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).arg("sh").arg(cgroup_mount());
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .ladder("KILL:10s".parse::<Ladder>().unwrap())
        .contain(Containment::Cgroup)
        .spawn()
        .expect("contained spawn (needs a writable cgroup v2: CI runs as root)");
    let mut line = String::new();
    BufReader::new(handle.socket().unwrap())
        .read_line(&mut line)
        .unwrap();
    let grandchild: u32 = line
        .trim()
        .strip_prefix("ready ")
        .unwrap_or_else(|| panic!("server said {line:?}"))
        .parse()
        .unwrap();
    let grandchild_fd = pidfd(grandchild);
    let leader = handle.id().unwrap();
    let dir = cgroup_mount().join(cgroup_of(leader).trim_start_matches('/'));
    // Precondition: the grandchild is in a cgroup the server made inside its own.
    assert!(
        cgroup_of(grandchild).ends_with("/inner/deeper"),
        "{}",
        cgroup_of(grandchild)
    );
    assert_eq!(tree(&dir).len(), 4, "{:?}", tree(&dir));
    let report = handle.close().unwrap();
    let left = tree(&dir);
    let existed = dir.exists();
    let cleaned = force_remove(&dir);
    let cg = report.cgroup.as_ref().expect("contained");
    assert!(
        cg.removed && !existed && left.is_empty(),
        "removed={} {} exists={existed}, {} cgroup(s) left {left:?}: {report}",
        cg.removed,
        dir.display(),
        left.len()
    );
    assert!(cleaned);
    assert!(
        exited_within(&grandchild_fd, Duration::from_secs(20)),
        "grandchild {grandchild} outlived the close: {report}"
    );
    assert!(our_children().is_empty(), "{:?}", our_children());
    assert!(
        !report.notes.iter().any(|n| n.contains("not removed")),
        "{report}"
    );
}

/// This process's pid namespace inode, as new cgroup names record it.
fn own_pid_namespace() -> u64 {
    let link = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let link = link.to_str().unwrap();
    link.strip_prefix("pid:[")
        .and_then(|l| l.strip_suffix(']'))
        .unwrap()
        .parse()
        .unwrap()
}

/// `/proc/PID/stat` field 22 (start time in clock ticks since boot).
fn start_time(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// A pid that no process has: a child that exited and was reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn stale_cgroups_of_dead_supervisors_are_killed_removed_and_reported_live_ones_left_alone() {
    let _serial = serial();
    let parent = scratch_parent("stale");
    let ns = own_pid_namespace();
    // Dead supervisors: an old-style name (pid alone) with a live sleeper in it; a new-style
    // name whose pid is dead, with a sleeper in a cgroup nested inside; a new-style name of a
    // reused pid (a live process, but not the one that started at tick 1); a live pid recorded
    // in a pid namespace no process is in (inode 1 is never a namespace's): judged by the
    // namespace, never by the pid (issue 34 item 3).
    let old_dead = parent.join(format!("childguard-{}-0", dead_pid()));
    let new_dead = parent.join(format!("childguard-{}-3-t1-ns{ns}", dead_pid()));
    let mut bystander = Command::new("sleep").arg("1000").spawn().unwrap();
    let by = bystander.id();
    let reused = parent.join(format!("childguard-{by}-0-t1-ns{ns}"));
    let gone_ns = parent.join(format!("childguard-{by}-1-t{}-ns1", start_time(by)));
    // Live supervisors: our own pid; a live process by pid alone and by pid and start time.
    let ours = parent.join(format!("childguard-{}-999999", std::process::id()));
    let live_old = parent.join(format!("childguard-{by}-0"));
    let live_new = parent.join(format!("childguard-{by}-1-t{}-ns{ns}", start_time(by)));
    for dir in [&old_dead, &reused, &gone_ns, &ours, &live_old, &live_new] {
        std::fs::create_dir(dir).unwrap();
    }
    std::fs::create_dir_all(new_dead.join("nested")).unwrap();
    let mut stale_sleepers = [sleeper_in(&old_dead), sleeper_in(&new_dead.join("nested"))];
    let stale_fds: Vec<_> = stale_sleepers.iter().map(|c| pidfd(c.id())).collect();
    let mut live_sleeper = sleeper_in(&live_new);
    let live_fd = pidfd(live_sleeper.id());

    let handle = ChildHandle::builder(slowserver(&[]))
        .socket(SocketMode::Stdio)
        .contain(Containment::Cgroup)
        .cgroup_parent(&parent)
        .spawn()
        .expect("contained spawn (needs a writable cgroup v2: CI runs as root)");
    read_ready(&handle);
    let report = handle.close().unwrap();
    let stale_gone: Vec<bool> = stale_fds
        .iter()
        .map(|fd| exited_within(fd, Duration::from_secs(20)))
        .collect();
    let left: Vec<_> = [&old_dead, &new_dead, &reused, &gone_ns]
        .into_iter()
        .filter(|d| d.exists())
        .collect();
    let kept: Vec<_> = [&ours, &live_old, &live_new]
        .into_iter()
        .filter(|d| !d.exists())
        .collect();
    let live_killed = exited_within(&live_fd, Duration::ZERO);
    // Cleanup before the assertions, so that a failure leaves nothing behind.
    for child in stale_sleepers
        .iter_mut()
        .chain([&mut live_sleeper, &mut bystander])
    {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(force_remove(&parent), "{} left", parent.display());

    assert!(
        left.is_empty() && stale_gone.iter().all(|&g| g),
        "stale cgroups left {left:?}, sleepers gone {stale_gone:?}: {report}"
    );
    assert!(
        kept.is_empty(),
        "cgroups of live supervisors removed {kept:?}: {report}"
    );
    assert!(
        !live_killed,
        "the sleeper of a live supervisor's cgroup was killed: {report}"
    );
    let removed: Vec<_> = report
        .notes
        .iter()
        .filter(|n| n.starts_with("removed stale cgroup"))
        .collect();
    for (dir, killed) in [(&old_dead, 1), (&new_dead, 1), (&reused, 0), (&gone_ns, 0)] {
        let name = dir.display().to_string();
        assert!(
            removed.iter().any(|n| n.contains(&format!("{name} "))
                && n.contains(&format!("killed {killed} process"))),
            "no note for {name} (killed {killed}): {report}"
        );
    }
    assert_eq!(removed.len(), 4, "{report}");
    assert!(report.cgroup.as_ref().unwrap().removed, "{report}");
}

/// An unprivileged user for the non-root tests: `nobody`.
fn nobody() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with("nobody:"))
        .expect("the non-root containment tests need the user nobody in /etc/passwd");
    let fields: Vec<&str> = line.split(':').collect();
    (fields[2].parse().unwrap(), fields[3].parse().unwrap())
}

/// Delegates the cgroup `dir` to `(uid, gid)` as cgroup v2's delegation model says: the
/// directory and its `cgroup.procs`, `cgroup.threads` and `cgroup.subtree_control`.
fn delegate(dir: &Path, (uid, gid): (u32, u32)) {
    for path in [
        dir.to_path_buf(),
        dir.join("cgroup.procs"),
        dir.join("cgroup.threads"),
        dir.join("cgroup.subtree_control"),
    ] {
        std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
    }
}

/// `cg-supervisor SLOWSERVER ARGS… --close --` run as `user`; (exit code, stdout, stderr).
fn supervise_as(user: (u32, u32), args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin("cg-supervisor"))
        .arg(bin("cg-slowserver"))
        .args(args)
        .args(["--close", "--"])
        .uid(user.0)
        .gid(user.1)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_non_root_child_that_cannot_join_its_cgroup_falls_back_with_best_effort_and_fails_clearly_without(
) {
    let _serial = serial();
    let user = nobody();
    // A non-root supervisor (nobody) with a subtree delegated to it. Inside the subtree it
    // contains (the control). Running in our cgroup (root's) with the subtree as
    // cgroup_parent, it can make the cgroup and open its cgroup.procs, but the child's move
    // there needs write access to the common ancestor's cgroup.procs (ours): the join fails.
    let parent = scratch_parent("join");
    delegate(&parent, user);
    let inside = parent.join("supervisor");
    std::fs::create_dir(&inside).unwrap();
    delegate(&inside, user);
    let control = contains_inside_the_subtree(&inside, user);
    let _ = std::fs::remove_dir(&inside);
    let parent_text = parent.display().to_string();
    let (code, stdout, stderr) =
        supervise_as(user, &["--best-effort", "--cgroup-parent", &parent_text]);
    let best_effort_left = tree(&parent);
    let (req_code, _, req_stderr) =
        supervise_as(user, &["--contain", "--cgroup-parent", &parent_text]);
    let required_left = tree(&parent);
    assert!(force_remove(&parent));
    control.unwrap();

    assert_eq!(
        code,
        Some(0),
        "BestEffort did not fall back: {stderr}{stdout}"
    );
    let fallback = stdout
        .lines()
        .find_map(|l| l.strip_prefix("FALLBACK "))
        .unwrap_or_default();
    assert!(
        fallback.contains(&parent_text)
            && fallback.contains("cgroup.procs")
            && fallback.contains("placing the child in its cgroup")
            && fallback.contains("EACCES"),
        "{stdout}"
    );
    assert!(stdout.contains("CGROUP None"), "{stdout}");
    assert!(stdout.contains("process group only"), "{stdout}");
    assert!(best_effort_left.is_empty(), "{best_effort_left:?} left");

    assert_eq!(req_code, Some(1), "Cgroup did not fail: {req_stderr}");
    assert!(
        req_stderr.contains(&format!("{parent_text}/childguard-"))
            && req_stderr.contains("cgroup.procs")
            && req_stderr.contains("EACCES")
            && req_stderr.contains("common ancestor"),
        "{req_stderr}"
    );
    assert!(required_left.is_empty(), "{required_left:?} left");
}

/// The positive control of the join test: a non-root supervisor that runs *inside* the subtree
/// delegated to it (moved into `dir` by root before it drops its privileges) contains a
/// daemonizing server, and its close removes the cgroup. Returns what went wrong, if anything.
fn contains_inside_the_subtree(dir: &Path, user: (u32, u32)) -> Result<(), String> {
    let setpriv = Path::new("/usr/bin/setpriv");
    assert!(
        setpriv.is_file(),
        "this test needs setpriv: apt-get install util-linux"
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
        .arg("sh")
        .arg(dir)
        .arg(setpriv)
        .arg(format!("--reuid={}", user.0))
        .arg(format!("--regid={}", user.1))
        .arg("--clear-groups")
        .arg(bin("cg-supervisor"))
        .arg(bin("cg-slowserver"))
        .args(["--contain", "--close", "--", "--daemonize"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let left = tree(dir);
    if !out.status.success() || !stdout.contains("FALLBACK -") || !stdout.contains("removed: true")
    {
        return Err(format!("inside the subtree: {stderr}{stdout}"));
    }
    if !left.is_empty() {
        return Err(format!("inside the subtree: {left:?} left"));
    }
    Ok(())
}

#[test]
fn the_guardian_of_a_sigkilled_supervisor_removes_the_cgroups_the_server_made() {
    let _serial = serial();
    // The server of the first test, under a supervisor with exit_with_parent (so a guardian).
    let script = NESTING_SERVER;
    let mut sup = Command::new(bin("cg-supervisor"))
        .arg("/bin/sh")
        .args(["--exit-with-parent", "--contain", "--", "-c", script, "sh"])
        .arg(cgroup_mount())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (leader, ready) = childguard_tests::supervised_child(&mut sup);
    let grandchild: u32 = ready
        .trim()
        .strip_prefix("ready ")
        .unwrap()
        .parse()
        .unwrap();
    let fds = [pidfd(leader), pidfd(grandchild)];
    let dir = cgroup_mount().join(cgroup_of(leader).trim_start_matches('/'));
    assert_eq!(tree(&dir).len(), 4, "{:?}", tree(&dir));
    sup.kill().unwrap();
    sup.wait().unwrap();
    let exited = fds
        .iter()
        .all(|fd| exited_within(fd, Duration::from_secs(20)));
    let gone = childguard_tests::eventually(Duration::from_secs(20), || !dir.exists());
    let left = tree(&dir);
    assert!(force_remove(&dir));
    assert!(exited, "the tree outlived its SIGKILLed supervisor");
    assert!(gone, "{} left, with {left:?}", dir.display());
}
