//! Never signal a stranger (issue 6, item 2).
//!
//! `cg-signal-driver strangers` runs every way of ending a handle — close, drop, kill (also from
//! another thread), the background reaper, a group whose leader exits first, both mechanisms,
//! children reaped behind the library's back by `waitpid(-1)` — under
//! `strace -ff -e trace=kill,tgkill,tkill,pidfd_send_signal,…`. From the trace alone (not from
//! what the driver says about itself) we rebuild which processes the driver forked and when it
//! reaped each, then check every signal the driver process sent:
//!
//! - no `kill` targets 0 (our own group), -1 (everyone) or 1 (init);
//! - a positive target is a child the driver forked and had not yet reaped;
//! - a negative target (`killpg`) is the group of such a child, spawned with `process_group`;
//! - `pidfd_send_signal` goes through a pidfd opened for such a child, before it was reaped;
//! - no signal syscall failed with `ESRCH` (that would mean we signalled a pid we had lost);
//! - `tgkill`/`tkill` only target the driver itself.
//!
//! The checker is tested on hand-written traces too (`checker_flags_…`), so a pass is not a
//! parse that found nothing.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;

use childguard_tests::{bin, scratch};

const TRACED: &str =
    "kill,tgkill,tkill,pidfd_send_signal,rt_sigqueueinfo,rt_tgsigqueueinfo,pidfd_open,waitid,wait4,clone,clone3,fork,vfork";

/// One traced syscall: who made it, when (µs), and its text.
#[derive(Debug, Clone)]
struct Call {
    tid: u32,
    at: u64,
    name: String,
    args: Vec<String>,
    ret: Option<i64>,
    errno: Option<String>,
    raw: String,
}

/// Parses one line of an `strace -ff -ttt` per-thread file (`1700000000.123456 kill(5, SIGHUP) = 0`).
fn parse_line(tid: u32, line: &str) -> Option<Call> {
    let (ts, rest) = line.split_once(' ')?;
    let (secs, micros) = ts.split_once('.')?;
    let at = secs.parse::<u64>().ok()? * 1_000_000 + micros.parse::<u64>().ok()?;
    let open = rest.find('(')?;
    let name = rest[..open].to_string();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    // strace pads the return value into a column: `pidfd_open(200, 0)  = 5`.
    let eq = rest.rfind(" = ")?;
    let call = rest[..eq].trim_end().strip_suffix(')')?;
    let args = split_args(call.get(open + 1..)?);
    let result = rest[eq + 3..].trim();
    let mut words = result.split_whitespace();
    let ret = words.next().and_then(|r| {
        if let Some(hex) = r.strip_prefix("0x") {
            i64::from_str_radix(hex, 16).ok()
        } else {
            r.parse().ok()
        }
    });
    let errno = if ret == Some(-1) {
        words.next().map(str::to_string)
    } else {
        None
    };
    Some(Call {
        tid,
        at,
        name,
        args,
        ret,
        errno,
        raw: line.to_string(),
    })
}

/// Splits top-level arguments on `, ` (not inside `{}`, `[]` or `()`).
fn split_args(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut depth = 0i32;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '{' | '[' | '(' => depth += 1,
            '}' | ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                args.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.trim().is_empty() {
        args.push(current.trim().to_string());
    }
    args
}

/// What the checker found.
#[derive(Debug, Default)]
struct Verdict {
    violations: Vec<String>,
    /// Children the driver forked (per the trace), and whether each was reaped by the driver.
    children: HashMap<u32, bool>,
    pidfd_signals: usize,
    kill_signals: usize,
    group_signals: usize,
}

