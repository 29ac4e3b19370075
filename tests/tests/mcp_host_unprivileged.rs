//! Test bed (a) of issue 50: `tests/mcp_host.rs`'s scenarios, and a daemonizing slowserver,
//! run by an unprivileged user of the suite's own (`childguard-user`, tests/run.sh makes it)
//! in root's cgroup with nothing delegated: `--contain` cannot make a cgroup there and must
//! take the next backend — a PID namespace (in a user namespace of the user's own ids), or a
//! subreaper when asked for (`--contain=subreaper`).
//!
//! The host is the MCP Python SDK (`tests/fixtures/mcp_host.py`, from the user's venv), and its
//! server command is the host config of docs/stdio-servers.md ("As the host's command"), read
//! from the page at run time and used unchanged — `"command": "childguard"`, found on the
//! user's `PATH`, and its `args` up to `--` — in front of the stubborn server (ignores EOF,
//! `TERM`, `HUP`, `INT`; a `setsid` worker holding its stdout). The variants change only what
//! they say: `--report text` added (to read the backend in the report), `--contain=subreaper`
//! for `--contain`.
//!
//! Each run checks that childguard really runs as that user (`/proc/PID/status`: the user's
//! uids and gids, no supplementary group, no capability) in the test's own cgroup, which the
//! user cannot write; and which backend holds the tree: the server in a PID namespace below
//! ours (`NSpid`), or the report's `contained by …`. Pids in the stubborn server's pidfile and
//! slowserver's READY line are the server's own (in a namespace: not ours): they are mapped to
//! ours through `NSpid` among childguard's descendants.
//!
//! `measure_for_the_docs` (ignored: run it with `--ignored --nocapture`) times each scenario
//! 5 times per backend (`CHILDGUARD_MEASURE_RUNS`) and prints min/median/max.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use childguard_cli::procs::{children_of, descendants_of};
use childguard_tests::as_user::{
    assert_unprivileged_in_roots_cgroup, assert_users_in_roots_cgroup, ns_pids, our_pid_of,
    suite_user, user_python, Bed,
};
use childguard_tests::cgroups::serial;
use childguard_tests::mcp_host::{behind_sh, npx_project, read_pidfile, Host};
use childguard_tests::stdio_peers::tests_dir;
use childguard_tests::{
    bin, eventually, exited_within, is_alive, left_after, measure_runs, pidfd, spread_ms, Pins,
    DAEMONIZING,
};

/// How long a host may take to start (a python importing the SDK, under load) and finish its
/// session.
const SESSION: Duration = Duration::from_secs(60);

/// The bound for "nothing left" after a SIGKILL: generous, as in `tests/mcp_host.rs` (the
/// docs' ladder alone is 1 s of it when the host is killed; the measured times are printed).
const GONE: Duration = Duration::from_secs(10);

/// The Python SDK's own close waits this long after closing stdin before its `SIGTERM`: a
/// close shorter than it was childguard's ladder.
const SDK_WAIT: f64 = 2.0;

/// How childguard is asked to contain the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contain {
    /// The docs' host config, unchanged (`--contain`: the best backend that works here).
    Docs,
    /// The same with `--report text` before its `--`.
    DocsReport,
    /// `--contain=subreaper` for `--contain`, and `--report text`.
    Subreaper,
}

impl Contain {
    /// The backend that must hold the tree.
    fn backend(self) -> &'static str {
        match self {
            Contain::Docs | Contain::DocsReport => "pid-namespace",
            Contain::Subreaper => "subreaper",
        }
    }

    fn reports(self) -> bool {
        self != Contain::Docs
    }
}

/// docs/stdio-servers.md's host config (the ```json block with `mcpServers`): its command and
/// its args up to and including `--` (what follows is the server, ours here).
fn docs_snippet() -> (String, Vec<String>) {
    let page = tests_dir().join("../docs/stdio-servers.md");
    let text = std::fs::read_to_string(&page).unwrap();
    let block = text
        .split("```json\n")
        .skip(1)
        .filter_map(|b| b.split_once("\n```").map(|(json, _)| json))
        .find(|json| json.contains("\"mcpServers\""))
        .unwrap_or_else(|| panic!("no ```json block with mcpServers in {}", page.display()));
    let config: serde_json::Value = serde_json::from_str(block).expect("the docs' JSON");
    let servers = config["mcpServers"].as_object().expect("mcpServers");
    assert_eq!(servers.len(), 1, "{block}");
    let server = servers.values().next().unwrap();
    let command = server["command"].as_str().expect("command").to_owned();
    let args: Vec<String> = server["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string arg").to_owned())
        .collect();
    let end = args
        .iter()
        .position(|a| a == "--")
        .expect("`--` in the args")
        + 1;
    assert_eq!(command, "childguard", "{block}");
    assert!(args.iter().any(|a| a == "--contain"), "{block}");
    (command, args[..end].to_vec())
}

