//! Test bed (b) of issue 50: `childguard run --contain` as root inside a real runc container
//! (the bed of `tests/src/runc.rs`: a busybox rootfs, `runc spec`'s config — no
//! `CAP_SYS_ADMIN`, no cgroup2 mounted inside) under the seccomp rule of Docker's default
//! profile against user namespaces (`unshare`/`clone` with `CLONE_NEWUSER`: `EPERM`; `clone3`:
//! `ENOSYS`). No cgroup can be made there, no PID namespace either (`CLONE_NEWPID` needs
//! `CAP_SYS_ADMIN`, or a user namespace, which the rule refuses): the subreaper is what is left,
//! and `--report text` must say so — `contained by subreaper (passed over: cgroup: …;
//! pid-namespace: …)`.
//!
//! The container's PID 1 is busybox `sleep`; the host, started in it by `runc exec`, is
//! `cg-stdio-host` (tests/src/bin: the rootfs has no Python), built static as
//! crates/childguard-cli/install.sh builds the CLI, or taken from `CHILDGUARD_TEST_STDIO_HOST`.
//! It runs the host command of `tests/mcp_host.rs` with the report added —
//! `childguard run --stdio-server --contain --report text --ladder EOF:200ms,TERM:300ms,KILL:1s
//! -- sh -c STUBBORN` — and the stubborn server is a busybox shell: it ignores `TERM`, `HUP`,
//! `INT` and stdin's EOF, echoes lines, and leaves a `setsid` worker holding its stdout.
//!
//! "Left" is every process of the container's PID namespace alive (not a zombie) but PID 1
//! and, where it still runs, the host. The tree (childguard, its tree init, the server, the
//! worker) is pinned by pidfds before each ending, and the time until every one of them has
//! exited is what is printed (`measure_for_the_docs`, ignored: 5 runs each, min/median/max).
//! Bounds are generous: 2 s for endings that take 0.2 s (the ladder's `EOF` rung) or a few
//! milliseconds (the tree init seeing childguard gone).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use childguard_cli::procs::{children_of, descendants_of};
use childguard_tests::as_user::{ns_pids, our_pid_of};
use childguard_tests::cgroups::serial;
use childguard_tests::init::comm;
use childguard_tests::mcp_host::Streams;
use childguard_tests::runc::{self, Container, Spec};
use childguard_tests::{
    bin, eventually, exited_within, is_alive, measure_runs, pidfd, spread_ms, Pins, DAEMONIZING,
};

/// The ladder of the host command (`tests/mcp_host.rs`'s, docs/stdio-servers.md).
const LADDER: &str = "EOF:200ms,TERM:300ms,KILL:1s";

/// The stubborn server in busybox's shell: ignores `TERM`, `HUP`, `INT`; a `setsid` worker
/// holding its stdout; echoes lines; ignores stdin's EOF (as `tests/fixtures/stubborn_mcp.py`).
const STUBBORN: &str = "trap '' TERM HUP INT; setsid sh -c 'exec sleep 1000' & \
                        while read -r line; do echo \"$line\"; done; exec sleep 1001";

/// The tree below the host once the session is up: childguard, its tree init (a fork of it:
/// the same name), the server, the worker.
const TREE: [&str; 4] = ["childguard", "childguard", "sh", "sleep"];

/// How long a session may take to come up (`runc exec`, under load).
const SESSION: Duration = Duration::from_secs(30);

/// The bound on "nothing left" after each ending, and on the host's close.
const GONE: Duration = Duration::from_secs(2);

