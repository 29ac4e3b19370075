//! The scenarios of issue 51, the same for each [`Engine`]: the docs' `childguard run
//! --stdio-server --contain --ladder … -- ENGINE run -i --rm IMAGE sh -c 'trap "" TERM; while
//! :; do sleep 1; done'` (the stubborn server: PID 1 of its container, it ignores `TERM` and
//! stdin's EOF; only `KILL` ends it), run by the engine's user, ended three ways:
//!
//! - [`hosts_close`]: the host (the test) closes childguard's stdin; the ladder climbs to
//!   `KILL` and childguard exits once `ps -a` no longer shows the container;
//! - [`host_sigkilled`]: the host, the MCP Python SDK (`tests/fixtures/mcp_host.py`) hanging
//!   in a session with the same server speaking MCP, is `SIGKILL`ed: the container is gone
//!   within 2 s;
//! - [`childguard_sigkilled`]: childguard itself is `SIGKILL`ed: its guardian runs `ENGINE kill
//!   NAME`, the container is gone within 2 s, and the engine's client too.
//!
//! Each asserts that `ENGINE ps -a`, run as the engine's user, shows none of the containers
//! that childguard named, and prints its times (`--nocapture`): the ending's, when the
//! container's PID 1 and the engine's process over it (`conmon`, `containerd-shim`) exited,
//! when `ps -a` showed it gone. The bounds asserted are generous (a loaded CI machine: the
//! promise plus [`SLACK`]); the figures say how close to the promise each run came.

use std::time::{Duration, Instant};

use childguard_cli::procs::children_of;

use super::{Engine, Exits};
use crate::as_user::{status_field, user_python};
use crate::mcp_host::Host;
use crate::podman::host::{
    ms, report, Launch, KILLED_LADDER, LADDER, LADDER_TOTAL, PROMISE, SESSION, SLACK,
};
use crate::podman::{STUBBORN, STUBBORN_MCP};
use crate::stdio_peers::{fixture, mcp_python};
use crate::{eventually, left_after, pidfd, Pins};

/// `childguard run --stdio-server FLAGS -- ARGV` as the engine's user, the test its plain
/// host ([`Launch::spawn`]).
fn launch(engine: &Engine, flags: &[&str], argv: &[String]) -> Launch {
    let mut command = engine.command_of(&engine.childguard);
    command
        .args(["run", "--stdio-server"])
        .args(flags)
        .arg("--")
        .args(argv);
    if engine.bed.is_none() {
        command.current_dir(std::env::temp_dir());
    }
    Launch::spawn(command)
}

/// childguard (pid `cg`) runs as the engine's user: for rootless podman, the user's ids.
fn assert_runs_as_the_user(engine: &Engine, cg: u32) {
    if let Some(user) = engine.user() {
        let want = format!("{0}\t{0}\t{0}\t{0}", user.uid);
        assert_eq!(
            status_field(cg, "Uid").as_deref(),
            Some(want.as_str()),
            "childguard {cg} should run as {}",
            crate::as_user::SUITE_USER
        );
    }
}

/// How a run went, in one line: the times of [`Exits`] and of `ps -a`.
fn times(
    engine: &Engine,
    watch: (&str, Exits),
    gone: &Result<Duration, Vec<super::Container>>,
) -> String {
    let (monitor, exits) = watch;
    format!(
        "PID 1 exited +{}, {monitor} +{}, {} ps -a without it +{}",
        ms(exits.pid1),
        ms(exits.monitor),
        engine.who(),
        gone.as_ref()
            .map_or_else(|left| format!("never: {left:?}"), |d| ms(Some(*d)))
    )
}

/// The figure for the promise: `within 2 s` or `LATE`.
fn promise(gone: &Result<Duration, Vec<super::Container>>) -> &'static str {
    match gone {
        Ok(d) if *d <= PROMISE => "within the promised 2 s",
        _ => "LATE: past the promised 2 s",
    }
}

/// The host (the test) closes childguard's stdin: the ladder [`LADDER`] climbs to `KILL`;
/// childguard exits within its total grace (plus slack), and at its exit `ps -a` shows none
/// of its containers; the report says `contained by container`.
pub fn hosts_close(test: &str, engine: &Engine) {
    let flags = ["--contain", "--report", "text", "--ladder", LADDER];
    let mut cg = launch(engine, &flags, &engine.run_argv(STUBBORN));
    let guard = engine.guard(cg.child.id());
    let c = guard.running(SESSION, || cg.streams.stderr());
    assert_runs_as_the_user(engine, cg.child.id());
    let watch = engine.watch(&c);
    let monitor = watch.monitor_comm.clone();
    let closed = Instant::now();
    drop(cg.stdin.take());
    let timer = watch.time(closed, LADDER_TOTAL + SLACK);
    let status = cg.exit_within(LADDER_TOTAL + SLACK);
    let took = closed.elapsed();
    let at_exit = guard.made();
    let gone = guard.gone_within(closed, SLACK);
    let exits = timer.join().unwrap();
    let stderr = cg.stderr();
    eprintln!(
        "{test}: {}: the host's close (stdin closed) → childguard exited +{:.0} ms \
         ({}); container {}: {}; ladder {LADDER}\n{}",
        engine.who(),
        took.as_secs_f64() * 1e3,
        status.map_or("still running".into(), |s| s.to_string()),
        c.name,
        times(engine, (&monitor, exits), &gone),
        report(&stderr)
    );
    assert!(
        status.is_some(),
        "{test}: childguard still running {:?} after its stdin closed (ladder {LADDER}); \
         stderr:\n{stderr}",
        LADDER_TOTAL + SLACK
    );
    assert!(
        at_exit.is_empty(),
        "{test}: {} ps -a still shows {at_exit:?} when childguard exited (later: {gone:?}); \
         the close must be over only once the container is gone; stderr:\n{stderr}",
        engine.who()
    );
    assert!(
        stderr.contains("contained by container"),
        "{test}: the report should say `contained by container`:\n{stderr}"
    );
}

