//! `childguard init` as PID 1 of a real runc container (issue 50 item 5, test bed (b)), stopped
//! as an engine stops one: `runc kill ID TERM` to PID 1. CMD is a shell that ignores `TERM`
//! and waits for a `sleep` that inherits that, beside a `setsid` sleeper that ignores it too.
//! Ours stops the container at once (the ignored `TERM` skipped, `KILL` next, then the sweep
//! of the namespace), with nothing left; tini-static, dumb-init and catatonit forward the
//! `TERM` and keep running until the engine's `KILL` (docker's comes 10 s later).
//!
//! The bounds are generous (2 s for a stop the bench measures in milliseconds, see
//! `childguard-bench container`); the measured time is printed. The same under Docker's
//! seccomp rule against user namespaces, which the bed offers for later tests — and whose
//! refusal is checked here from inside the container.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use childguard_tests::init::comm;
use childguard_tests::runc::{self, Container, Spec};
use childguard_tests::{bin, eventually, require_peer};

/// The TERM-ignoring CMD: a `setsid` sleeper, and a shell waiting for a `sleep`.
const CMD: &str = "trap '' TERM; setsid sleep 1000 & sleep 1001 & wait";

/// CMD's processes once it is up: the shell and the two `sleep`s (the container holds PID 1
/// too, and whatever else the init runs).
const CMD_PROCESSES: usize = 3;

/// A generous bound on a stop that takes milliseconds.
const STOP_BOUND: Duration = Duration::from_secs(2);

/// The Dockerfile's `ENTRYPOINT` of docs/containers.md: a budget under docker's 10 s grace.
fn ours(test: &str, seccomp: bool) -> Option<(PathBuf, PathBuf, Spec)> {
    let (runc, busybox) = runc::tools(test)?;
    let mut spec = Spec::new(&[
        "/bin/childguard",
        "init",
        "--stop-budget",
        "9s",
        "--",
        "sh",
        "-c",
        CMD,
    ])
    .program(&bin("cg-childguard"), "/bin/childguard");
    if seccomp {
        spec = spec.without_user_namespaces();
    }
    Some((runc, busybox, spec))
}

/// The container with CMD up (both `sleep`s exec'd), and CMD's processes.
fn started(runc: &Path, busybox: &Path, spec: &Spec) -> (Container, Vec<u32>) {
    let container = Container::run(runc, busybox, spec);
    container.await_named("sleep", 2);
    let cmd = cmd_processes(&container);
    assert_eq!(
        cmd.len(),
        CMD_PROCESSES,
        "{cmd:?}; stderr: {}",
        container.stderr()
    );
    (container, cmd)
}

/// The container's processes named `sh` or `sleep`, alive.
fn cmd_processes(container: &Container) -> Vec<u32> {
    let named = |p: &u32| matches!(comm(*p).as_deref(), Some("sh" | "sleep"));
    container.processes().into_iter().filter(named).collect()
}

fn init_stops_the_container(test: &str, seccomp: bool) {
    let (runc, busybox, spec) = require_peer!(ours(test, seccomp));
    let (mut container, _) = started(&runc, &busybox, &spec);
    let sent = Instant::now();
    container.kill("TERM");
    let stopped = container.stopped_within(STOP_BOUND);
    let took = sent.elapsed();
    assert!(
        stopped,
        "{test}: still running {took:?} after runc kill TERM; stderr: {}",
        container.stderr()
    );
    eprintln!(
        "{test}: stopped {:.1} ms after runc kill TERM",
        took.as_secs_f64() * 1e3
    );
    assert!(
        eventually(STOP_BOUND, || container.processes().is_empty()),
        "left: {:?}",
        container.processes()
    );
    // init swept the namespace itself, before the kernel's end of it would have. Its stderr
    // reaches the file through runc, which copies it from a pipe: read once runc has exited.
    let status = container.exit_within(Duration::from_secs(10));
    assert!(
        status.is_some(),
        "{test}: runc run still running after the stop"
    );
    let report = container.stderr();
    assert!(
        report.contains("childguard init: stop: 0 processes left"),
        "{report}"
    );
    assert!(
        report.contains("skipped: ignored by the server"),
        "{report}"
    );
}

#[test]
fn childguard_init_stops_a_term_ignoring_container_at_once_with_nothing_left() {
    init_stops_the_container("runc_init::ours", false);
}

#[test]
fn childguard_init_does_so_under_dockers_rule_against_user_namespaces() {
    init_stops_the_container("runc_init::ours_seccomp", true);
}

/// A peer as PID 1 (`/bin/NAME -- sh -c CMD`) does not stop the container within 1 s of the
/// `TERM`: everything still runs; the engine's `KILL` ends it.
fn peer_keeps_it_running(test: &str, name: &str, package: &str) {
    let Some((runc, busybox)) = runc::tools(test) else {
        return;
    };
    let path = require_peer!(runc::peer(test, name, package));
    let inside = format!("/bin/{name}");
    let spec = Spec::new(&[inside.as_str(), "--", "sh", "-c", CMD]).program(&path, &inside);
    let (container, cmd) = started(&runc, &busybox, &spec);
    container.kill("TERM");
    assert!(
        !container.stopped_within(Duration::from_secs(1)),
        "{test}: {name} stopped the container; stderr: {}",
        container.stderr()
    );
    assert_eq!(
        cmd_processes(&container),
        cmd,
        "{test}: CMD's processes changed"
    );
    let left = container.processes();
    eprintln!(
        "{test}: {name}: still running 1 s after runc kill TERM, {} processes",
        left.len()
    );
    container.kill("KILL");
    assert!(
        container.stopped_within(STOP_BOUND),
        "{test}: KILL did not stop it"
    );
    assert!(
        eventually(STOP_BOUND, || container.processes().is_empty()),
        "left after KILL: {:?}",
        container.processes()
    );
}

#[test]
fn tini_static_keeps_it_running_until_the_engines_kill() {
    peer_keeps_it_running("runc_init::tini_static", "tini-static", "tini");
}

#[test]
fn dumb_init_keeps_it_running_until_the_engines_kill() {
    peer_keeps_it_running("runc_init::dumb_init", "dumb-init", "dumb-init");
}

#[test]
fn catatonit_keeps_it_running_until_the_engines_kill() {
    peer_keeps_it_running("runc_init::catatonit", "catatonit", "catatonit");
}

/// The bed's seccomp rule: `unshare -U` is refused inside (`EPERM`), and only because of the
/// rule — the same container without it may make one.
#[test]
fn the_seccomp_rule_refuses_user_namespaces_inside() {
    let test = "runc_init::seccomp";
    let Some((runc, busybox)) = runc::tools(test) else {
        return;
    };
    let script = "unshare -U true && echo USERNS-MADE";
    let run = |spec: Spec| {
        let mut container = Container::run(&runc, &busybox, &spec);
        let status = container.exit_within(Duration::from_secs(30));
        assert!(status.is_some(), "{test}: `{script}` did not end");
        (status.unwrap(), container.stdout(), container.stderr())
    };
    let (status, out, err) = run(Spec::new(&["sh", "-c", script]).without_user_namespaces());
    assert!(!status.success(), "{test}: {status}: {out} {err}");
    assert!(!out.contains("USERNS-MADE"), "{out}");
    assert!(
        err.contains("unshare(0x10000000): Operation not permitted"),
        "{err}"
    );
    let (status, out, err) = run(Spec::new(&["sh", "-c", script]));
    assert!(
        status.success() && out.contains("USERNS-MADE"),
        "{test}: without the rule, this host refused a user namespace too ({status}): {err} — \
         the rule is then not what the seccomp test shows"
    );
}