/// The server command the host is given: the docs' command and args, changed as `contain`
/// says, then `server`.
fn server_command(contain: Contain, server: &[String]) -> Vec<String> {
    let (command, mut args) = docs_snippet();
    if contain == Contain::Subreaper {
        let at = args.iter().position(|a| a == "--contain").unwrap();
        args[at] = "--contain=subreaper".into();
    }
    if contain.reports() {
        let at = args.len() - 1;
        args.splice(at..at, ["--report".to_string(), "text".into()]);
    }
    std::iter::once(command)
        .chain(args)
        .chain(server.iter().cloned())
        .collect()
}

/// The ladder the docs' config gives (`--ladder L`), for the report's note.
fn docs_ladder() -> String {
    let (_, args) = docs_snippet();
    let at = args.iter().position(|a| a == "--ladder").expect("--ladder");
    args[at + 1].clone()
}

/// One bed for a test: the user, `childguard` on its `PATH`, the fixtures, its python.
struct UserBed {
    bed: Bed,
    python: PathBuf,
    runs: std::cell::Cell<usize>,
}

impl UserBed {
    fn new(test: &str) -> Option<UserBed> {
        let user = suite_user(test)?;
        let bed = Bed::new("mcp", user);
        let python = user_python(test, &bed)?;
        // As in the docs: `"command": "childguard"`, found on PATH.
        bed.stage(&bin("cg-childguard"), "childguard");
        for fixture in ["mcp_host.py", "stubborn_mcp.py", "stubborn_mcp.js"] {
            bed.fixture(fixture);
        }
        bed.user_dir("run");
        Some(UserBed {
            bed,
            python,
            runs: std::cell::Cell::new(0),
        })
    }

    /// A fresh pidfile path in the user's `run/`.
    fn pidfile(&self) -> PathBuf {
        let n = self.runs.get();
        self.runs.set(n + 1);
        self.bed.root.join("run").join(format!("pids-{n}"))
    }

    fn fixture(&self, name: &str) -> PathBuf {
        self.bed.root.join("fixtures").join(name)
    }

    /// `python3 stubborn_mcp.py --pidfile P`, the server directly.
    fn stubborn(&self, pidfile: &Path) -> Vec<String> {
        vec![
            "python3".into(),
            self.fixture("stubborn_mcp.py").display().to_string(),
            "--pidfile".into(),
            pidfile.display().to_string(),
        ]
    }

    /// The stubborn server behind a launcher shell that stays (`; exit $?`).
    fn behind_sh(&self, pidfile: &Path) -> Vec<String> {
        behind_sh(&self.fixture("stubborn_mcp.py"), pidfile)
    }

    /// `npx --no-install stubborn-mcp --pidfile P` and the project it runs from: the node
    /// twin as the project's local bin (npm exec → `sh -c` → node → worker), no network; the
    /// user's npm cache in its HOME. `None` (skipped, said) only without node under
    /// `CHILDGUARD_SKIP_PEERS=1`.
    fn behind_npx(&self, test: &str, pidfile: &Path) -> Option<(PathBuf, Vec<String>)> {
        let found = self
            .bed
            .command("sh")
            .args(["-c", "command -v node && command -v npx"])
            .output()
            .unwrap();
        if !found.status.success() {
            if childguard_tests::postgres::skip_peers() {
                eprintln!("SKIPPED {test} behind npx: no node/npx on the user's PATH");
                return None;
            }
            panic!(
                "{test}: node and npx are not on {}'s PATH (Debian's nodejs and npm): run \
                 `bash tests/run.sh` once, or set CHILDGUARD_SKIP_PEERS=1",
                childguard_tests::as_user::SUITE_USER
            );
        }
        let n = self.runs.get();
        let project = self.bed.root.join(format!("npx-project-{n}"));
        let command = npx_project(&project, &self.fixture("stubborn_mcp.js"), pidfile);
        Some((project, command))
    }