/// Checks the calls of every thread (already merged) against the rules in the module doc.
/// `root` is the driver's pid; `grouped` are the children spawned with `process_group`.
fn check(mut calls: Vec<Call>, root: u32, grouped: &HashSet<u32>) -> Verdict {
    calls.sort_by_key(|c| c.at);
    let mut v = Verdict::default();
    // Thread-group of every tid, learned from clone/fork as they happen.
    let mut tgid: HashMap<u32, u32> = HashMap::from([(root, root)]);
    // Reap instant of each driver child; pidfd number -> pid (the last pidfd_open or clone3
    // that returned it wins).
    let mut reaped_at: HashMap<u32, u64> = HashMap::new();
    let mut pidfds: HashMap<i64, u32> = HashMap::new();
    for c in &calls {
        let in_driver = tgid.get(&c.tid) == Some(&root);
        match c.name.as_str() {
            "clone" | "clone3" | "fork" | "vfork" => {
                let Some(new) = c.ret.filter(|&r| r > 0).map(|r| r as u32) else {
                    continue;
                };
                let thread = c.args.iter().any(|a| a.contains("CLONE_THREAD"));
                let parent = tgid.get(&c.tid).copied();
                let group = if thread { parent } else { Some(new) };
                if let Some(g) = group {
                    tgid.insert(new, g);
                }
                if in_driver && !thread {
                    v.children.insert(new, false);
                    // Our own spawn: clone3 with CLONE_PIDFD gives the pidfd at birth,
                    // shown as `=> {pidfd=[N]}`.
                    if let Some(fd) = c
                        .raw
                        .split("=> {pidfd=[")
                        .nth(1)
                        .and_then(|r| r.split(']').next().and_then(|n| n.parse::<i64>().ok()))
                    {
                        pidfds.insert(fd, new);
                    }
                }
            }
            _ if !in_driver => {}
            "pidfd_open" => {
                if let (Some(fd), Some(pid)) = (c.ret, c.args.first().and_then(|a| a.parse().ok()))
                {
                    if fd >= 0 {
                        pidfds.insert(fd, pid);
                    }
                }
            }
            "waitid" => {
                let flags = c.args.get(3).map(String::as_str).unwrap_or("");
                let info = c.args.get(2).map(String::as_str).unwrap_or("");
                if c.ret == Some(0) && !flags.contains("WNOWAIT") {
                    if let Some(pid) = field(info, "si_pid=").filter(|&p| p > 0) {
                        reap(&mut v, &mut reaped_at, pid, c);
                    }
                }
            }
            "wait4" => {
                if let Some(pid) = c.ret.filter(|&r| r > 0) {
                    reap(&mut v, &mut reaped_at, pid as u32, c);
                }
            }
            "kill" | "rt_sigqueueinfo" => {
                let target: i64 = match c.args.first().and_then(|a| a.parse().ok()) {
                    Some(t) => t,
                    None => {
                        v.violations.push(format!("unparsed target: {}", c.raw));
                        continue;
                    }
                };
                let pid = target.unsigned_abs() as u32;
                if matches!(target, -1..=1) {
                    v.violations
                        .push(format!("signal to {target} (0, 1, -1): {}", c.raw));
                } else if !v.children.contains_key(&pid) {
                    v.violations.push(format!(
                        "signal to {target}, not a child we forked: {}",
                        c.raw
                    ));
                } else if let Some(at) = reaped_at.get(&pid).filter(|&&at| at <= c.at) {
                    v.violations.push(format!(
                        "signal to {target} {} µs after we reaped {pid}: {}",
                        c.at - at,
                        c.raw
                    ));
                } else if target < 0 && !grouped.contains(&pid) {
                    v.violations.push(format!(
                        "killpg on {pid}, which was not spawned as a group leader: {}",
                        c.raw
                    ));
                }
                if target < 0 {
                    v.group_signals += 1;
                } else {
                    v.kill_signals += 1;
                }
                esrch(&mut v, c);
            }
            "pidfd_send_signal" => {
                v.pidfd_signals += 1;
                let fd: Option<i64> = c.args.first().and_then(|a| a.parse().ok());
                match fd.and_then(|fd| pidfds.get(&fd)) {
                    None => v.violations.push(format!(
                        "pidfd_send_signal on an fd no pidfd_open (nor clone3) returned: {}",
                        c.raw
                    )),
                    Some(pid) if !v.children.contains_key(pid) => v.violations.push(format!(
                        "pidfd_send_signal to {pid}, not a child we forked: {}",
                        c.raw
                    )),
                    Some(pid) => {
                        if let Some(at) = reaped_at.get(pid).filter(|&&at| at <= c.at) {
                            v.violations.push(format!(
                                "pidfd_send_signal to {pid} {} µs after we reaped it: {}",
                                c.at - at,
                                c.raw
                            ));
                        }
                    }
                }
                esrch(&mut v, c);
            }
            "tgkill" | "tkill" | "rt_tgsigqueueinfo" => {
                let target: Option<u32> = c.args.first().and_then(|a| a.parse().ok());
                if target.and_then(|t| tgid.get(&t)) != Some(&root) {
                    v.violations.push(format!(
                        "thread-directed signal outside the driver: {}",
                        c.raw
                    ));
                }
            }
            _ => {}
        }
    }
    v
}

