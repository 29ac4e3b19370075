//! The two hosts of the podman bed's tests, and the checks of a close: the test itself as a
//! plain host of `childguard run` ([`Launch`]: stdin and stdout piped), or the MCP Python SDK
//! (`tests/fixtures/mcp_host.py`, [`sdk_host`]) with the bed's environment as a host's `"env"`.

use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{run_argv, Container, Guard, Podman, Watch, STUBBORN_MCP};
use crate::mcp_host::{Host, Streams};
use crate::stdio_peers::fixture;
use crate::{bin, eventually, Pins};

/// The docs' ladder (issue 51): EOF waited 1 s, `TERM` (ignored) 500 ms, then `KILL`.
pub const LADDER: &str = "EOF:1s,TERM:500ms,KILL:1s";

/// [`LADDER`]'s total grace: the close's bound.
pub const LADDER_TOTAL: Duration = Duration::from_millis(2500);

/// The ladder under the MCP Python SDK host: its close must be over before the SDK's own 2 s
/// wait ends (then its `SIGTERM` to childguard's group, not our ladder, would end it).
pub const SDK_LADDER: &str = "EOF:200ms,TERM:300ms,KILL:1s";

/// The ladder when the host is killed: short, so that the promised 2 s are mostly margin
/// (`tests/mcp_host.rs`'s).
pub const KILLED_LADDER: &str = "EOF:100ms,TERM:100ms,KILL:1s";

/// The promise after a host's or childguard's `SIGKILL`: the container gone within 2 s.
pub const PROMISE: Duration = Duration::from_secs(2);

/// Added to every bound: a container's start and end under two CPU hogs.
pub const SLACK: Duration = Duration::from_secs(8);

/// How long a container may take to come up (and an MCP session through it).
pub const SESSION: Duration = Duration::from_secs(60);

/// `childguard run --stdio-server FLAGS -- CMD` started by the test as a plain host: stdin and
/// stdout piped, stderr kept, the bed's environment.
#[derive(Debug)]
pub struct Launch {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub streams: Streams,
    pub pins: Pins,
}

impl Launch {
    pub fn start(podman: &Podman, flags: &[&str], cmd: &[String]) -> Launch {
        Launch::start_with_env(podman, flags, cmd, &[])
    }

    /// [`Launch::start`] with `env` added to childguard's environment (a host's big one).
    pub fn start_with_env(
        podman: &Podman,
        flags: &[&str],
        cmd: &[String],
        env: &[(&str, String)],
    ) -> Launch {
        let mut command = Command::new(bin("cg-childguard"));
        command.envs(env.iter().map(|(k, v)| (k, v)));
        command
            .args(["run", "--stdio-server"])
            .args(flags)
            .arg("--")
            .args(cmd)
            .current_dir(std::env::temp_dir());
        podman.env(&mut command);
        Launch::spawn(command)
    }

    /// Spawns `command` (a `childguard run` made by the caller: the bed's, or another
    /// engine's, `tests/src/engines.rs`) as the test's plain host: stdin and stdout piped,
    /// stderr kept, childguard pinned.
    pub fn spawn(mut command: Command) -> Launch {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        crate::sys::clean_start(&mut command);
        let mut child = command.spawn().expect("spawning childguard run");
        let mut pins = Pins::default();
        pins.pin([child.id()]);
        Launch {
            stdin: child.stdin.take(),
            streams: Streams::take(&mut child),
            child,
            pins,
        }
    }

    /// childguard's exit, waiting up to `limit` for it.
    pub fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let mut status = None;
        eventually(limit, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        status
    }

    /// Its stderr: all of it once every writer closed it (waiting a bounded while for that).
    pub fn stderr(&self) -> String {
        eventually(Duration::from_secs(5), || self.streams.stderr_closed());
        self.streams.stderr()
    }

    /// The next stdout line starting with `prefix`.
    pub fn line(&self, prefix: &str) -> String {
        self.streams
            .next_line(SESSION, |l| l.starts_with(prefix))
            .unwrap_or_else(|e| {
                panic!(
                    "no {prefix:?} line on stdout ({e}); stderr:\n{}",
                    self.streams.stderr()
                )
            })
    }
}

/// The report's lines (`childguard: …`) in `stderr`.
pub fn report(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("childguard"))
        .collect();
    lines.join("\n")
}