/// The host helper, static: `CHILDGUARD_TEST_STDIO_HOST`, else built once by `rustc` from
/// `tests/src/bin/cg-stdio-host.rs` (std only) with `-C target-feature=+crt-static` and an
/// explicit `--target` (as install.sh builds the CLI), into the target directory; rebuilt
/// when the source is newer.
fn static_host() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("CHILDGUARD_TEST_STDIO_HOST") {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "CHILDGUARD_TEST_STDIO_HOST={} is not a file",
                path.display()
            );
            return path;
        }
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bin/cg-stdio-host.rs");
        let exe = std::env::current_exe().unwrap();
        let target = exe.parent().and_then(Path::parent).expect("target dir");
        let dir = target.join("static-helpers");
        let out = dir.join("cg-stdio-host");
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        if modified(&out).is_some() && modified(&out) >= modified(&source) {
            return out;
        }
        std::fs::create_dir_all(&dir).unwrap();
        // The toolchain that runs the tests: cargo's own rustc, beside it.
        let rustc = std::env::var_os("CARGO")
            .map(PathBuf::from)
            .map(|cargo| cargo.with_file_name("rustc"))
            .filter(|r| r.is_file())
            .unwrap_or_else(|| PathBuf::from("rustc"));
        let version = Command::new(&rustc)
            .arg("-vV")
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (the runc tests build their static host helper with it, or set \
                 CHILDGUARD_TEST_STDIO_HOST)",
                    rustc.display()
                )
            });
        let text = String::from_utf8_lossy(&version.stdout).into_owned();
        let host = text
            .lines()
            .find_map(|l| l.strip_prefix("host: "))
            .expect("rustc -vV: host");
        let partial = dir.join(format!("cg-stdio-host.{}", std::process::id()));
        let built = Command::new(&rustc)
            .args([
                "--edition",
                "2021",
                "-O",
                "-C",
                "target-feature=+crt-static",
            ])
            .args(["--target", host, "-o"])
            .arg(&partial)
            .arg(&source)
            .output()
            .expect("running rustc");
        assert!(
            built.status.success(),
            "rustc {}: {}",
            source.display(),
            String::from_utf8_lossy(&built.stderr)
        );
        // What the flag made (install.sh's check): a static binary names no library.
        let ldd = Command::new("ldd").arg(&partial).output();
        if let Ok(ldd) = ldd {
            let said = String::from_utf8_lossy(&ldd.stdout);
            assert!(
                !said.contains("=>"),
                "{} came out dynamically linked: {said}",
                partial.display()
            );
        }
        std::fs::rename(&partial, &out).unwrap();
        eprintln!("runc_contain: built {} (static, {host})", out.display());
        out
    })
    .clone()
}

/// A container whose PID 1 is `sleep`, with childguard, the host helper and slowserver in
/// it, with or without the seccomp rule; its `runc`. `None`: skipped (no runc or busybox,
/// `CHILDGUARD_SKIP_PEERS=1`).
fn container(test: &str, seccomp: bool) -> Option<(PathBuf, Container)> {
    let (runc, busybox) = runc::tools(test)?;
    let mut spec = Spec::new(&["sleep", "1000000"])
        .program(&bin("cg-childguard"), "/bin/childguard")
        .program(&static_host(), "/bin/cg-stdio-host")
        .program(&bin("cg-slowserver"), "/bin/slowserver");
    if seccomp {
        spec = spec.without_user_namespaces();
    }
    let container = Container::run(&runc, &busybox, &spec);
    Some((runc, container))
}

/// The container's processes alive now, but PID 1 and `except`.
fn left(container: &Container, except: &[u32]) -> Vec<u32> {
    container
        .processes()
        .into_iter()
        .filter(|p| *p != container.init && !except.contains(p))
        .collect()
}

/// `runc exec ID ARGS…` in the container (its stdio passed through to the process: stdin
/// piped, stdout read line by line, stderr kept), and the pids a test pins.
struct Exec {
    child: Child,
    stdin: Option<ChildStdin>,
    streams: Streams,
    pins: Pins,
}

impl Exec {
    fn start(runc: &Path, container: &Container, runc_flags: &[&str], args: &[&str]) -> Exec {
        let mut cmd = Command::new(runc);
        cmd.arg("exec")
            .args(runc_flags)
            .arg(&container.id)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        childguard_tests::sys::clean_start(&mut cmd);
        let mut child = cmd.spawn().expect("spawning runc exec");
        Exec {
            stdin: child.stdin.take(),
            streams: Streams::take(&mut child),
            child,
            pins: Pins::default(),
        }
    }