    /// Starts `mcp_host.py HOST_FLAGS -- COMMAND…` as the user, from `cwd`.
    fn host(&self, host_flags: &[&str], cwd: &Path, command: &[String]) -> Host {
        let mut cmd = self.bed.command(&self.python);
        cmd.arg(self.fixture("mcp_host.py"))
            .args(host_flags)
            .arg("--")
            .args(command)
            .current_dir(cwd);
        Host::spawn(cmd)
    }
}

/// What a host run found: childguard, its tree init (its one child), and the server and the
/// worker as we see them.
struct Tree {
    childguard: u32,
    init: u32,
    server: u32,
    worker: u32,
    /// Every process below childguard, pinned.
    below: Vec<u32>,
}

/// Once the session is up: childguard (the host's child), checked to be the user's, in root's
/// cgroup; the stubborn server's pids mapped to ours; the backend checked from `/proc` (the
/// report says it only at the end, and the docs' config writes none).
fn find_tree(
    bed: &UserBed,
    host: &Host,
    pidfile: &Path,
    contain: Contain,
    pins: &mut Pins,
) -> Tree {
    let (srv, worker) = read_pidfile(pidfile, SESSION);
    let childguard = host.child_named("childguard");
    assert_unprivileged_in_roots_cgroup(childguard, bed.bed.user);
    let init = {
        let kids = children_of(childguard);
        assert_eq!(
            kids.len(),
            1,
            "childguard's one child, the tree init: {kids:?}"
        );
        kids[0]
    };
    let mut below = Vec::new();
    let mut found = (None, None);
    // The worker is forked right before the pidfile is written: give /proc a moment.
    assert!(
        eventually(SESSION, || {
            below = descendants_of(childguard);
            found = (our_pid_of(srv, &below), our_pid_of(worker, &below));
            found.0.is_some() && found.1.is_some()
        }),
        "the pidfile's {srv} {worker} are not below childguard {childguard}: {below:?}"
    );
    pins.pin([childguard]);
    pins.pin(below.iter().copied());
    let (server, worker) = (found.0.unwrap(), found.1.unwrap());
    for &pid in &below {
        if pid == init {
            assert_users_in_roots_cgroup(pid, bed.bed.user);
        } else {
            assert_unprivileged_in_roots_cgroup(pid, bed.bed.user);
        }
    }
    match contain.backend() {
        "pid-namespace" => {
            assert_eq!(ns_pids(init).len(), 2, "the tree init in a PID namespace");
            assert_eq!(ns_pids(init)[1], 1, "the tree init is its PID 1");
            for pid in &below {
                assert_eq!(ns_pids(*pid).len(), 2, "{pid} in the tree's namespace");
            }
        }
        _ => {
            for pid in std::iter::once(init).chain(below.iter().copied()) {
                assert_eq!(ns_pids(pid).len(), 1, "{pid} in our PID namespace");
            }
        }
    }
    Tree {
        childguard,
        init,
        server,
        worker,
        below,
    }
}

/// childguard's report names the backend, and why the cgroup was passed over (the user cannot
/// write root's cgroup) when it was tried.
fn assert_report_names_backend(stderr: &str, contain: Contain) {
    if !contain.reports() {
        return;
    }
    let want = format!("contained by {}", contain.backend());
    assert!(stderr.contains(&want), "no {want:?} in:\n{stderr}");
    if contain == Contain::DocsReport {
        assert!(
            stderr.contains("contained by pid-namespace (passed over: cgroup: ")
                && stderr.contains("permission denied"),
            "the report should say why the cgroup was passed over:\n{stderr}"
        );
    }
}