/// A time of [`Watch`]'s, in ms.
pub fn ms(d: Option<Duration>) -> String {
    d.map_or("not seen".into(), |d| {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    })
}

/// Closes the plain host's side of childguard's stdin (the host's close) with `cg` serving
/// `container`, and checks the end: childguard exits within the ladder's total grace (plus
/// slack), at its exit `podman ps -a` shows none of the test's containers, and the report
/// says `contained by container`.
pub fn close_and_check(test: &str, guard: &Guard<'_>, cg: &mut Launch, c: &Container) {
    let timer = Watch::of(c.pid);
    let closed = Instant::now();
    drop(cg.stdin.take());
    let timer = timer.time(closed, LADDER_TOTAL + SLACK);
    let status = cg.exit_within(LADDER_TOTAL + SLACK);
    let took = closed.elapsed();
    let at_exit = guard.made();
    let gone = guard.gone_within(closed, SLACK);
    let exits = timer.join().unwrap();
    let stderr = cg.stderr();
    eprintln!(
        "{test}: stdin closed → childguard exited +{:.0} ms ({status:?}), container {}'s PID 1 \
         exited +{}, conmon +{}, podman ps -a without it +{}; ladder {LADDER}\n{}",
        took.as_secs_f64() * 1e3,
        c.name,
        ms(exits.pid1),
        ms(exits.monitor),
        gone.as_ref().map_or("never".into(), |d| ms(Some(*d))),
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
        "{test}: podman ps -a still shows {at_exit:?} when childguard exited (later: {gone:?}); \
         the close must be over only once the container is gone; stderr:\n{stderr}"
    );
    assert!(
        stderr.contains("contained by container"),
        "{test}: the report should say `contained by container`:\n{stderr}"
    );
}

/// `mcp_host.py HOST_FLAGS --env CONTAINERS_CONF=… -- childguard run --stdio-server --contain
/// --report text --ladder LADDER -- podman run -i --rm IMAGE sh -c STUBBORN_MCP`.
pub fn sdk_host(python: &Path, podman: &Podman, host_flags: &[&str], ladder: &str) -> Host {
    let mut cmd = Command::new(python);
    cmd.arg(fixture("mcp_host.py"))
        .args(host_flags)
        .args(["--env", &podman.env_var(), "--"])
        .arg(bin("cg-childguard"))
        .args(["run", "--stdio-server", "--contain", "--report", "text"])
        .args(["--ladder", ladder, "--"])
        .args(run_argv(STUBBORN_MCP))
        .current_dir(std::env::temp_dir());
    Host::spawn(cmd)
}

/// childguard's `comm` (the file name of the CLI under test, as the kernel cuts it).
pub fn cli_comm() -> String {
    let path = bin("cg-childguard");
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    name.chars().take(15).collect()
}

/// [`close_and_check`] for a run with `--report json`: the report's `containment.backend`
/// must be `container`. Returns childguard's stderr.
pub fn close_and_check_json(
    test: &str,
    guard: &Guard<'_>,
    cg: &mut Launch,
    c: &Container,
) -> String {
    let closed = Instant::now();
    drop(cg.stdin.take());
    let status = cg.exit_within(LADDER_TOTAL + SLACK);
    let took = closed.elapsed();
    let at_exit = guard.made();
    let stderr = cg.stderr();
    let json: Option<serde_json::Value> = stderr.lines().find_map(|l| {
        serde_json::from_str(l)
            .ok()
            .filter(|v: &serde_json::Value| v.is_object())
    });
    eprintln!(
        "{test}: stdin closed → childguard exited +{:.0} ms ({status:?}); the report's \
         containment: {}",
        took.as_secs_f64() * 1e3,
        json.as_ref()
            .map_or("none".into(), |j| j["containment"].to_string())
    );
    assert!(
        status.is_some(),
        "{test}: childguard still running:\n{stderr}"
    );
    assert!(
        at_exit.is_empty(),
        "{test}: podman ps -a still shows {at_exit:?} when childguard exited:\n{stderr}"
    );
    let json = json.unwrap_or_else(|| panic!("{test}: no --report json line on stderr:\n{stderr}"));
    assert_eq!(
        json["containment"]["backend"], "container",
        "{test}: the report's containment, for {}: {}",
        c.name, json["containment"]
    );
    stderr
}
