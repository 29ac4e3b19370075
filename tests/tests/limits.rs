//! Resource limits on a contained server's cgroup (issue 32, items 2–3): a 64 MiB
//! `MemoryMax=` ends a hog in `oom-kill`, named by the report, the CLI and `with`; a fork bomb
//! under `TasksMax=50` is held and leaves nothing; the CPU quota reaches the kernel's file;
//! `MemoryHigh=` is applied on a v2 memory controller and refused clearly on a v1 one; the v1
//! cgroups of a SIGKILLed supervisor are swept by the next contained spawn. On this project's
//! CI (a hybrid host) the memory, pids and cpu controllers are cgroup v1 ones: the v1 path runs
//! here, the v2 file writes are unit tests of `limits::files`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use childguard::{ChildHandle, Containment, ErrorKind, Limits, LimitsReport};
use childguard_tests::cgroups::serial;
use childguard_tests::command::{childguard, childguard_within, stderr};
use childguard_tests::{bin, eventually, is_alive, ladder, scratch};

/// Allocates and touches 512 MiB, far over the 64 MiB limit.
const HOG: &str = "x = b'a' * (512 << 20)";

fn sleeper() -> Command {
    let mut cmd = Command::new("sleep");
    cmd.arg("1000");
    cmd
}

/// The directories named in a limits report (`memory: cgroup v1 /sys/fs/cgroup/…`).
fn dirs_of(limits: &LimitsReport) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = limits
        .hierarchies
        .iter()
        .map(|h| {
            let (_, path) = h.split_once(" /").expect("'<controller>: cgroup vN /path'");
            PathBuf::from(format!("/{path}"))
        })
        .collect();
    assert!(!dirs.is_empty(), "no hierarchy in {limits:?}");
    dirs
}

/// Whether a controller is offered by cgroup v2 to our children here.
fn v2_offers(controller: &str) -> bool {
    let own = childguard_tests::cgroups::own_cgroup_dir();
    std::fs::read_to_string(own.join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .any(|c| c == controller)
}

/// Our v1 directory of a controller's hierarchy (from mountinfo and /proc/self/cgroup), if the
/// controller is on v1 here.
fn v1_dir(controller: &str) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = info.lines().find_map(|l| {
        let (before, after) = l.split_once(" - ")?;
        let mut after = after.split(' ');
        let fstype = after.next()?;
        let options = after.nth(1)?;
        (fstype == "cgroup" && options.split(',').any(|o| o == controller))
            .then(|| before.split(' ').nth(4).unwrap().to_string())
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let path = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, cs, path) = (parts.next()?, parts.next()?, parts.next()?);
        cs.split(',').any(|c| c == controller).then_some(path)
    })?;
    Some(Path::new(&mount).join(path.trim_start_matches('/')))
}

