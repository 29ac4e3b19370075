//! The podman test bed (issue 51: container engines as launchers). A container engine's client
//! (`podman run -i --rm IMAGE …`) is only a launcher: kill it and the container lives on, held
//! by conmon. `tests/container_launcher.rs` checks that `childguard run` makes the container
//! the tree it ends; this module is what those tests stand on:
//!
//! - **podman, rootful** (Debian's `podman`, tests/run.sh installs it): the tests run as root;
//! - **the image** [`IMAGE`], busybox imported from a rootfs by tests/run.sh, so that nothing is
//!   pulled (no registry is reachable from CI);
//! - **the runtime**: where the sandbox refuses runc's `setrlimit` of the container's process,
//!   podman runs `cg-runc-norlimits` (tests/src/bin: runc once the bundle's `process.rlimits`
//!   is dropped). Chosen by a containers.conf of the bed's ([`Podman::conf`]) named by
//!   `CONTAINERS_CONF` in the environment of what the tests start ([`Podman::env`]), so the
//!   argv stays what a user types. Every podman that touches the bed's containers needs it —
//!   childguard's `podman kill`, its guardian's, conmon's cleanup — and gets it by inheritance;
//!   a plain `podman ps` without it complains that runtime `cg-runc` is unknown while one of
//!   them exists;
//! - **counting** with `podman ps -a` ([`Podman::containers`]), what a user would look at;
//! - **a guard** ([`Podman::guard`]): the containers a test made are those that were not there
//!   when it started and carry the test process's [`MARKER`] (an environment variable the
//!   bed's containers.conf gives every container: the argv stays the user's); it counts them,
//!   waits for them, and removes any left (`podman rm --force`) when the test ends, pass or
//!   fail;
//! - **the hosts** ([`host`]): the test as a plain host of `childguard run`, or the MCP Python
//!   SDK; the ladders and bounds of the tests, and the checks of a close.

pub mod host;

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::postgres::{find_peer, skip_peers};

/// The bed's image: busybox (every applet a symlink to it), `PATH=/bin`, made by tests/run.sh.
pub const IMAGE: &str = "localhost/childguard-busybox:1";

/// What to do when the bed's tools are missing.
pub const INSTALL: &str = "apt-get install -y podman busybox-static, then `bash tests/run.sh` \
                           (it installs both and imports the image localhost/childguard-busybox:1 \
                           from busybox: nothing is pulled)";

/// The prefix of the names childguard gives the containers it starts (`--name childguard-…`).
pub const NAME_PREFIX: &str = "childguard-";

/// The stubborn server of issue 51, as a shell script for `sh -c`: PID 1 of its container,
/// it ignores `TERM` (and stdin's EOF: it never reads it). Only a `KILL` ends it.
pub const STUBBORN: &str = r#"trap "" TERM; while :; do sleep 1; done"#;

/// The stubborn server that speaks MCP, as a busybox shell script for `sh -c` (the image has
/// no Python): it answers `initialize`, `tools/list` (one tool, `echo`) and `tools/call` (the
/// `text` argument back), one JSON-RPC message a line, ignores `TERM`, `HUP` and `INT`, and
/// when stdin ends it sleeps on (as `tests/fixtures/stubborn_mcp.py` does).
pub const STUBBORN_MCP: &str = r#"trap '' TERM HUP INT
field() { printf '%s' "$2" | sed -nE "s/.*\"$1\" *: *(\"[^\"]*\"|[0-9]+).*/\\1/p"; }
while IFS= read -r line; do
    id=$(field id "${line%%\"params\"*}")
    [ -n "$id" ] || continue
    case $line in
    *'"initialize"'*)
        result="{\"protocolVersion\":$(field protocolVersion "$line"),\"capabilities\":{\"tools\":{}},\"serverInfo\":{\"name\":\"stubborn-sh\",\"version\":\"1\"}}" ;;
    *'"tools/list"'*)
        result='{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}' ;;
    *'"tools/call"'*)
        result="{\"content\":[{\"type\":\"text\",\"text\":$(field text "$line")}]}" ;;
    *)
        printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no such method"}}\n' "$id"
        continue ;;
    esac
    printf '{"jsonrpc":"2.0","id":%s,"result":%s}\n' "$id" "$result"