/// The host's close: the SDK leaves the session (stdin closed, then its own 2 s wait).
/// Returns how long that close took (the host returns once childguard exits, which it does
/// once the tree is gone).
fn host_close(bed: &UserBed, contain: Contain) -> Duration {
    let pidfile = bed.pidfile();
    let command = server_command(contain, &bed.stubborn(&pidfile));
    let mut host = bed.host(&[], &bed.bed.home(), &command);
    let mut pins = Pins::default();
    let tree = find_tree(bed, &host, &pidfile, contain, &mut pins);
    let (took, stderr) = host.closed(SESSION);
    assert!(
        took < SDK_WAIT,
        "the SDK's close took {took} s: childguard's ladder did not end it within the SDK's \
         own {SDK_WAIT} s wait; stderr:\n{stderr}"
    );
    if contain.reports() {
        let note = format!("note: stdin closed; ladder {}", docs_ladder());
        assert!(stderr.contains(&note), "no {note:?} in:\n{stderr}");
    }
    assert_report_names_backend(&stderr, contain);
    // childguard exits once the tree is gone: its processes may be zombies of the host, of
    // PID 1 at most ("gone").
    let all: Vec<u32> = [tree.childguard, tree.init, tree.server, tree.worker]
        .into_iter()
        .chain(tree.below.iter().copied())
        .collect();
    let left: Vec<u32> = all.iter().copied().filter(|&p| is_alive(p)).collect();
    assert!(
        left.is_empty(),
        "left running after the host's close: {left:?} of {all:?}; stderr:\n{stderr}"
    );
    Duration::from_secs_f64(took)
}

/// Which server the killed host runs.
#[derive(Debug, Clone, Copy)]
enum Launcher {
    Sh,
    Npx,
    /// Behind `sh`, the host forking a sleeper that keeps our stdin open first.
    ShHolder,
}

/// SIGKILLs the host mid-session; asserts everything below it is gone within [`GONE`];
/// returns how long that took (`None`: skipped, no npx).
fn host_killed(
    test: &str,
    bed: &UserBed,
    contain: Contain,
    launcher: Launcher,
) -> Option<Duration> {
    let pidfile = bed.pidfile();
    let (cwd, server) = match launcher {
        Launcher::Sh | Launcher::ShHolder => (bed.bed.home(), bed.behind_sh(&pidfile)),
        Launcher::Npx => bed.behind_npx(test, &pidfile)?,
    };
    let flags: &[&str] = match launcher {
        Launcher::ShHolder => &["--hang", "--fork-holder"],
        _ => &["--hang"],
    };
    let host = bed.host(flags, &cwd, &server_command(contain, &server));
    let mut pins = Pins::default();
    let tree = find_tree(bed, &host, &pidfile, contain, &mut pins);
    let mut holder_pin = Pins::default();
    let holder = host.hanging(
        matches!(launcher, Launcher::ShHolder),
        &mut holder_pin,
        SESSION,
    );
    let all: Vec<u32> = std::iter::once(tree.childguard)
        .chain(descendants_of(tree.childguard))
        .collect();
    pins.pin(all.iter().copied());
    // childguard, the tree init, the launchers, the server, the worker.
    assert!(all.len() >= 4, "tree {all:?}");
    let killed = Instant::now();
    host.sigkill();
    let left = left_after(&all, GONE);
    let took = killed.elapsed();
    assert!(
        left.is_empty(),
        "{contain:?} {launcher:?}: {left:?} of {all:?} still running {GONE:?} after the host's \
         SIGKILL; stderr:\n{}",
        host.stderr()
    );
    if let Some(holder) = holder {
        // The precondition: stdin never closed; only the parent's exit told childguard.
        assert!(is_alive(holder), "the fd holder {holder} died");
        if contain.reports() {
            let mut said = String::new();
            assert!(
                eventually(GONE, || {
                    said = host.stderr();
                    said.contains("childguard's parent (pid ")
                }),
                "childguard should name its parent's exit as the trigger:\n{said}"
            );
        }
    }
    if contain.reports() {
        let mut said = String::new();
        eventually(GONE, || {
            said = host.stderr();
            said.contains("note: ")
        });
        assert_report_names_backend(&said, contain);
    }
    eprintln!(
        "{contain:?} {launcher:?}: {} processes gone {:.3} s after the host's SIGKILL",
        all.len(),
        took.as_secs_f64()
    );
    Some(took)
}