/// The `childguard-<pid>-…` directories under `dir`.
fn cgroups_of(dir: &Path, pid: u32) -> Vec<PathBuf> {
    let prefix = format!("childguard-{pid}-");
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_64mib_hog_under_memory_max_ends_in_oom_kill_and_the_report_says_so() {
    let _serial = serial();
    let mut cmd = Command::new("python3");
    cmd.args(["-c", HOG]);
    let mut handle = ChildHandle::builder(cmd)
        .contain(Containment::Cgroup)
        .limits(Limits::new().memory_max(64 << 20))
        .spawn()
        .expect("spawn python3 (a peer: Debian's python3) under MemoryMax=64M");
    let status = handle
        .wait_timeout(Duration::from_secs(60))
        .unwrap()
        .expect("the hog ends (the OOM killer) well within 60 s");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    let during = handle
        .limits_report()
        .expect("limits report before the close");
    assert_eq!(during.result, Some("oom-kill"), "{during:?}");
    let report = handle.close().unwrap();
    let cgroup = report.cgroup.as_ref().expect("contained");
    let limits = cgroup.limits.as_ref().expect("limits in the report");
    assert_eq!(limits.result, Some("oom-kill"), "{report}");
    assert!(limits.oom_kills >= 1, "{limits:?}");
    assert_eq!(
        limits.limits.memory_max,
        Some(childguard::Amount::Some(64 << 20))
    );
    let peak = limits.memory_peak.expect("a peak usage is counted");
    assert!(peak > 32 << 20 && peak <= 64 << 20, "peak {peak}");
    let text = report.to_string();
    assert!(text.contains("signal KILL: oom-kill"), "{text}");
    assert!(text.contains("MemoryMax=64M"), "{text}");
    assert!(cgroup.removed, "{report}");
    for dir in dirs_of(limits) {
        assert!(!dir.exists(), "{} left", dir.display());
    }
}

#[test]
fn the_cli_names_the_oom_kill_on_stderr_and_in_json() {
    let _serial = serial();
    let o = childguard_within(
        Duration::from_secs(60),
        &[
            "run",
            "--memory-max",
            "64M",
            "--report",
            "json",
            "--",
            "python3",
            "-c",
            HOG,
        ],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(137), "{e}");
    assert!(
        e.contains("oom-kill: the kernel's OOM killer killed"),
        "{e}"
    );
    assert!(e.contains(r#""result":"oom-kill""#), "{e}");
    assert!(e.contains(r#""memory_max":67108864"#), "{e}");
}

#[test]
fn with_names_a_server_the_oom_killer_ended() {
    let _serial = serial();
    let script = format!("import time; time.sleep(0.2); {HOG}");
    let o = childguard_within(
        Duration::from_secs(60),
        &[
            "with",
            "--memory-max",
            "64M",
            "--",
            "python3",
            "-c",
            &script,
            "--",
            "sleep",
            "60",
        ],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "{e}");
    assert!(e.contains("server python3 exited while CMD ran"), "{e}");
    assert!(e.contains("server python3: oom-kill"), "{e}");
}

/// Forks until the kernel refuses (`EAGAIN` at `pids.max`), writes the pids it made to the file
/// `$1`, then waits: a fork bomb that is held.
const BOMB: &str = r#"
import os, sys, time
pids = []
while True:
    try:
        pid = os.fork()
    except OSError as e:
        break
    if pid == 0:
        time.sleep(1000)
        os._exit(0)
    pids.append(pid)
    if len(pids) > 10000:
        break
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(" ".join(map(str, pids)))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(1000)
"#;

#[test]
fn a_fork_bomb_under_tasks_max_50_is_held_and_leaves_nothing() {
    let _serial = serial();
    let marker = scratch("limits-bomb");
    let _ = std::fs::remove_file(&marker);
    let mut cmd = Command::new("python3");
    cmd.args(["-c", BOMB]).arg(&marker);
    let handle = ChildHandle::builder(cmd)
        .contain(Containment::Cgroup)
        .limits(Limits::new().tasks_max(50))
        .ladder(ladder("TERM:1s,KILL:5s"))
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(30), || marker.exists()),
        "the bomb never hit TasksMax=50"
    );
    let pids: Vec<u32> = std::fs::read_to_string(&marker)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // The bomb itself plus its children: at most 50 tasks.
    assert!(!pids.is_empty() && pids.len() < 50, "{} forks", pids.len());
    let during = handle.limits_report().unwrap();
    assert!(during.tasks_max_hits >= Some(1), "{during:?}");
    let report = handle.close().unwrap();
    let cgroup = report.cgroup.as_ref().unwrap();
    assert!(cgroup.removed && cgroup.members_left == 0, "{report}");
    let limits = cgroup.limits.as_ref().unwrap();
    assert_eq!(limits.result, None, "no OOM kill: {limits:?}");
    assert!(
        report.to_string().contains("fork(s) refused at TasksMax="),
        "{report}"
    );
    for pid in pids {
        assert!(
            eventually(Duration::from_secs(10), || !is_alive(pid)),
            "bomb child {pid} outlived the close"
        );
    }
    for dir in dirs_of(limits) {
        assert!(!dir.exists(), "{} left", dir.display());
    }
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn the_cli_holds_a_shell_fork_bomb_and_leaves_no_cgroup_anywhere() {
    let _serial = serial();
    let child = Command::new(bin("cg-childguard"))
        .args([
            "run",
            "--tasks-max",
            "50",
            "--timeout",
            "2s",
            "--ladder",
            "KILL:5s",
        ])
        .args([
            "--report",
            "json",
            "--",
            "sh",
            "-c",
            "f() { f & f; }; f 2>/dev/null",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let e = stderr(&o);
    assert!(
        e.contains(r#""members_left":0"#) && e.contains(r#""removed":true"#),
        "{e}"
    );
    let hits = e
        .split(r#""tasks_max_hits":"#)
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no tasks_max_hits in {e}"));
    assert!(hits >= 1, "the bomb never hit the limit: {e}");
    let mut places = vec![childguard_tests::cgroups::own_cgroup_dir()];
    places.extend(["pids", "memory", "cpu"].into_iter().filter_map(v1_dir));
    for place in places {
        let left = cgroups_of(&place, pid);
        assert!(left.is_empty(), "left: {left:?}");
    }
}

#[test]
fn the_cpu_quota_reaches_the_kernel() {
    let _serial = serial();
    let handle = ChildHandle::builder(sleeper())
        .contain(Containment::Cgroup)
        .limits(Limits::new().cpu_quota(50))
        .spawn()
        .unwrap();
    let limits = handle.limits_report().unwrap();
    let dir = dirs_of(&limits).remove(0);
    let (file, want) = if limits.hierarchies[0].contains("cgroup v1") {
        ("cpu.cfs_quota_us", "50000")
    } else {
        ("cpu.max", "50000 100000")
    };
    let got = std::fs::read_to_string(dir.join(file)).unwrap();
    assert_eq!(got.trim(), want, "{}", dir.display());
    let pid = handle.id().unwrap();
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    assert!(
        procs.lines().any(|p| p == pid.to_string()),
        "{pid} not in {procs}"
    );
    drop(handle.close().unwrap());
    assert!(!dir.exists(), "{} left", dir.display());
}

#[test]
fn memory_high_is_applied_on_v2_and_refused_clearly_on_v1() {
    let _serial = serial();
    let before = cgroups_of(
        &childguard_tests::cgroups::own_cgroup_dir(),
        std::process::id(),
    );
    let spawned = ChildHandle::builder(sleeper())
        .contain(Containment::Cgroup)
        .limits(Limits::new().memory_high(32 << 20))
        .spawn();
    if v2_offers("memory") {
        let handle = spawned.expect("MemoryHigh= on a v2 memory controller");
        let limits = handle.limits_report().unwrap();
        let dir = dirs_of(&limits).remove(0);
        let got = std::fs::read_to_string(dir.join("memory.high")).unwrap();
        assert_eq!(got.trim(), (32u64 << 20).to_string());
        drop(handle.close().unwrap());
    } else {
        assert!(
            v1_dir("memory").is_some(),
            "memory is neither on v2 nor on v1 here"
        );
        let e = spawned.expect_err("MemoryHigh= cannot be had on a v1 memory controller");
        assert_eq!(e.kind(), ErrorKind::Containment, "{e}");
        let text = e.to_string();
        assert!(
            text.contains("MemoryHigh=") && text.contains("cgroup v1"),
            "{text}"
        );
    }
    // Nothing made for the refused (or closed) child stays.
    let after = cgroups_of(
        &childguard_tests::cgroups::own_cgroup_dir(),
        std::process::id(),
    );
    assert!(after.iter().all(|d| before.contains(d)), "{after:?}");
}

#[test]
fn limits_without_containment_or_with_a_bad_value_are_clear_errors() {
    let e = ChildHandle::builder(Command::new("true"))
        .limits(Limits::new().tasks_max(10))
        .spawn()
        .expect_err("limits need containment");
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(e.to_string().contains("TasksMax=10"), "{e}");
    for (flag, value, why) in [
        ("--memory-max", "12Q", "unknown suffix"),
        ("--tasks-max", "-5", "whole number"),
        ("--cpu-quota", "50", "percentage"),
        ("--memory-max", "99999999999T", "too large"),
    ] {
        let o = childguard(&["run", flag, value, "--", "true"]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(125), "{e}");
        assert!(
            e.contains(&format!("invalid value for {flag}")) && e.contains(why),
            "{e}"
        );
    }
}

#[test]
fn the_v1_cgroups_of_a_sigkilled_supervisor_are_swept_by_the_next_contained_spawn() {
    let _serial = serial();
    // A childguard elsewhere on the machine sweeps its own cgroups' children: were the
    // supervisor and the sweeping run in ours, it could take the stale cgroup first (a flake
    // hunt with a second suite running beside it saw it). They run in cgroups of their own.
    let private = Private::new("v1-sweep");
    let pids_dir = private.v1("pids");
    let mut sup = private
        .command(&["run", "--tasks-max", "20", "--", "sleep", "1000"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let sup_pid = sup.id();
    // Its v1 cgroup exists and holds the sleep (the fact we wait for, not a time).
    let mut server = 0;
    assert!(
        eventually(Duration::from_secs(10), || {
            let dirs = cgroups_of(&pids_dir, sup_pid);
            server = dirs
                .first()
                .and_then(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
                .and_then(|p| p.lines().next().and_then(|l| l.parse().ok()))
                .unwrap_or(0);
            server != 0
        }),
        "no v1 pids cgroup with a member for supervisor {sup_pid}"
    );
    let dir = cgroups_of(&pids_dir, sup_pid).remove(0);
    childguard_tests::sigkill(sup_pid);
    sup.wait().unwrap();
    // Its guardian kills the v2 cgroup (and so the sleep); the v1 twin stays behind.
    assert!(
        eventually(Duration::from_secs(10), || !is_alive(server)),
        "the server {server} outlived its supervisor's guardian"
    );
    assert!(
        dir.exists(),
        "precondition: {} is left by the kill",
        dir.display()
    );
    let o = private
        .command(&["run", "--contain", "--report", "json", "--", "true"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(!dir.exists(), "{} not swept: {e}", dir.display());
    assert!(e.contains("removed stale cgroup v1"), "{e}");
}

/// Cgroups of one test's own, under ours in v2 and in the v1 hierarchies of memory, pids and
/// cpu, which the commands it makes start in: a childguard started elsewhere sweeps only the
/// children of its own cgroups, never these (their names are not `childguard-…`), nor what
/// is inside them. Removed on drop.
struct Private {
    v2: PathBuf,
    v1: Vec<(&'static str, PathBuf)>,
}

impl Private {
    fn new(name: &str) -> Private {
        let leaf = format!("cg-test-{name}-{}", std::process::id());
        let v2 = childguard_tests::cgroups::own_cgroup_dir().join(&leaf);
        std::fs::create_dir(&v2).unwrap();
        let mut v1 = Vec::new();
        for controller in ["memory", "pids", "cpu"] {
            let dir = v1_dir(controller)
                .unwrap_or_else(|| panic!("this test needs {controller} on cgroup v1 (CI)"))
                .join(&leaf);
            if !v1.iter().any(|(_, d)| *d == dir) {
                std::fs::create_dir(&dir).unwrap();
            }
            v1.push((controller, dir));
        }
        Private { v2, v1 }
    }

    /// Our private directory in the v1 hierarchy of `controller`.
    fn v1(&self, controller: &str) -> PathBuf {
        let found = self.v1.iter().find(|(c, _)| *c == controller);
        found.expect("a v1 controller of Private::new").1.clone()
    }

    /// `cg-childguard ARGS`, moved into these cgroups before it execs (by the `sh` it starts
    /// as, whose pid it keeps).
    fn command(&self, args: &[&str]) -> Command {
        let mut script = String::new();
        for dir in std::iter::once(&self.v2).chain(self.v1.iter().map(|(_, d)| d)) {
            script.push_str(&format!("echo $$ > '{}/cgroup.procs' && ", dir.display()));
        }
        script.push_str("exec \"$0\" \"$@\"");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(script)
            .arg(bin("cg-childguard"))
            .args(args);
        cmd
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        for dir in std::iter::once(&self.v2).chain(self.v1.iter().map(|(_, d)| d)) {
            childguard_tests::cgroups::force_remove(dir);
        }
    }
}