done
while :; do sleep 1; done"#;

/// `podman run -i --rm IMAGE sh -c SCRIPT`: the docs' command line.
pub fn run_argv(script: &str) -> Vec<String> {
    ["podman", "run", "-i", "--rm", IMAGE, "sh", "-c", script]
        .map(String::from)
        .to_vec()
}

/// Fails the test naming the fix, or returns `None` (saying so) under `CHILDGUARD_SKIP_PEERS=1`.
fn missing<T>(test: &str, why: &str) -> Option<T> {
    if skip_peers() {
        eprintln!("SKIPPED {test}: {why} (CHILDGUARD_SKIP_PEERS=1)");
        return None;
    }
    panic!("{test}: {why}: {INSTALL} (or set CHILDGUARD_SKIP_PEERS=1)");
}

/// Rootful podman, with the bed's containers.conf.
#[derive(Debug)]
pub struct Podman {
    pub program: PathBuf,
    /// The bed's containers.conf (its runtime: `cg-runc-norlimits`).
    pub conf: PathBuf,
}

/// The bed, checked: root, podman installed, [`IMAGE`] there, a container runs with the bed's
/// containers.conf. `None` (said) only under `CHILDGUARD_SKIP_PEERS=1`; else a failure saying
/// what is missing and how to get it.
pub fn podman(test: &str) -> Option<Podman> {
    if !rustix::process::geteuid().is_root() {
        return missing(
            test,
            "the podman bed runs rootful podman: run the tests as root",
        );
    }
    let candidates = ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join("podman"))
        .collect();
    let program = find_peer(test, "podman", candidates, INSTALL)?;
    let podman = Podman {
        program,
        conf: conf(),
    };
    let exists = podman
        .command()
        .args(["image", "exists", IMAGE])
        .status()
        .expect("running podman image exists");
    if !exists.success() {
        return missing(test, &format!("podman has no image {IMAGE}"));
    }
    if let Err(said) = smoke(&podman) {
        return missing(
            test,
            &format!(
                "`podman run --rm {IMAGE} true` fails with CONTAINERS_CONF={}: {said}",
                podman.conf.display()
            ),
        );
    }
    Some(podman)
}

/// The variable every container of this test process gets (containers.conf's `[containers]
/// env`), its value our pid: how a guard tells the test's containers from others' (a bench or
/// a person running podman meanwhile, with the same image).
pub const MARKER: &str = "CHILDGUARD_TEST_BED";

/// The bed's containers.conf: runc without rlimits as the runtime, and [`MARKER`]`=PID` in
/// every container. Written once per test process, under `cg-podman-bed/` beside
/// `cg-runc-norlimits`; `cg-podman-bed/containers.conf` beside it, without the marker, is for
/// running podman by hand against the bed (`CONTAINERS_CONF=…/cg-podman-bed/containers.conf
/// podman ps -a`).
fn conf() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let runtime = crate::bin("cg-runc-norlimits");
        let dir = runtime.with_file_name("cg-podman-bed");
        std::fs::create_dir_all(&dir).unwrap();
        // The files of test processes gone.
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.split('.').next().and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let engine = format!(
            "[engine]\nruntime = \"cg-runc\"\n\n[engine.runtimes]\ncg-runc = [{:?}]\n",
            runtime.display().to_string()
        );
        let head =
            "# The podman bed of childguard's tests (tests/src/podman.rs): runc without the\n\
                    # bundle's process.rlimits, which this sandbox refuses.\n";
        let me = std::process::id();
        let write = |name: &str, text: String| {
            let path = dir.join(name);
            let partial = dir.join(format!("{name}.{me}.partial"));
            std::fs::write(&partial, text).unwrap();
            std::fs::rename(&partial, &path).unwrap();
            path
        };
        write("containers.conf", format!("{head}{engine}"));
        let marked = format!("{head}[containers]\nenv = [\"{MARKER}={me}\"]\n\n{engine}");
        let path = write(&format!("{me}.conf"), marked);
        eprintln!("podman bed: CONTAINERS_CONF={}", path.display());
        path
    })
    .clone()
}