    /// The host helper in `mode` (`close`, `hang`) in front of the host command.
    fn host(runc: &Path, container: &Container, mode: &str) -> Exec {
        let mut args = vec!["/bin/cg-stdio-host", mode, "--"];
        args.extend([
            "childguard",
            "run",
            "--stdio-server",
            "--contain",
            "--report",
            "text",
            "--ladder",
            LADDER,
            "--",
            "sh",
            "-c",
            STUBBORN,
        ]);
        Exec::start(runc, container, &[], &args)
    }

    fn stderr(&self) -> String {
        self.streams.stderr()
    }

    /// All of stderr, once every writer has closed it (bounded: what came by then).
    fn stderr_at_end(&self) -> String {
        eventually(GONE, || self.streams.stderr_closed());
        self.stderr()
    }

    /// The next stdout line starting with `prefix`, within `limit` (the host's `FAILED` line
    /// fails the test).
    fn expect_line(&self, prefix: &str, limit: Duration) -> String {
        let line = self
            .streams
            .next_line(limit, |l| l.starts_with(prefix) || l.starts_with("FAILED"))
            .unwrap_or_else(|e| {
                panic!(
                    "no {prefix:?} line within {limit:?} ({e}); stderr:\n{}",
                    self.stderr()
                )
            });
        if !line.starts_with(prefix) {
            panic!("the host: {line}; stderr:\n{}", self.stderr())
        }
        line
    }

