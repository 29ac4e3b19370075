//! Shared helpers for childguard's integration tests: finding the fixture binaries, spawning
//! slowserver over a socketpair, and looking at `/proc` for leaks.

#![deny(unsafe_code)]

pub mod as_user;
pub mod cgroups;
pub mod command;
pub mod driver;
pub mod engines;
pub mod http;
pub mod init;
pub mod lsp;
pub mod mcp_host;
pub mod nbd;
pub mod paced;
pub mod podman;
pub mod postgres;
pub mod probe;
pub mod runc;
pub mod stdio_peers;
#[allow(unsafe_code)]
pub mod sys;
pub mod terminal;

use std::io::Read;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ending, Ladder, Signal, SocketMode};

/// A binary built from this package (`cg-slowserver`, `cg-supervisor`), next to the test
/// executable's `deps/` directory.
///
/// `cg-childguard`, the CLI, is the path in `CHILDGUARD_TEST_CLI` when that is set: tests/run.sh
/// runs the CLI's tests once more on the static build `crates/childguard-cli/install.sh`
/// makes, the one users install.
pub fn bin(name: &str) -> PathBuf {
    if name == "cg-childguard" {
        if let Some(cli) = std::env::var_os("CHILDGUARD_TEST_CLI") {
            let path = PathBuf::from(cli);
            assert!(
                path.is_file(),
                "CHILDGUARD_TEST_CLI={} is not a file (crates/childguard-cli/install.sh PREFIX \
                 makes PREFIX/bin/childguard)",
                path.display()
            );
            return path;
        }
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(|d| {
        if d.ends_with("deps") {
            d.parent()
        } else {
            Some(d)
        }
    });
    let path = dir.expect("target dir").join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test --workspace` (it builds the fixtures)",
        path.display()
    );
    path
}

/// `sh -c script`.
pub fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]);
    cmd
}

/// A ladder from its text form (a test's own, known to parse).
pub fn ladder(text: &str) -> Ladder {
    text.parse().expect("test ladder")
}

/// A `Command` for the slowserver fixture with these flags.
pub fn slowserver(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("cg-slowserver"));
    cmd.args(args);
    cmd
}

/// slowserver's flags for a `Ready::Notify` server that sends `WATCHDOG=1` every 20 ms — for
/// `pings_for` only, if given (then it hangs: pings no more, runs on) — and ignores stdin EOF.
pub fn pinging(pings_for: Option<&'static str>) -> Vec<&'static str> {
    let mut args = vec!["--notify", "--watchdog-every", "20ms", "--ignore-eof"];
    if let Some(time) = pings_for {
        args.extend(["--watchdog-for", time]);
    }
    args
}

/// slowserver's flags for the hardest tree to end: a double-forked `setsid` daemon
/// (`--daemonize`) and two `setsid` workers, all ignoring `HUP`, `TERM` and stdin's EOF.
pub const DAEMONIZING: [&str; 7] = [
    "--daemonize",
    "--workers",
    "2",
    "--setsid",
    "--ignore",
    "HUP,TERM",
    "--ignore-eof",
];

/// Some note of `notes` (a notify report's, a close report's) starts with `prefix`.
#[track_caller]
pub fn assert_noted(notes: &[String], prefix: &str) {
    assert!(
        notes.iter().any(|n| n.starts_with(prefix)),
        "no note starts with {prefix:?}: {notes:?}"
    );
}

/// The parsed `READY pid=… grandchild=…` line.
#[derive(Debug, Clone, Copy)]
pub struct Ready {
    pub pid: u32,
    pub grandchild: u32,
}

/// Reads slowserver's READY line from the handle's socket, byte by byte (nothing beyond the
/// newline is consumed).
pub fn read_ready(handle: &ChildHandle) -> Ready {
    read_ready_with_workers(handle).0
}

/// [`read_ready`], plus the pids of `--workers` (READY's `workers=P1,P2,…`; empty without).
pub fn read_ready_with_workers(handle: &ChildHandle) -> (Ready, Vec<u32>) {
    let mut socket = handle.socket().expect("handle has a socket");
    // Only a guard against a child that never gets ready: 60 s, since `--alloc 0.25` touches
    // 256 MiB before READY, which took over 10 s under two CPU hogs (memory_release.rs).
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8];
    while line.last() != Some(&b'\n') {
        // A signal handler in this process (SIGCHLD: ours on the portable mechanism, tokio's)
        // makes a read with a timeout fail with EINTR even under SA_RESTART: retry.
        let n = match socket.read(&mut byte) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            n => n.expect("reading READY"),
        };
        assert_eq!(
            n,
            1,
            "slowserver closed its socket before READY: {:?}",
            String::from_utf8_lossy(&line)
        );
        line.push(byte[0]);
    }
    let text = String::from_utf8(line).unwrap();
    let field = |key: &str| -> u32 {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {text:?}"))
    };
    let workers = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("workers="))
        .map(|list| {
            list.split(',')
                .map(|p| {
                    p.parse()
                        .unwrap_or_else(|_| panic!("bad workers= in {text:?}"))
                })
                .collect()
        })
        .unwrap_or_default();
    let ready = Ready {
        pid: field("pid="),
        grandchild: field("grandchild="),
    };
    (ready, workers)
}

/// Spawns slowserver `args` over a socketpair with `ladder`, and waits for READY.
pub fn spawn_slow(args: &[&str], ladder: &str, group: bool) -> (ChildHandle, Ready) {
    let ladder: Ladder = ladder.parse().expect("test ladder");
    let handle = ChildHandle::builder(slowserver(args))
        .socket(SocketMode::Stdio)
        .ladder(ladder)
        .process_group(group)
        .spawn()
        .expect("spawning slowserver");
    let ready = read_ready(&handle);
    assert_eq!(Some(ready.pid), handle.id());
    (handle, ready)
}

/// The state letter of `pid` in `/proc` (`R`, `S`, `T`, `Z`, …), or `None` if it is gone.
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].chars().next()
}

/// The parent pid of `pid`, if it exists.
pub fn proc_ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

/// Whether `pid` is still a child of this test process (alive or zombie).
pub fn is_our_child(pid: u32) -> bool {
    proc_ppid(pid) == Some(std::process::id())
}

/// Whether `pid` is alive (exists and is not a zombie).
pub fn is_alive(pid: u32) -> bool {
    matches!(proc_state(pid), Some(s) if s != 'Z' && s != 'X')
}

/// Those of `pids` still alive after up to `limit` (empty: all gone in time). "Alive" as
/// [`is_alive`]: not a zombie, so a killed orphan its reaper has not reaped yet counts as gone.
pub fn left_after(pids: &[u32], limit: Duration) -> Vec<u32> {
    eventually(limit, || pids.iter().all(|&p| !is_alive(p)));
    pids.iter().copied().filter(|&p| is_alive(p)).collect()
}

/// Waits up to `limit` for `cond`, checking every millisecond. Returns whether it held.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Open fds of this process, not counting handles on its own `/proc/self/fd` directory: the
/// one this function reads through, and the one childguard keeps for the life of the process
/// (opened by the first spawn, close-on-exec; see `inheritable.rs`). Every other fd counts.
pub fn fd_count() -> usize {
    open_fds().len()
}

/// The numbers of this process's open fds, as [`fd_count`] counts them.
fn open_fds() -> Vec<i32> {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&fd| !is_own_fd_table(fd))
        .collect()
}

/// Open fds of this process and what each names (`readlink` of `/proc/self/fd/N`), for
/// messages that say *which* fd a count found extra or missing.
pub fn fd_table() -> Vec<(i32, String)> {
    let mut table: Vec<(i32, String)> = open_fds()
        .into_iter()
        .filter_map(|fd| {
            let target = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
            Some((fd, target.display().to_string()))
        })
        .collect();
    table.sort();
    table
}

/// The fds open now that were not in `before` (a [`fd_table`]): what a leak check must find
/// empty. A table, not a count: background work of an earlier test (the reaper, the event
/// loop) may close an fd of its own meanwhile, which a count takes for a leak undone; a number
/// reused for something else shows as new.
pub fn fds_new_since(before: &[(i32, String)]) -> Vec<(i32, String)> {
    fd_table()
        .into_iter()
        .filter(|fd| !before.contains(fd))
        .collect()
}

/// Whether our fd `fd` is a handle on this process's own `/proc/self/fd` directory.
pub fn is_own_fd_table(fd: i32) -> bool {
    let own_table = PathBuf::from(format!("/proc/{}/fd", std::process::id()));
    std::fs::read_link(format!("/proc/self/fd/{fd}")).ok() == Some(own_table)
}

/// How many times a `measure_for_the_docs` test times each scenario:
/// `CHILDGUARD_MEASURE_RUNS`, 5 unless set.
pub fn measure_runs() -> usize {
    std::env::var("CHILDGUARD_MEASURE_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5)
}

/// min / median / max of `times` (which it sorts), in ms with `decimals` decimals.
pub fn spread_ms(times: &mut [Duration], decimals: usize) -> String {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "{:.*} / {:.*} / {:.*}",
        decimals,
        ms(times[0]),
        decimals,
        ms(times[times.len() / 2]),
        decimals,
        ms(times[times.len() - 1])
    )
}

/// SIGKILLs a pid we know is ours (test cleanup of deliberately leaked processes).
pub fn sigkill(pid: u32) {
    // SAFETY-free: std has no kill(pid); use the kill(1) command to stay out of unsafe code.
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

/// A unique scratch path under the system temp dir.
pub fn scratch(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    std::env::temp_dir().join(format!("childguard-test-{}-{n}-{name}", std::process::id()))
}

/// [`scratch`]`(name)` as a directory, emptied of what an earlier run left and created.
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = scratch(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// A [`fresh_dir`] removed, with what it holds, on drop.
#[derive(Debug)]
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    pub fn new(name: &str) -> Self {
        Self(fresh_dir(name))
    }

    /// The path of `name` in it, as text (for command lines).
    pub fn file(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Pids whose parent is this process, alive or zombie.
pub fn our_children() -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&pid| proc_ppid(pid) == Some(me))
        .collect()
}

/// A pidfd pinning `pid` (for cleanup that must never hit a recycled pid).
pub fn pidfd(pid: u32) -> std::os::fd::OwnedFd {
    let raw = rustix::process::Pid::from_raw(pid as i32).expect("pid > 0");
    rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()).expect("pidfd_open")
}

/// Whether the process `pin` (a pidfd) refers to has exited, waiting up to `wait` for it.
/// Through a pidfd, not the pid: a process that is not our child, or one already reaped, may
/// have its pid reused by another, which `/proc/<pid>` would show alive.
pub fn exited_within(pin: &std::os::fd::OwnedFd, wait: Duration) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let end = Instant::now() + wait;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        let timeout = Timespec::try_from(left).expect("a test-sized wait");
        let mut fds = [PollFd::new(pin, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(n) => return n > 0,
            // A signal handler in this process (SIGCHLD: ours, tokio's) interrupts the poll.
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => panic!("poll on a pidfd: {e}"),
        }
    }
}

/// `require_peer!(found)`: the peer's path from a finder that returns `Option`, or return
/// from the test. The only early return allowed: the finders panic, naming what to install,
/// unless `CHILDGUARD_SKIP_PEERS=1` asked for the skip (they return `None` then).
#[macro_export]
macro_rules! require_peer {
    ($found:expr) => {
        match $found {
            Some(path) => path,
            None => return,
        }
    };
}

/// A process pinned by a pidfd: whether it is gone is asked through the pidfd (never a
/// recycled pid), and it is SIGKILLed when the pin is dropped (cleanup, also when an assertion
/// failed first; nothing once it exited).
#[derive(Debug)]
pub struct Pin {
    pub pid: u32,
    fd: std::os::fd::OwnedFd,
}

impl Pin {
    /// Pins `pid`, which must be running (or a zombie) now.
    pub fn new(pid: u32) -> Self {
        Self {
            pid,
            fd: pidfd(pid),
        }
    }

    /// Whether it has exited, waiting up to `wait` for that ([`exited_within`]).
    pub fn gone_within(&self, wait: Duration) -> bool {
        exited_within(&self.fd, wait)
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let _ = rustix::process::pidfd_send_signal(&self.fd, rustix::process::Signal::KILL);
    }
}

/// Processes pinned ([`Pin`]) as a test finds them, all SIGKILLed when the test ends, pass or
/// fail: a failing test leaves nothing behind.
#[derive(Debug, Default)]
pub struct Pins(Vec<Pin>);

impl Pins {
    /// Pins those of `pids` alive now and not pinned yet.
    pub fn pin(&mut self, pids: impl IntoIterator<Item = u32>) {
        for pid in pids {
            if !self.0.iter().any(|p| p.pid == pid) && is_alive(pid) {
                self.0.push(Pin::new(pid));
            }
        }
    }

    pub fn pids(&self) -> Vec<u32> {
        self.0.iter().map(|p| p.pid).collect()
    }
}

/// Closes `handle` once its child exited on its own, waiting up to 30 s for that (a close
/// right away would signal a child before it wrote what the test reads in the report).
pub fn exited_then_closed(mut handle: ChildHandle) -> childguard::CloseReport {
    let status = handle.wait_timeout(Duration::from_secs(30)).unwrap();
    assert!(status.is_some(), "the child did not exit within 30 s");
    handle.close().unwrap()
}

/// Spawns `builder`, whose child must exit with `code` during start-up: the spawn fails
/// within `bound` (generous: the exit, not a timeout, ends the wait), saying
/// `exited during start-up with exit status: CODE`. The error, for more checks.
pub fn spawn_fails_as_the_child_exits(
    builder: childguard::Builder,
    code: i32,
    bound: Duration,
) -> childguard::Error {
    let began = Instant::now();
    let err = builder
        .spawn()
        .expect_err("the child exits during start-up");
    let took = began.elapsed();
    assert!(took < bound, "not at once: {took:?}: {err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("exited during start-up with exit status: {code}")),
        "{text}"
    );
    err
}

/// The ending "rung `index` (sending `signal`) ended it", for comparing with
/// `CloseReport::ended_by`.
pub fn rung(index: usize, signal: Signal) -> Ending {
    Ending::Rung { index, signal }
}

/// Fails loudly unless this process (and so every child it spawns, which inherits ignored
/// dispositions through `exec`) has none of `signals` ignored. A background job of a shell
/// without job control starts with `SIGINT` and `SIGQUIT` ignored: a server without its own
/// handler for them then ignores a ladder's INT or QUIT rung, and a test of those rungs would
/// fail for a reason that is not ours.
pub fn require_signals_not_ignored(test: &str, signals: &[libc::c_int]) {
    let status = std::fs::read_to_string("/proc/self/status").expect("reading /proc/self/status");
    let ignored = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .expect("SigIgn in /proc/self/status");
    for &signo in signals {
        assert!(
            ignored & (1u64 << (signo - 1)) == 0,
            "{test}: precondition: signal {signo} is ignored in the test process (SigIgn \
             {ignored:#x}) and would be in the servers it spawns; run the tests from a shell with \
             job control or in the foreground, not as a `cmd &` job of a script"
        );
    }
}

/// This process's resident set size, in KiB (`VmRSS` of `/proc/self/status`).
pub fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// `cg-supervisor`'s first two lines on stdout: its `CHILD <pid>` (the server it spawned) and
/// the server's own first line (its ready line). The supervisor's stdout must be piped.
pub fn supervised_child(sup: &mut std::process::Child) -> (u32, String) {
    let mut out = std::io::BufReader::new(sup.stdout.take().expect("a piped stdout"));
    next_supervised_child(&mut out)
}

/// The next line pair (`CHILD <pid>`, the server's ready line) on `cg-supervisor`'s stdout.
pub fn next_supervised_child(out: &mut impl std::io::BufRead) -> (u32, String) {
    let (mut child, mut ready) = (String::new(), String::new());
    out.read_line(&mut child).unwrap();
    out.read_line(&mut ready).unwrap();
    let pid = child
        .trim()
        .strip_prefix("CHILD ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("cg-supervisor's line is not `CHILD <pid>`: {child:?}"));
    (pid, ready)
}

/// The lines a close report says were not passed on to `on_line`/the passthrough because the
/// callback fell behind (its note `on_line/passthrough fell behind: N stdout and M stderr
/// line(s) …`), stdout and stderr together; 0 without that note.
pub fn dropped_lines(report: &childguard::CloseReport) -> u64 {
    let Some(note) = report
        .notes
        .iter()
        .find_map(|n| n.strip_prefix("on_line/passthrough fell behind: "))
    else {
        return 0;
    };
    let words: Vec<&str> = note.split_whitespace().collect();
    let number = |i: usize| -> u64 {
        words
            .get(i)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("unexpected note {note:?}"))
    };
    number(0) + number(3)
}

/// A multi-thread tokio runtime with 2 workers and every driver on: what the async tests
/// (async stdio, the rmcp adapter, capture delivery) run their futures on.
pub fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}