/// SIGKILLs childguard itself mid-session — or, with `group`, childguard's whole process
/// group, as the Python SDK's last step does (`killpg(KILL)`, 4 s after its stdin close); the
/// tree init is in that group, the `setsid` worker is not — and returns how long until
/// everything below it was gone (asserted within [`GONE`]).
fn childguard_killed(bed: &UserBed, contain: Contain, group: bool) -> Duration {
    let pidfile = bed.pidfile();
    let command = server_command(contain, &bed.behind_sh(&pidfile));
    let host = bed.host(&["--hang"], &bed.bed.home(), &command);
    let mut pins = Pins::default();
    let tree = find_tree(bed, &host, &pidfile, contain, &mut pins);
    host.expect_line("HANGING", SESSION);
    let below = descendants_of(tree.childguard);
    pins.pin(below.iter().copied());
    assert!(
        below.contains(&tree.server) && below.contains(&tree.worker) && below.contains(&tree.init),
        "{below:?}"
    );
    let what = if group {
        "childguard's process group's SIGKILL"
    } else {
        "childguard's SIGKILL"
    };
    let killed = Instant::now();
    if group {
        // The host started childguard in a session of its own: its pgid is its pid.
        let pgid = rustix::process::getpgid(rustix::process::Pid::from_raw(tree.childguard as i32))
            .expect("childguard's pgid");
        assert_eq!(pgid.as_raw_nonzero().get() as u32, tree.childguard);
        rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL)
            .expect("SIGKILL childguard's group");
    } else {
        rustix::process::pidfd_send_signal(pidfd(tree.childguard), rustix::process::Signal::KILL)
            .expect("SIGKILL childguard");
    }
    let left = left_after(&below, GONE);
    let took = killed.elapsed();
    assert!(
        left.is_empty(),
        "{contain:?}: {left:?} of {below:?} still running {GONE:?} after {what}; stderr:\n{}",
        host.stderr()
    );
    eprintln!(
        "{contain:?}: {} processes gone {:.3} s after {what}",
        below.len(),
        took.as_secs_f64()
    );
    took
}

#[test]
fn the_hosts_close_as_the_user_leaves_nothing_within_the_ladder() {
    let test = "the_hosts_close_as_the_user_leaves_nothing_within_the_ladder";
    let _serial = serial();
    let Some(bed) = UserBed::new(test) else {
        return;
    };
    for contain in [Contain::Docs, Contain::DocsReport, Contain::Subreaper] {
        let took = host_close(&bed, contain);
        eprintln!(
            "{test}: {contain:?}: the host's close took {:.3} s",
            took.as_secs_f64()
        );
    }
}

#[test]
fn the_host_sigkilled_as_the_user_leaves_nothing() {
    let test = "the_host_sigkilled_as_the_user_leaves_nothing";
    let _serial = serial();
    let Some(bed) = UserBed::new(test) else {
        return;
    };
    for contain in [Contain::Docs, Contain::Subreaper] {
        for launcher in [Launcher::Sh, Launcher::Npx, Launcher::ShHolder] {
            host_killed(test, &bed, contain, launcher);
        }
    }
}

#[test]
fn childguard_sigkilled_as_the_user_leaves_nothing() {
    let test = "childguard_sigkilled_as_the_user_leaves_nothing";
    let _serial = serial();
    let Some(bed) = UserBed::new(test) else {
        return;
    };
    for contain in [Contain::Docs, Contain::Subreaper] {
        childguard_killed(&bed, contain, false);
    }
}

/// The host's `killpg(KILL)` of childguard's group (the Python SDK's last step when the tree
/// outlives its 2 s + 2 s): the tree init dies with childguard, and in a PID namespace the
/// kernel ends the tree.
#[test]
fn childguards_group_sigkilled_as_the_user_leaves_nothing_in_a_pid_namespace() {
    let test = "childguards_group_sigkilled_as_the_user_leaves_nothing_in_a_pid_namespace";
    let _serial = serial();
    let Some(bed) = UserBed::new(test) else {
        return;
    };
    childguard_killed(&bed, Contain::Docs, true);
}

/// The same with the subreaper: the tree init leaves childguard's group once the server is
/// forked, so the group's SIGKILL misses it; it sees childguard gone and ends the tree — the
/// `setsid` worker included. (Before that it died with the group and the worker ran on.)
#[test]
fn childguards_group_sigkilled_as_the_user_leaves_nothing_with_a_subreaper() {
    let test = "childguards_group_sigkilled_as_the_user_leaves_nothing_with_a_subreaper";
    let _serial = serial();
    let Some(bed) = UserBed::new(test) else {
        return;
    };
    childguard_killed(&bed, Contain::Subreaper, true);
}