/// `podman run --rm IMAGE true`, once per test process: the runtime and the image work.
fn smoke(podman: &Podman) -> Result<(), String> {
    static RESULT: OnceLock<Result<(), String>> = OnceLock::new();
    RESULT
        .get_or_init(|| {
            let out = podman
                .command()
                .args(["run", "--rm", IMAGE, "true"])
                .output()
                .map_err(|e| e.to_string())?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "{}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        })
        .clone()
}

/// A container as `podman ps -a` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub name: String,
    pub image: String,
    /// `running`, `exited`, `created`, `stopping`, …
    pub state: String,
    /// Its PID 1 on the host (0 when not running).
    pub pid: u32,
}

impl Podman {
    /// `cmd` with the bed's environment (`CONTAINERS_CONF`).
    pub fn env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("CONTAINERS_CONF", &self.conf)
    }

    /// The bed's environment as `NAME=VALUE` (for the MCP host's `--env`).
    pub fn env_var(&self) -> String {
        format!("CONTAINERS_CONF={}", self.conf.display())
    }

    /// `podman` with the bed's environment, stdin null.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        self.env(&mut cmd).stdin(Stdio::null());
        cmd
    }

    /// Every container, `podman ps -a --format json`.
    pub fn containers(&self) -> Vec<Container> {
        let out = self
            .command()
            .args(["ps", "-a", "--format", "json"])
            .output()
            .expect("running podman ps");
        assert!(
            out.status.success(),
            "podman ps -a: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let list: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("podman ps -a --format json: {e}"));
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        list.as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|c| Container {
                id: text(&c["Id"]),
                name: text(&c["Names"][0]),
                image: text(&c["Image"]),
                state: text(&c["State"]),
                pid: c["Pid"].as_u64().unwrap_or(0) as u32,
            })
            .collect()
    }

    /// The containers whose name starts with `prefix`.
    pub fn containers_named(&self, prefix: &str) -> Vec<Container> {
        self.containers()
            .into_iter()
            .filter(|c| c.name.starts_with(prefix))
            .collect()
    }

    /// A guard over the containers made from now on (see [`Guard`]).
    pub fn guard(&self) -> Guard<'_> {
        Guard {
            podman: self,
            before: self.containers().into_iter().map(|c| c.id).collect(),
            ours: RefCell::new(HashMap::new()),
        }
    }

    /// Whether container `id` carries this process's [`MARKER`] (`podman inspect`); `None`
    /// when it is gone.
    fn marked(&self, id: &str) -> Option<bool> {
        let out = self
            .command()
            .args(["inspect", "--format", "{{json .Config.Env}}", id])
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        let env: Vec<String> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let mark = format!("{MARKER}={}", std::process::id());
        Some(env.contains(&mark))
    }
}

/// The containers a test made: not there when the guard was made, and carrying this test
/// process's [`MARKER`] (the tests of one binary run one at a time). Each left is removed
/// on drop.
#[derive(Debug)]
pub struct Guard<'a> {
    podman: &'a Podman,
    before: Vec<String>,
    /// Whether each new container seen is ours (asked once).
    ours: RefCell<HashMap<String, bool>>,
}