    /// `runc exec`'s exit status, within `limit`.
    fn exit_within(&mut self, limit: Duration) -> std::process::ExitStatus {
        let mut status = None;
        eventually(limit, || {
            status = self.child.try_wait().ok().flatten();
            status.is_some()
        });
        status.unwrap_or_else(|| panic!("runc exec still running; stderr:\n{}", self.stderr()))
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        // The pins SIGKILL what is left of the session (the host in the container).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A session up: the host, childguard and the tree below it, as the host sees them.
struct Session {
    exec: Exec,
    host: u32,
    childguard: u32,
    /// childguard and every process below it, pinned.
    tree: Vec<(u32, std::os::fd::OwnedFd)>,
}

/// Starts the host in `mode` and returns once the session is up: the echo came back, the
/// tree is [`TREE`], and nothing else runs in the container. Checks where the tree is: in
/// the container's PID namespace (not a namespace of its own: no pid-namespace backend).
fn session(runc: &Path, container: &Container, mode: &str) -> Session {
    let mut exec = Exec::host(runc, container, mode);
    let child: u32 = exec.expect_line("CHILD ", SESSION)["CHILD ".len()..]
        .parse()
        .expect("CHILD pid");
    exec.expect_line("ECHO ", SESSION);
    exec.expect_line("READY", SESSION);
    let hosts: Vec<u32> = left(container, &[])
        .into_iter()
        .filter(|&p| comm(p).as_deref() == Some("cg-stdio-host"))
        .collect();
    assert_eq!(hosts.len(), 1, "one host in the container: {hosts:?}");
    let host = hosts[0];
    exec.pins.pin([host]);
    let childguard = our_pid_of(child, &left(container, &[]))
        .unwrap_or_else(|| panic!("the host's CHILD {child} is not in the container"));
    assert_eq!(children_of(host), vec![childguard], "the host's one child");
    let mut below = Vec::new();
    let up = eventually(SESSION, || {
        below = std::iter::once(childguard)
            .chain(descendants_of(childguard))
            .collect();
        let mut names: Vec<String> = below.iter().filter_map(|&p| comm(p)).collect();
        names.sort();
        names == TREE
    });
    let names: Vec<Option<String>> = below.iter().map(|&p| comm(p)).collect();
    assert!(
        up,
        "the tree never was {TREE:?}: {below:?} {names:?}; stderr:\n{}",
        exec.stderr()
    );
    exec.pins.pin(below.iter().copied());
    let others: BTreeSet<u32> = left(container, &[host]).into_iter().collect();
    assert_eq!(
        others,
        below.iter().copied().collect(),
        "the container holds the host, the tree and PID 1 only"
    );
    let depth = ns_pids(container.init).len();
    for &p in &below {
        assert_eq!(
            ns_pids(p).len(),
            depth,
            "{p} is not in the container's own PID namespace"
        );
    }
    let tree = below.iter().map(|&p| (p, pidfd(p))).collect();
    Session {
        exec,
        host,
        childguard,
        tree,
    }
}

/// Waits up to [`GONE`] for every pinned process of `tree` to exit; how long that took from
/// `since`, or those still running.
fn all_exited(tree: &[(u32, std::os::fd::OwnedFd)], since: Instant) -> Result<Duration, Vec<u32>> {
    let end = since + GONE;
    let running: Vec<u32> = tree
        .iter()
        .filter(|(_, fd)| !exited_within(fd, end.saturating_duration_since(Instant::now())))
        .map(|(p, _)| *p)
        .collect();
    if running.is_empty() {
        Ok(since.elapsed())
    } else {
        Err(running)
    }
}

/// The report names the subreaper, and why the cgroup and the PID namespace were passed over.
fn assert_subreaper_reported(stderr: &str) {
    assert!(
        stderr.contains("contained by subreaper (passed over: cgroup: ")
            && stderr.contains("; pid-namespace: "),
        "the report should name the subreaper and why cgroup and pid-namespace were passed \
         over:\n{stderr}"
    );
}

/// Nothing of the container but PID 1 and `except`, within [`GONE`].
fn assert_nothing_left(container: &Container, except: &[u32], after: &str, stderr: &str) {
    assert!(
        eventually(GONE, || left(container, except).is_empty()),
        "left in the container {GONE:?} after {after}: {:?}; stderr:\n{stderr}",
        left(container, except)
    );
}

/// (i) The host's close (its server's stdin closed, then a wait for its exit): childguard
/// climbs its ladder on the EOF (`TERM` skipped, ignored; `KILL` at 200 ms) and the
/// subreaper kills the tree, worker included. Returns (close → 0 left, the host's own
/// close → childguard's exit).
fn host_close(runc: &Path, container: &Container) -> (Duration, Duration) {
    let mut s = session(runc, container, "close");
    let closed = Instant::now();
    let mut stdin = s.exec.stdin.take().unwrap();
    writeln!(stdin, "close").expect("the cue to the host");
    drop(stdin);
    let took = all_exited(&s.tree, closed).unwrap_or_else(|running| {
        panic!(
            "{running:?} of the tree still running {GONE:?} after the host's close; stderr:\n{}",
            s.exec.stderr()
        )
    });
    let exited = s.exec.expect_line("EXITED ", SESSION);
    let own: f64 = exited
        .rsplit(' ')
        .next()
        .and_then(|ms| ms.parse().ok())
        .expect("EXITED … ms");
    let status = s.exec.exit_within(SESSION);
    let stderr = s.exec.stderr_at_end();
    assert!(status.success(), "the host: {status}; stderr:\n{stderr}");
    assert!(
        took < GONE,
        "the host's close took {took:?}; stderr:\n{stderr}"
    );
    let note = format!("note: stdin closed; ladder {LADDER}");
    assert!(stderr.contains(&note), "no {note:?} in:\n{stderr}");
    assert_subreaper_reported(&stderr);
    assert_nothing_left(container, &[], "the host's close", &stderr);
    if let Some(line) = stderr.lines().find(|l| l.contains("contained by")) {
        eprintln!("runc_contain: after the host's close: {line}");
    }
    (took, Duration::from_secs_f64(own / 1e3))
}

/// (ii) The host `SIGKILL`ed mid-session: childguard sees its parent gone (and its stdin's
/// EOF), climbs the ladder, the subreaper kills the tree. Returns the kill → 0 left.
fn host_killed(runc: &Path, container: &Container) -> Duration {
    let s = session(runc, container, "hang");
    let killed = Instant::now();
    rustix::process::pidfd_send_signal(pidfd(s.host), rustix::process::Signal::KILL)
        .expect("SIGKILL the host");
    let took = all_exited(&s.tree, killed).unwrap_or_else(|running| {
        panic!(
            "{running:?} of the tree still running {GONE:?} after the host's SIGKILL; \
             stderr:\n{}",
            s.exec.stderr()
        )
    });
    let stderr = s.exec.stderr_at_end();
    assert!(!is_alive(s.host), "the host {} survived SIGKILL", s.host);
    assert_subreaper_reported(&stderr);
    assert_nothing_left(container, &[], "the host's SIGKILL", &stderr);
    took
}

/// (iii) childguard itself `SIGKILL`ed mid-session (no report: it is dead): the tree init,
/// watching childguard's pidfd, kills the tree. Returns the kill → 0 left; the host still runs.
fn childguard_killed(runc: &Path, container: &Container) -> Duration {
    let s = session(runc, container, "hang");
    let killed = Instant::now();
    rustix::process::pidfd_send_signal(pidfd(s.childguard), rustix::process::Signal::KILL)
        .expect("SIGKILL childguard");
    let took = all_exited(&s.tree, killed).unwrap_or_else(|running| {
        panic!(
            "{running:?} of the tree still running {GONE:?} after childguard's SIGKILL; \
             stderr:\n{}",
            s.exec.stderr()
        )
    });
    assert!(is_alive(s.host), "the host {} died", s.host);
    assert_nothing_left(
        container,
        &[s.host],
        "childguard's SIGKILL",
        &s.exec.stderr(),
    );
    took
}

#[test]
fn the_hosts_close_leaves_nothing_within_the_ladder_under_a_subreaper() {
    let test = "runc_contain::host_close";
    let _serial = serial();
    let Some((runc, container)) = container(test, true) else {
        return;
    };
    let (took, own) = host_close(&runc, &container);
    eprintln!(
        "{test}: 0 left {:.1} ms after the host's close (the host saw childguard exit after \
         {:.1} ms)",
        took.as_secs_f64() * 1e3,
        own.as_secs_f64() * 1e3
    );
}

#[test]
fn the_host_sigkilled_leaves_nothing_under_a_subreaper() {
    let test = "runc_contain::host_killed";
    let _serial = serial();
    let Some((runc, container)) = container(test, true) else {
        return;
    };
    let took = host_killed(&runc, &container);
    eprintln!(
        "{test}: 0 left {:.1} ms after the host's SIGKILL",
        took.as_secs_f64() * 1e3
    );
}

#[test]
fn childguard_sigkilled_leaves_nothing_under_a_subreaper() {
    let test = "runc_contain::childguard_killed";
    let _serial = serial();
    let Some((runc, container)) = container(test, true) else {
        return;
    };
    let took = childguard_killed(&runc, &container);
    eprintln!(
        "{test}: 0 left {:.1} ms after childguard's SIGKILL",
        took.as_secs_f64() * 1e3
    );
}

/// (iv) `childguard run --contain --timeout 300ms --report text -- slowserver --daemonize
/// --workers 2 --setsid --ignore HUP,TERM --ignore-eof` (a double-forked `setsid` daemon and
/// two `setsid` workers, all ignoring `TERM`): exit 124, the subreaper named, nothing left.
#[test]
fn a_daemonizing_server_leaves_nothing_after_a_timeout_under_a_subreaper() {
    let test = "runc_contain::daemonizing";
    let _serial = serial();
    let Some((runc, container)) = container(test, true) else {
        return;
    };
    let mut args = vec![
        "childguard",
        "run",
        "--contain",
        "--timeout",
        "300ms",
        "--report",
        "text",
        "--",
        "slowserver",
    ];
    args.extend(DAEMONIZING);
    let mut run = Exec::start(&runc, &container, &[], &args);
    let ready = run.expect_line("READY ", SESSION);
    let field = |key: &str| {
        ready
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {ready:?}"))
            .to_owned()
    };
    assert_ne!(field("grandchild="), "0", "no daemon: {ready}");
    assert_eq!(field("workers=").split(',').count(), 2, "{ready}");
    let status = run.exit_within(SESSION);
    let stderr = run.stderr_at_end();
    assert_eq!(status.code(), Some(124), "{status}; stderr:\n{stderr}");
    assert_subreaper_reported(&stderr);
    assert_nothing_left(&container, &[], "the timeout", &stderr);
    eprintln!("{test}: exit 124, 0 left ({ready})");
}

/// Which backend `childguard run --contain -- true` takes in the container, with the
/// capabilities of `runc spec` (`--cap` adds one to the exec'd process): its report's
/// `contained by …` clause.
fn backend_taken(runc: &Path, container: &Container, runc_flags: &[&str]) -> String {
    let mut run = Exec::start(
        runc,
        container,
        runc_flags,
        &[
            "childguard",
            "run",
            "--contain",
            "--report",
            "text",
            "--",
            "true",
        ],
    );
    let status = run.exit_within(SESSION);
    let stderr = run.stderr_at_end();
    assert!(status.success(), "{status}: {stderr}");
    let at = stderr
        .find("contained by ")
        .unwrap_or_else(|| panic!("no backend named: {stderr}"));
    let clause = &stderr[at..];
    clause[..clause.find("; total").unwrap_or(clause.len())]
        .trim()
        .to_owned()
}

/// What answers `--contain` in the container, and why. Under the rule: the subreaper, with
/// or without `CAP_SETFCAP` (Docker grants it; `runc spec` does not). Without the rule, the
/// user namespace is made, and with `CAP_SETFCAP` (since Linux 5.12 needed to map uid 0 into
/// it) a PID namespace in it answers: the rule is what leaves the subreaper. Without the rule
/// and without `CAP_SETFCAP` the uid map is refused (printed, not asserted: older kernels
/// allow it).
#[test]
fn the_seccomp_rule_is_what_leaves_the_subreaper() {
    let test = "runc_contain::backends";
    let _serial = serial();
    let Some((runc, ruled)) = container(test, true) else {
        return;
    };
    let setfcap: &[&str] = &["--cap", "CAP_SETFCAP"];
    for flags in [&[][..], setfcap] {
        let clause = backend_taken(&runc, &ruled, flags);
        eprintln!("{test}: under the rule, runc exec {flags:?}: {clause}");
        assert!(
            clause.starts_with("contained by subreaper (passed over: cgroup: ")
                && clause.contains("; pid-namespace: "),
            "{flags:?}: {clause}"
        );
    }
    drop(ruled);
    let Some((runc, open)) = container(test, false) else {
        return;
    };
    let clause = backend_taken(&runc, &open, &[]);
    eprintln!("{test}: without the rule, runc spec's capabilities: {clause}");
    let clause = backend_taken(&runc, &open, setfcap);
    eprintln!("{test}: without the rule, with CAP_SETFCAP: {clause}");
    assert!(
        clause.starts_with("contained by pid-namespace (passed over: cgroup: "),
        "without the rule, a PID namespace in a user namespace should answer: {clause}"
    );
}

/// The figures of docs/containers.md: in one container under the rule, the host's close,
/// the host `SIGKILL`ed and childguard `SIGKILL`ed, each timed to "0 left",
/// `CHILDGUARD_MEASURE_RUNS` times (5); each run asserts what the tests above do.
#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn measure_for_the_docs() {
    let test = "runc_contain::measure";
    let _serial = serial();
    let Some((runc, container)) = container(test, true) else {
        return;
    };
    let runs = measure_runs();
    let (mut close, mut own, mut host, mut ours) = (vec![], vec![], vec![], vec![]);
    for _ in 0..runs {
        let (took, seen) = host_close(&runc, &container);
        close.push(took);
        own.push(seen);
        host.push(host_killed(&runc, &container));
        ours.push(childguard_killed(&runc, &container));
    }
    eprintln!(
        "\nbed (b), runc + Docker's rule against user namespaces (subreaper), {runs} runs, \
         ms min / median / max, ladder {LADDER}:\n\
         | host's close → 0 left | (the host's own wait) | host SIGKILL → 0 left | childguard \
         SIGKILL → 0 left |\n|---|---|---|---|\n| {} | {} | {} | {} |",
        spread_ms(&mut close, 1),
        spread_ms(&mut own, 1),
        spread_ms(&mut host, 1),
        spread_ms(&mut ours, 1)
    );
}
