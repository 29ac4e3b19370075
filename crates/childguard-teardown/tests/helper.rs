//! The helper's life, seen from outside through `/proc`, with the `teardown-probe` fixture.
//!
//! The probe calls `enable()` and prints `READY pid=<pid> helper=<pid> second=<pid>`; it exits
//! at EOF on stdin. The helper is the probe's child until the probe exits; then it is
//! reparented to init (or the nearest subreaper), which reaps it. So "gone" below means: no
//! `/proc/<pid>`, or a zombie (dead, waiting for init), or a different process with that pid.

#![cfg(target_os = "linux")]

use std::fs;
use std::io::Write;
use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const PROBE: &str = env!("CARGO_BIN_EXE_teardown-probe");

/// A running probe; killed and reaped on drop if a test fails half-way.
struct Probe {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    pid: u32,
    helper: u32,
    second: u32,
}

impl Probe {
    fn start(args: &[&str]) -> Probe {
        let mut child = Command::new(PROBE)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn teardown-probe");
        let stdin = child.stdin.take();
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut line).expect("read READY line");
        let field = |name: &str| -> u32 {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
                .parse()
                .unwrap()
        };
        assert!(line.starts_with("READY "), "{line:?}");
        let pid = field("pid");
        assert_eq!(pid, child.id());
        Probe {
            pid,
            helper: field("helper"),
            second: field("second"),
            stdin,
            stdout,
            child,
        }
    }

    /// Asks the probe for `Teardown::is_alive()`.
    fn is_alive(&mut self) -> bool {
        let stdin = self.stdin.as_mut().expect("probe stdin open");
        writeln!(stdin, "is-alive").expect("write to probe");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read ALIVE line");
        match line.trim() {
            "ALIVE true" => true,
            "ALIVE false" => false,
            other => panic!("probe answered {other:?}"),
        }
    }

    /// Closes stdin: the probe exits 0. Returns once it is reaped.
    fn finish(mut self) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
    }

    /// SIGKILL, then reap; returns the time from the kill to `waitpid` returning.
    fn kill(mut self) -> Duration {
        let start = Instant::now();
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        start.elapsed()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fields of `/proc/<pid>/stat` we look at.
#[derive(Debug, Clone, PartialEq)]
struct Stat {
    comm: String,
    state: char,
    ppid: u32,
    pgrp: u32,
    session: u32,
    start_time: u64,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_owned();
    // Fields after the name, numbered from 3 (state) as in proc(5).
    let rest: Vec<&str> = text[close + 2..].split(' ').collect();
    let field = |n: usize| rest[n - 3];
    Some(Stat {
        comm,
        state: field(3).chars().next()?,
        ppid: field(4).parse().ok()?,
        pgrp: field(5).parse().ok()?,
        session: field(6).parse().ok()?,
        start_time: field(22).parse().ok()?,
    })
}

/// The name the helper of `parent` gives itself: `cleanup/<parent>`, cut to 15 bytes.
fn helper_comm(parent: u32) -> String {
    let mut name = format!("cleanup/{parent}");
    name.truncate(15);
    name
}

/// The process that was `before` is dead: no such pid, a zombie, or the pid reused.
fn is_gone(pid: u32, before: &Stat) -> bool {
    match stat(pid) {
        None => true,
        Some(now) => matches!(now.state, 'Z' | 'X') || now.start_time != before.start_time,
    }
}

/// Polls until the process `before` is gone; returns how long that took, or `None` after
/// `within`.
fn wait_gone(pid: u32, before: &Stat, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if is_gone(pid, before) {
            return Some(start.elapsed());
        }
        thread::sleep(Duration::from_millis(1));
    }
    None
}