impl Guard<'_> {
    /// The test's containers there now (`podman ps -a`: running, exited, being removed).
    pub fn made(&self) -> Vec<Container> {
        let mut ours = self.ours.borrow_mut();
        self.podman
            .containers()
            .into_iter()
            .filter(|c| !self.before.contains(&c.id))
            .filter(|c| match ours.get(&c.id) {
                Some(&known) => known,
                None => match self.podman.marked(&c.id) {
                    Some(mine) => *ours.entry(c.id.clone()).or_insert(mine),
                    // Gone since `ps`: whoever's it was, it is not left.
                    None => false,
                },
            })
            .collect()
    }

    /// Waits up to `limit` for the test's one container to be running, and returns it. Fails
    /// if none runs by then (saying what `podman ps -a` showed and `why` — the launcher's
    /// stderr), or if more than one does.
    pub fn running(&self, limit: Duration, why: impl Fn() -> String) -> Container {
        let mut made = Vec::new();
        crate::eventually(limit, || {
            made = self.made();
            made.iter().any(|c| c.state == "running")
        });
        let running: Vec<&Container> = made.iter().filter(|c| c.state == "running").collect();
        assert!(
            running.len() == 1,
            "expected the test's one container running within {limit:?}; podman ps -a shows \
             {made:?}; the launcher said:\n{}",
            why()
        );
        running[0].clone()
    }

    /// Waits up to `limit` until `podman ps -a` shows none of the test's containers, polling.
    /// Returns when that was seen (from `since`), or what was left at the end.
    pub fn gone_within(&self, since: Instant, limit: Duration) -> Result<Duration, Vec<Container>> {
        let mut left = Vec::new();
        let seen = crate::eventually(limit, || {
            left = self.made();
            left.is_empty()
        });
        if seen {
            Ok(since.elapsed())
        } else {
            Err(left)
        }
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        for c in self.made() {
            eprintln!(
                "podman bed: removing the test's container left behind: {} ({}, {})",
                c.name, c.id, c.state
            );
            let _ = self
                .podman
                .command()
                .args(["rm", "--force", "--time", "0", &c.id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// A running container's PID 1 and the engine's process over it (its parent: podman's
/// `conmon`, docker's `containerd-shim`), pinned by pidfds, to time when each exits.
#[derive(Debug)]
pub struct Watch {
    pub pid1: u32,
    pub monitor: Option<u32>,
    /// The monitor's `comm` (`conmon`, `containerd-shim`), for messages.
    pub monitor_comm: String,
    fds: Vec<OwnedFd>,
}

/// When a [`Watch`]'s processes exited, from the ending (`None`: not within the limit).
#[derive(Debug, Clone, Copy)]
pub struct Exits {
    pub pid1: Option<Duration>,
    pub monitor: Option<Duration>,
}

impl Watch {
    /// Pins a running container's PID 1 (`pid1`, as the host sees it) and its parent, the
    /// engine's process over it.
    pub fn of(pid1: u32) -> Watch {
        assert!(pid1 > 0, "a container's PID 1 cannot be 0");
        let fd = crate::pidfd(pid1);
        let monitor = crate::proc_ppid(pid1).filter(|&p| p > 1);
        let mut fds = vec![fd];
        fds.extend(monitor.map(crate::pidfd));
        let monitor_comm = monitor
            .and_then(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).ok())
            .map_or_else(|| "its monitor".into(), |c| c.trim().to_owned());
        Watch {
            pid1,
            monitor,
            monitor_comm,
            fds,
        }
    }

    /// Times, on a thread of its own (the test polls `ps -a` meanwhile), when PID 1 and its
    /// monitor exit, from `since`, for up to `limit`.
    pub fn time(self, since: Instant, limit: Duration) -> std::thread::JoinHandle<Exits> {
        std::thread::spawn(move || {
            let end = since + limit;
            let when = |fd: &OwnedFd| {
                let left = end.saturating_duration_since(Instant::now());
                crate::exited_within(fd, left).then(|| since.elapsed())
            };
            // PID 1 exits before its monitor: waited for in that order, each seen as it exits.
            let pid1 = when(&self.fds[0]);
            let monitor = self.fds.get(1).and_then(when);
            Exits { pid1, monitor }
        })
    }
}