/// `childguard run --contain[=subreaper] --timeout 4s --report text -- cg-slowserver
/// --daemonize --workers 2 --setsid --ignore HUP,TERM --ignore-eof` as the user (as
/// `tests/contain.rs`'s root version): exit 124, the backend named, nothing of the server,
/// its daemon and its workers left.
#[test]
fn a_daemonizing_server_as_the_user_leaves_nothing_after_a_timeout() {
    let test = "a_daemonizing_server_as_the_user_leaves_nothing_after_a_timeout";
    let _serial = serial();
    let Some(user) = suite_user(test) else {
        return;
    };
    let bed = Bed::new("slowserver", user);
    let childguard = bed.stage(&bin("cg-childguard"), "childguard");
    let slowserver = bed.stage(&bin("cg-slowserver"), "cg-slowserver");
    for (contain, backend) in [
        ("--contain", "pid-namespace"),
        ("--contain=subreaper", "subreaper"),
    ] {
        // 4 s, as the root version: the tree up, READY read and our pidfds opened before the
        // timeout ends it.
        let mut run = bed
            .command(&childguard)
            .args(["run", contain, "--timeout", "4s", "--report", "text", "--"])
            .arg(&slowserver)
            .args(DAEMONIZING)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pins = Pins::default();
        pins.pin([run.id()]);
        let mut ready = String::new();
        BufReader::new(run.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        let field = |key: &str| {
            ready
                .split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .unwrap_or_else(|| panic!("no {key} in READY {ready:?}"))
        };
        let mut inner: Vec<u32> = vec![field("pid=").parse().unwrap()];
        inner.push(field("grandchild=").parse().unwrap());
        inner.extend(
            field("workers=")
                .split(',')
                .map(|p| p.parse::<u32>().unwrap()),
        );
        assert_unprivileged_in_roots_cgroup(run.id(), user);
        let below = descendants_of(run.id());
        pins.pin(below.iter().copied());
        let tree: Vec<u32> = inner
            .iter()
            .map(|&p| {
                our_pid_of(p, &below).unwrap_or_else(|| {
                    panic!("{contain}: READY's {p} is not below childguard: {below:?}")
                })
            })
            .collect();
        for &pid in &tree {
            assert_unprivileged_in_roots_cgroup(pid, user);
            let depth = ns_pids(pid).len();
            assert_eq!(
                depth,
                if backend == "pid-namespace" { 2 } else { 1 },
                "{contain}: {pid}"
            );
        }
        let fds: Vec<_> = tree.iter().map(|&p| pidfd(p)).collect();
        let out = run.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(124), "{contain}: {stderr}");
        assert!(
            stderr.contains(&format!("contained by {backend}")),
            "{contain}: the report should name {backend}:\n{stderr}"
        );
        for (pid, fd) in tree.iter().zip(&fds) {
            assert!(
                exited_within(fd, GONE),
                "{contain}: {pid} outlived `childguard run` (tree {tree:?}): {stderr}"
            );
        }
        eprintln!("{test}: {contain}: exit 124, {} processes gone", tree.len());
    }
}

/// The figures of docs/stdio-servers.md's table for bed (a): for each backend, as the user,
/// the host's close, the host SIGKILLed (behind `sh`) and childguard SIGKILLed, each timed to
/// "nothing left", `CHILDGUARD_MEASURE_RUNS` times (5). Each run asserts what the tests above
/// do.
#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn measure_for_the_docs() {
    let test = "measure_for_the_docs";
    let _serial = serial();
    let Some(bed) = UserBed::new(test) else {
        return;
    };
    let runs = measure_runs();
    let mut table = Vec::new();
    for contain in [Contain::Docs, Contain::Subreaper] {
        let mut close = Vec::new();
        let mut host = Vec::new();
        let mut own = Vec::new();
        for _ in 0..runs {
            close.push(host_close(&bed, contain));
            host.push(host_killed(test, &bed, contain, Launcher::Sh).expect("sh"));
            own.push(childguard_killed(&bed, contain, false));
        }
        table.push(format!(
            "| {} | {} | {} | {} |",
            contain.backend(),
            spread_ms(&mut close, 0),
            spread_ms(&mut host, 0),
            spread_ms(&mut own, 0)
        ));
    }
    eprintln!(
        "\nbed (a), {runs} runs each, ms min / median / max, docs' ladder {}:\n\
         | backend | host's close → 0 left | host SIGKILL → 0 left | childguard SIGKILL → 0 left |\n\
         |---|---|---|---|\n{}",
        docs_ladder(),
        table.join("\n")
    );
}