/// Checks everything a freshly enabled probe's helper should be, and returns its stat.
fn check_running_helper(probe: &Probe) -> Stat {
    let helper = probe.helper;
    assert_ne!(helper, 0);
    let stat = stat(helper).expect("helper is running");
    assert_eq!(stat.comm, helper_comm(probe.pid), "{stat:?}");
    assert!(!matches!(stat.state, 'Z' | 'X'), "{stat:?}");
    // Our child (clone without CLONE_PARENT), in a session and group of its own (setsid).
    assert_eq!(stat.ppid, probe.pid, "{stat:?}");
    assert_eq!((stat.pgrp, stat.session), (helper, helper), "{stat:?}");

    // Exactly one fd: its pidfd of the probe. No copy of the probe's stdin/stdout pipes.
    let fds: Vec<_> = fs::read_dir(format!("/proc/{helper}/fd"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(fds.len(), 1, "{fds:?}");
    let target = fs::read_link(&fds[0]).unwrap();
    assert_eq!(target.to_str(), Some("anon_inode:[pidfd]"));

    // Every signal blocked (the kernel reports KILL and STOP as unblocked: they cannot be).
    let status = fs::read_to_string(format!("/proc/{helper}/status")).unwrap();
    let blocked = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap();
    let unblockable = (1 << (libc::SIGKILL - 1)) | (1 << (libc::SIGSTOP - 1));
    assert_eq!(blocked, !unblockable, "SigBlk {blocked:x}");

    // Not pinning the probe's working directory.
    assert_eq!(
        fs::read_link(format!("/proc/{helper}/cwd"))
            .unwrap()
            .to_str(),
        Some("/")
    );
    stat
}

#[test]
fn helper_waits_for_its_parent_and_leaves_after_a_normal_exit() {
    let probe = Probe::start(&[]);
    let helper = probe.helper;
    let before = check_running_helper(&probe);
    thread::sleep(Duration::from_millis(100));
    assert!(!is_gone(helper, &before), "helper left early");
    probe.finish();
    // Generous (it takes ms): the helper wakes on its pidfd of the parent and exits; one that
    // missed the exit would never leave.
    let took = wait_gone(helper, &before, Duration::from_secs(10));
    assert!(
        took.is_some(),
        "helper {helper} still alive 10 s after its parent exited"
    );
}

#[test]
fn helper_leaves_after_its_parent_is_sigkilled() {
    let probe = Probe::start(&[]);
    let helper = probe.helper;
    let before = check_running_helper(&probe);
    probe.kill();
    let took = wait_gone(helper, &before, Duration::from_secs(10));
    assert!(
        took.is_some(),
        "helper {helper} still alive 10 s after its parent was killed"
    );
}

#[test]
fn a_helper_killed_while_its_parent_lives_is_reaped_by_is_alive() {
    let mut probe = Probe::start(&[]);
    let helper = probe.helper;
    let before = check_running_helper(&probe);
    assert!(probe.is_alive());
    let status = Command::new("kill")
        .args(["-KILL", &helper.to_string()])
        .status()
        .expect("run kill(1)");
    assert!(status.success(), "kill -KILL {helper}: {status}");
    // Precondition: the helper is dead and, being the probe's child with exit signal 0, a
    // zombie nobody else reaps.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = stat(helper).expect("the killed helper vanished before anyone reaped it");
        assert_eq!(now.start_time, before.start_time);
        if now.state == 'Z' {
            assert_eq!(now.ppid, probe.pid, "{now:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "helper {helper} not dead 10 s after SIGKILL"
        );
        thread::sleep(Duration::from_millis(1));
    }
    assert!(!probe.is_alive());
    // Reaped by that call: no zombie left in /proc (or the pid already names someone else).
    let after = stat(helper);
    assert!(
        after
            .as_ref()
            .is_none_or(|s| s.start_time != before.start_time),
        "killed helper {helper} left a zombie: {after:?}"
    );
    // Asking again reaps nothing twice, and still says no.
    assert!(!probe.is_alive());
    probe.finish();
}

#[test]
fn helper_started_on_a_short_lived_thread_outlives_that_thread() {
    // PR_SET_PDEATHSIG would fire when the enabling thread exits; enable() must not set it
    // there, and the pidfd alone must end the helper.
    let probe = Probe::start(&["--from-thread"]);
    let helper = probe.helper;
    let before = check_running_helper(&probe);
    thread::sleep(Duration::from_millis(300));
    assert!(!is_gone(helper, &before), "helper died with its thread");
    probe.kill();
    assert!(wait_gone(helper, &before, Duration::from_secs(10)).is_some());
}

#[test]
fn enabling_twice_gives_the_same_single_helper() {
    let probe = Probe::start(&["--twice"]);
    assert_ne!(probe.helper, 0);
    assert_eq!(probe.helper, probe.second);
    check_running_helper(&probe);
    let cleanups: Vec<u32> = fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| {
            stat(pid).is_some_and(|s| s.ppid == probe.pid && s.comm.starts_with("cleanup/"))
        })
        .collect();
    assert_eq!(cleanups, vec![probe.helper]);
    probe.finish();
}

#[test]
fn probe_without_enable_has_no_helper() {
    let probe = Probe::start(&["--no-enable"]);
    assert_eq!((probe.helper, probe.second), (0, 0));
    probe.finish();
}

/// One SIGKILL → `waitpid` measurement of a probe with `mib` MiB touched; with teardown, also
/// how long after the kill the helper was gone (the memory freed).
fn measure(mib: usize, teardown: bool) -> (Duration, Option<Duration>) {
    let alloc = mib.to_string();
    let mut args = vec!["--alloc-mib", alloc.as_str()];
    if !teardown {
        args.push("--no-enable");
    }
    let probe = Probe::start(&args);
    let helper = (probe.helper != 0).then(|| (probe.helper, stat(probe.helper).unwrap()));
    let start = Instant::now();
    let waited = probe.kill();
    // Wait for the helper's teardown before the next measurement, so runs do not overlap.
    let freed = helper.map(|(pid, before)| {
        wait_gone(pid, &before, Duration::from_secs(60)).expect("helper gone");
        start.elapsed()
    });
    (waited, freed)
}

#[test]
fn sigkill_to_waitpid_is_faster_with_teardown() {
    // Timing sanity only, with the loosest bound: the benchmark owns the numbers.
    let mut plain = Vec::new();
    let mut async_ = Vec::new();
    for _ in 0..3 {
        plain.push(measure(1024, false).0);
        async_.push(measure(1024, true).0);
    }
    let best_plain = plain.iter().min().unwrap();
    let best_async = async_.iter().min().unwrap();
    eprintln!("1 GiB: SIGKILL->waitpid plain {plain:?}, with teardown {async_:?}");
    assert!(
        best_async < best_plain,
        "with teardown {async_:?} not faster than without {plain:?}"
    );
}

/// Numbers for the report, not a check: `TEARDOWN_MEASURE_GIB=1,4,8 cargo test --release -p
/// childguard-teardown --test helper -- --ignored --nocapture measure_sigkill_to_waitpid`.
#[test]
#[ignore = "measurement; run by hand"]
fn measure_sigkill_to_waitpid() {
    let sizes = std::env::var("TEARDOWN_MEASURE_GIB").unwrap_or_else(|_| "1,4,8".into());
    let rounds: usize = std::env::var("TEARDOWN_MEASURE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!("GiB  mode      SIGKILL->waitpid ms (min / median / max)   helper gone ms (median)");
    for gib in sizes.split(',').map(|s| s.trim().parse::<usize>().unwrap()) {
        for teardown in [false, true] {
            let mut waited = Vec::new();
            let mut freed = Vec::new();
            for _ in 0..rounds {
                let (w, f) = measure(gib * 1024, teardown);
                waited.push(w);
                freed.extend(f);
            }
            waited.sort();
            freed.sort();
            let median = |v: &[Duration]| v.get(v.len() / 2).copied().map(ms);
            eprintln!(
                "{gib:>3}  {:<8}  {:>8.2} / {:>8.2} / {:>8.2}            {}",
                if teardown { "teardown" } else { "plain" },
                ms(waited[0]),
                median(&waited).unwrap(),
                ms(*waited.last().unwrap()),
                median(&freed).map_or("-".into(), |m| format!("{m:.1}")),
            );
        }
    }
}