/// The MCP Python SDK as the host (as the engine's user: the user's venv), hanging in a
/// session with `--env` giving the engine's variables as a host's `"env"`.
fn sdk_host(test: &str, engine: &Engine) -> Option<Host> {
    let (python, host) = match &engine.bed {
        Some(bed) => (user_python(test, bed)?, bed.fixture("mcp_host.py")),
        None => (mcp_python(test)?, fixture("mcp_host.py")),
    };
    let mut cmd = engine.command_of(python);
    cmd.arg(host).arg("--hang");
    for var in engine.env_args() {
        cmd.args(["--env", &var]);
    }
    cmd.arg("--")
        .arg(&engine.childguard)
        .args(["run", "--stdio-server", "--contain", "--report", "text"])
        .args(["--ladder", KILLED_LADDER, "--"])
        .args(engine.run_argv(STUBBORN_MCP));
    if engine.bed.is_none() {
        cmd.current_dir(std::env::temp_dir());
    }
    Some(Host::spawn(cmd))
}

/// The host `SIGKILL`ed mid-session: childguard sees its stdin's EOF, climbs [`KILLED_LADDER`],
/// and the container is gone within 2 s (asserted with slack; the time printed); childguard
/// exits too.
pub fn host_sigkilled(test: &str, engine: &Engine) {
    let Some(host) = sdk_host(test, engine) else {
        return;
    };
    let mut holder = Pins::default();
    host.hanging(false, &mut holder, SESSION);
    let comm: String = engine
        .childguard
        .file_name()
        .unwrap()
        .to_string_lossy()
        .chars()
        .take(15)
        .collect();
    let cg = host.child_named(&comm);
    let mut pins = Pins::default();
    pins.pin([cg]);
    assert_runs_as_the_user(engine, cg);
    let guard = engine.guard(cg);
    let c = guard.running(SESSION, || host.stderr());
    let watch = engine.watch(&c);
    let monitor = watch.monitor_comm.clone();
    let killed = Instant::now();
    host.sigkill();
    let timer = watch.time(killed, PROMISE + SLACK);
    let gone = guard.gone_within(killed, PROMISE + SLACK);
    let cg_left = left_after(&[cg], SLACK);
    let exits = timer.join().unwrap();
    eventually(SLACK, || host.stderr().contains("note: "));
    let stderr = host.stderr();
    eprintln!(
        "{test}: {}: the host SIGKILLed → container {}: {} ({}); ladder {KILLED_LADDER}\n{}",
        engine.who(),
        c.name,
        times(engine, (&monitor, exits), &gone),
        promise(&gone),
        report(&stderr)
    );
    assert!(
        gone.is_ok(),
        "{test}: {} ps -a still shows {:?} {:?} after the host's SIGKILL; stderr:\n{stderr}",
        engine.who(),
        gone.unwrap_err(),
        PROMISE + SLACK
    );
    assert!(
        cg_left.is_empty(),
        "{test}: childguard {cg} still running after the host's SIGKILL"
    );
    assert!(
        stderr.contains("contained by container"),
        "{test}: the report should say `contained by container`:\n{stderr}"
    );
}

/// childguard itself `SIGKILL`ed: no ladder, no close of its own — its guardian runs `ENGINE
/// kill NAME`, and the container is gone within 2 s (asserted with slack; the time printed);
/// the engine's client goes too.
pub fn childguard_sigkilled(test: &str, engine: &Engine) {
    let flags = ["--contain", "--report", "text", "--ladder", KILLED_LADDER];
    let mut cg = launch(engine, &flags, &engine.run_argv(STUBBORN));
    let guard = engine.guard(cg.child.id());
    let c = guard.running(SESSION, || cg.streams.stderr());
    assert_runs_as_the_user(engine, cg.child.id());
    let below = children_of(cg.child.id());
    cg.pins.pin(below.iter().copied());
    let watch = engine.watch(&c);
    let monitor = watch.monitor_comm.clone();
    let killed = Instant::now();
    rustix::process::pidfd_send_signal(pidfd(cg.child.id()), rustix::process::Signal::KILL)
        .expect("SIGKILL childguard");
    let timer = watch.time(killed, PROMISE + SLACK);
    let gone = guard.gone_within(killed, PROMISE + SLACK);
    let left = left_after(&below, SLACK);
    let exits = timer.join().unwrap();
    eprintln!(
        "{test}: {}: childguard SIGKILLed → container {}: {} ({})",
        engine.who(),
        c.name,
        times(engine, (&monitor, exits), &gone),
        promise(&gone)
    );
    assert!(
        gone.is_ok(),
        "{test}: {} ps -a still shows {:?} {:?} after childguard's SIGKILL (its guardian \
         should have run `{} kill`); stderr:\n{}",
        engine.who(),
        gone.unwrap_err(),
        PROMISE + SLACK,
        engine.name,
        cg.streams.stderr()
    );
    assert!(
        left.is_empty(),
        "{test}: childguard's children {left:?} (of {below:?}: the {} client) still running",
        engine.name
    );
}