fn field(info: &str, key: &str) -> Option<u32> {
    let start = info.find(key)? + key.len();
    let digits: String = info[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn reap(v: &mut Verdict, reaped_at: &mut HashMap<u32, u64>, pid: u32, c: &Call) {
    if let Some(done) = v.children.get_mut(&pid) {
        *done = true;
        reaped_at.insert(pid, c.at);
    } else {
        v.violations
            .push(format!("reaped {pid}, not a child we forked: {}", c.raw));
    }
}

fn esrch(v: &mut Verdict, c: &Call) {
    if c.errno.as_deref() == Some("ESRCH") {
        v.violations.push(format!(
            "signal to a process that is gone (ESRCH): {}",
            c.raw
        ));
    }
}

/// Reads every `PREFIX.TID` file strace wrote.
fn read_trace(dir: &Path) -> Vec<Call> {
    let mut calls = Vec::new();
    for entry in std::fs::read_dir(dir).expect("trace dir") {
        let path = entry.expect("trace entry").path();
        let Some(tid) = path
            .extension()
            .and_then(|e| e.to_str())
            .and_then(|e| e.parse().ok())
        else {
            continue;
        };
        let text = std::fs::read_to_string(&path).expect("trace file");
        calls.extend(text.lines().filter_map(|l| parse_line(tid, l)));
    }
    calls
}

fn strace_available() -> bool {
    match Command::new("strace").arg("-V").output() {
        Ok(out) if out.status.success() => true,
        _ if std::env::var_os("CHILDGUARD_SKIP_PEERS").is_some_and(|v| v == "1") => {
            eprintln!("strace missing; skipped (CHILDGUARD_SKIP_PEERS=1)");
            false
        }
        other => panic!(
            "strace is needed to record every signal we send: apt-get install strace \
             (or set CHILDGUARD_SKIP_PEERS=1 to skip this test); got {other:?}"
        ),
    }
}

#[test]
fn driver_never_signals_a_stranger_nor_a_reaped_child() {
    if !strace_available() {
        return;
    }
    let dir = scratch("strace");
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("strace")
        .args(["-ff", "-ttt", "-qq", "-e", &format!("trace={TRACED}")])
        .args(["-e", "signal=none", "-o"])
        .arg(dir.join("t"))
        .arg(bin("cg-signal-driver"))
        .arg("strangers")
        .output()
        .expect("running strace");
    let trace = read_trace(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "driver under strace failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let value = |line: &str, key: &str| -> Option<u32> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
    };
    let root = stdout
        .lines()
        .find_map(|l| value(l, "pid=").filter(|_| l.starts_with("DRIVER")))
        .expect("DRIVER line");
    let owned: Vec<(u32, bool)> = stdout
        .lines()
        .filter(|l| l.starts_with("OWNED"))
        .map(|l| (value(l, "pid=").unwrap(), l.contains("group=true")))
        .collect();
    let grouped: HashSet<u32> = owned.iter().filter(|o| o.1).map(|o| o.0).collect();
    assert!(stdout.contains("DRAINED true"), "{stdout}");
    assert!(stdout.contains("END children=0 "), "{stdout}");

    let verdict = check(trace, root, &grouped);
    assert!(
        verdict.violations.is_empty(),
        "{} violation(s):\n{}",
        verdict.violations.len(),
        verdict.violations.join("\n")
    );
    // The trace saw what the driver says it did (and so the checks above checked something).
    for (pid, _) in &owned {
        assert_eq!(
            verdict.children.get(pid),
            Some(&true),
            "owned child {pid} not seen forked and reaped in the trace"
        );
    }
    let unreaped: Vec<_> = verdict.children.iter().filter(|c| !c.1).collect();
    assert!(unreaped.is_empty(), "children never reaped: {unreaped:?}");
    assert!(owned.len() >= 20, "driver owned only {owned:?}");
    assert!(
        verdict.pidfd_signals >= 10 && verdict.kill_signals >= 4 && verdict.group_signals >= 6,
        "too few signals seen to mean anything: {verdict:?}"
    );
    eprintln!(
        "checked {} pidfd, {} kill and {} killpg signals to {} children: no stranger",
        verdict.pidfd_signals,
        verdict.kill_signals,
        verdict.group_signals,
        verdict.children.len()
    );
}

fn calls(lines: &[(u32, &str)]) -> Vec<Call> {
    lines
        .iter()
        .map(|&(tid, l)| parse_line(tid, l).unwrap_or_else(|| panic!("unparsed {l:?}")))
        .collect()
}

const FORK: &str = "1.000001 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 200";
const THREAD: &str = "1.000002 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM, exit_signal=0} => {parent_tid=[101]}, 88) = 101";

#[test]
fn checker_accepts_signals_to_our_unreaped_children() {
    let trace = calls(
        &[
            (100, FORK),
            (100, THREAD),
            (100, "1.000003 pidfd_open(200, 0)  = 5"),
            (101, "1.000004 pidfd_send_signal(5, SIGHUP, NULL, 0) = 0"),
            (100, "1.000005 kill(-200, SIGHUP)  = 0"),
            (100, "1.000006 kill(200, SIGCONT)  = 0"),
            (
                101,
                "1.000007 waitid(P_PIDFD, 5, {si_signo=SIGCHLD, si_code=CLD_KILLED, si_pid=200, si_uid=0, si_status=SIGHUP, si_utime=0, si_stime=0}, WNOHANG|WEXITED, NULL) = 0",
            ),
        ],
    );
    let v = check(trace, 100, &HashSet::from([200]));
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.children, HashMap::from([(200, true)]));
    assert_eq!(
        (v.pidfd_signals, v.kill_signals, v.group_signals),
        (1, 1, 1)
    );
}

#[test]
fn checker_flags_every_kind_of_stranger() {
    let bad = [
        "1.000010 kill(0, SIGHUP)  = 0",
        "1.000010 kill(-1, SIGKILL) = 0",
        "1.000010 kill(1, SIGTERM) = 0",
        "1.000010 kill(4242, SIGTERM) = 0",
        "1.000010 kill(-4242, SIGTERM) = 0",
        "1.000010 tgkill(4242, 4242, SIGSTOP) = 0",
        "1.000010 pidfd_send_signal(9, SIGHUP, NULL, 0) = 0",
    ];
    for line in bad {
        let trace = calls(&[(100, FORK), (100, line)]);
        let v = check(trace, 100, &HashSet::new());
        assert_eq!(v.violations.len(), 1, "{line}: {:?}", v.violations);
    }
}

#[test]
fn checker_flags_signals_after_the_reap_and_esrch() {
    let reap = "1.000005 wait4(-1, [{WIFEXITED(s) && WEXITSTATUS(s) == 7}], 0, NULL) = 200";
    let after = [
        "1.000006 pidfd_send_signal(5, SIGHUP, NULL, 0) = -1 ESRCH (No such process)",
        "1.000006 kill(200, SIGHUP) = 0",
        "1.000006 kill(-200, SIGHUP) = 0",
    ];
    for line in after {
        let trace = calls(&[
            (100, FORK),
            (100, "1.000003 pidfd_open(200, 0)  = 5"),
            (100, reap),
            (100, line),
        ]);
        let v = check(trace, 100, &HashSet::from([200]));
        assert!(!v.violations.is_empty(), "{line} was not flagged");
    }
    // A group leader's group may be signalled only if it was spawned as one.
    let trace = calls(&[(100, FORK), (100, "1.000006 kill(-200, SIGHUP) = 0")]);
    assert_eq!(check(trace, 100, &HashSet::new()).violations.len(), 1);
    // ESRCH alone (no reap seen) is flagged too.
    let trace = calls(&[
        (100, FORK),
        (
            100,
            "1.000006 kill(200, SIGHUP) = -1 ESRCH (No such process)",
        ),
    ]);
    assert_eq!(check(trace, 100, &HashSet::new()).violations.len(), 1);
}

#[test]
fn children_of_children_are_not_ours() {
    // A grandchild forked by our child, and a signal the child sends to itself, are not ours
    // to judge; a signal from us to the grandchild is a stranger.
    let trace = calls(
        &[
            (100, FORK),
            (
                200,
                "1.000002 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD, child_tidptr=0x1) = 300",
            ),
            (200, "1.000003 tgkill(200, 200, SIGSTOP) = 0"),
            (100, "1.000004 kill(300, SIGKILL) = 0"),
        ],
    );
    let v = check(trace, 100, &HashSet::new());
    assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
    assert!(v.violations[0].contains("not a child we forked"));
}
