//! The container engines of issue 51 beyond the podman bed's rootful podman
//! (`tests/src/podman.rs`): **rootless podman** run by the suite's unprivileged user
//! (`childguard-user`), and **docker** on a dockerd of the suite's own. `tests/engine-beds.sh`
//! (run by tests/run.sh) makes both: the user's storage, config and runtime directory at fixed
//! places ([`PODMAN_USER`], [`PODMAN_USER_RUN`]), the dockerd on [`DOCKER_SOCKET`], and in each
//! the podman bed's busybox image [`IMAGE`] (nothing pulled).
//!
//! An [`Engine`] is how a test reaches one: the client, the environment it needs (what the
//! launch gets, and a host's `"env"`), and who runs it — the user's processes are started by
//! this (root's) test with the user's ids and only that environment ([`Bed`]), so a
//! pid held is the program's. Counting is the user's own view, `ENGINE ps -a` run as the
//! engine's user; a [`Guard`] follows the containers one `childguard` named
//! (`childguard-<its pid>-…`) and removes any left. [`scenarios`] are the tests themselves,
//! the same for each engine.

pub mod scenarios;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::as_user::{suite_user, Bed, User};
use crate::postgres::skip_peers;

pub use crate::podman::{Exits, Watch, IMAGE};

/// The rootless podman bed's directory: `home/` (the user's `HOME`, its storage under
/// `.local/share/containers`) and `config/` (root's: `XDG_CONFIG_HOME`).
pub const PODMAN_USER: &str = "/opt/childguard-tests/podman-user";

/// The user's `XDG_RUNTIME_DIR` for podman (`0700`, the user's).
pub const PODMAN_USER_RUN: &str = "/run/childguard-tests/podman-user";

/// The dockerd of the suite's own: its exec root, pidfile, log, and socket.
pub const DOCKER_RUN: &str = "/run/childguard-tests/docker";

/// [`DOCKER_RUN`]'s socket, as `DOCKER_HOST`.
pub const DOCKER_SOCKET: &str = "/run/childguard-tests/docker/docker.sock";

const SETUP: &str = "run `bash tests/run.sh` once (its tests/engine-beds.sh makes the beds; it \
                     installs podman, uidmap, docker.io and busybox-static first)";

/// Fails the test naming the fix, or returns `None` (saying so) under `CHILDGUARD_SKIP_PEERS=1`.
fn missing<T>(test: &str, why: &str) -> Option<T> {
    if skip_peers() {
        eprintln!("SKIPPED {test}: {why} (CHILDGUARD_SKIP_PEERS=1)");
        return None;
    }
    panic!("{test}: {why}: {SETUP}, or set CHILDGUARD_SKIP_PEERS=1");
}

/// A container engine as a test reaches it.
#[derive(Debug)]
pub struct Engine {
    /// `podman` or `docker`: the launch's program, found on its `PATH`.
    pub name: &'static str,
    /// That client, as the launch's `PATH` finds it.
    pub program: PathBuf,
    /// What the engine's commands need in their environment (`DOCKER_HOST`; the user's
    /// `HOME`, `XDG_RUNTIME_DIR`, `XDG_CONFIG_HOME`).
    pub vars: Vec<(String, String)>,
    /// For rootless podman: the user, and the bed its processes run from (`childguard` staged
    /// in it, on its `PATH`). `None`: root runs everything.
    pub bed: Option<Bed>,
    /// The `childguard` the tests run (staged in the bed for the user).
    pub childguard: PathBuf,
}

impl Engine {
    /// `program` run as the engine's user, with the engine's environment: for the user,
    /// [`Bed::command`]'s clean environment with the engine's `HOME` and variables, from `/`;
    /// for root, the test's environment plus the engine's variables.
    pub fn command_of(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = match &self.bed {
            Some(bed) => {
                let mut cmd = bed.command(program);
                cmd.current_dir("/");
                cmd
            }
            None => Command::new(program),
        };
        cmd.envs(self.vars.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// The engine's client, stdin null.
    pub fn cli(&self) -> Command {
        let mut cmd = self.command_of(&self.program);
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Who runs the engine, for messages: `podman (as childguard-user)`, `docker`.
    pub fn who(&self) -> String {
        match &self.bed {
            Some(_) => format!("{} (as {})", self.name, crate::as_user::SUITE_USER),
            None => self.name.to_string(),
        }
    }

    /// The user, for rootless podman.
    pub fn user(&self) -> Option<User> {
        self.bed.as_ref().map(|b| b.user)
    }

    /// The engine's variables as `NAME=VALUE` (a host's `"env"`).
    pub fn env_args(&self) -> Vec<String> {
        self.vars.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    /// `ENGINE run -i --rm IMAGE sh -c SCRIPT`: the docs' command line.
    pub fn run_argv(&self, script: &str) -> Vec<String> {
        [self.name, "run", "-i", "--rm", IMAGE, "sh", "-c", script]
            .map(String::from)
            .to_vec()
    }

    /// Runs `ENGINE args…`: its stdout, or its status and stderr.
    pub fn call(&self, args: &[&str]) -> Result<String, String> {
        let out = self
            .cli()
            .args(args)
            .output()
            .map_err(|e| format!("running {}: {e}", self.program.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(format!(
                "`{} {}` {}: {}",
                self.who(),
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Every container, as `ENGINE ps -a` shows it to the engine's user: podman's `--format
    /// json` (an array), docker's `{{json .}}` (an object a line: docker 20.10 has no `json`
    /// format). Not a template of fields: podman's `{{.State}}` is the status text.
    pub fn containers(&self) -> Vec<Container> {
        let format = if self.name == "podman" {
            "json"
        } else {
            "{{json .}}"
        };
        let out = self
            .call(&["ps", "-a", "--format", format])
            .unwrap_or_else(|e| panic!("{e}"));
        let parse = |text: &str| {
            serde_json::from_str::<serde_json::Value>(text)
                .unwrap_or_else(|e| panic!("{} ps -a --format {format}: {e}: {text}", self.who()))
        };
        let list: Vec<serde_json::Value> = if self.name == "podman" {
            let all = parse(if out.is_empty() { "[]" } else { &out });
            all.as_array().cloned().unwrap_or_default()
        } else {
            out.lines().map(parse).collect()
        };
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        list.iter()
            .map(|c| Container {
                id: text(if c["Id"].is_null() {
                    &c["ID"]
                } else {
                    &c["Id"]
                }),
                // podman: a list; docker: one string, names joined by commas.
                name: text(if c["Names"].is_array() {
                    &c["Names"][0]
                } else {
                    &c["Names"]
                }),
                state: text(&c["State"]),
            })
            .collect()
    }

    /// The host pid of container `name`'s PID 1 (0, or `None`: not running).
    pub fn pid1(&self, name: &str) -> Option<u32> {
        let pid = self.call(&["inspect", "--format", "{{.State.Pid}}", name]);
        pid.ok()?.parse().ok().filter(|&p| p > 0)
    }

    /// A guard over the containers `childguard` (pid `cg`) names: `childguard-<cg>-…`.
    pub fn watch(&self, container: &Container) -> Watch {
        let pid1 = self
            .pid1(&container.name)
            .unwrap_or_else(|| panic!("{container:?} has no PID 1"));
        Watch::of(pid1)
    }

    pub fn guard(&self, cg: u32) -> Guard<'_> {
        Guard {
            engine: self,
            prefix: format!("{}{cg}-", crate::podman::NAME_PREFIX),
        }
    }

    /// `ENGINE run --rm IMAGE true`, once per engine and test process: the engine runs the
    /// image.
    fn smoke(&self, test: &str) -> Option<()> {
        static RESULTS: Mutex<Vec<(String, Result<(), String>)>> = Mutex::new(Vec::new());
        let mut results = RESULTS.lock().unwrap_or_else(|p| p.into_inner());
        let who = self.who();
        if !results.iter().any(|(w, _)| *w == who) {
            let result = self.call(&["run", "--rm", IMAGE, "true"]).map(drop);
            results.push((who.clone(), result));
        }
        match &results.iter().find(|(w, _)| *w == who).unwrap().1 {
            Ok(()) => Some(()),
            Err(e) => missing(test, &format!("{IMAGE} does not run: {e}")),
        }
    }

    /// The image is there, and runs.
    fn checked(self, test: &str) -> Option<Engine> {
        if let Err(e) = self.call(&["image", "inspect", IMAGE]) {
            return missing(test, &format!("{} has no image {IMAGE} ({e})", self.who()));
        }
        self.smoke(test)?;
        Some(self)
    }
}

/// A container as `ENGINE ps -a` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub name: String,
    /// `running`, `exited`, `created`, `removing`, …
    pub state: String,
}

/// The first of `dirs` holding an executable `name`, as a `PATH` of them would find it.
fn on_path(name: &str, dirs: &[&str]) -> Option<PathBuf> {
    dirs.iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
}

/// Rootless podman as [`crate::as_user::SUITE_USER`], checked: the bed tests/engine-beds.sh
/// makes, the image in the user's storage, a container runs. Fails saying what is missing
/// (`None`, said, under `CHILDGUARD_SKIP_PEERS=1`).
pub fn rootless_podman(test: &str) -> Option<Engine> {
    let user = suite_user(test)?;
    let Some(program) = on_path("podman", &["/usr/local/bin", "/usr/bin", "/bin"]) else {
        return missing(
            test,
            "podman is not installed (apt-get install podman uidmap)",
        );
    };
    let home = Path::new(PODMAN_USER).join("home");
    for dir in [&home, Path::new(PODMAN_USER_RUN)] {
        let owned = std::fs::metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == user.uid);
        if !owned {
            return missing(
                test,
                &format!(
                    "{} is not a directory of {}'s (the rootless podman bed)",
                    dir.display(),
                    crate::as_user::SUITE_USER
                ),
            );
        }
    }
    let bed = Bed::new("engine", user);
    let childguard = bed.stage(&crate::bin("cg-childguard"), "childguard");
    let vars = vec![
        ("HOME".into(), home.display().to_string()),
        ("XDG_RUNTIME_DIR".into(), PODMAN_USER_RUN.into()),
        ("XDG_CONFIG_HOME".into(), format!("{PODMAN_USER}/config")),
    ];
    Engine {
        name: "podman",
        program,
        vars,
        bed: Some(bed),
        childguard,
    }
    .checked(test)
}

/// Docker, rootful, on the dockerd of the suite's own ([`DOCKER_SOCKET`]), checked: a daemon
/// answers there, the image is there, a container runs. Fails saying what is missing — with
/// the end of the daemon's log when it does not answer (`None`, said, under
/// `CHILDGUARD_SKIP_PEERS=1`).
pub fn docker(test: &str) -> Option<Engine> {
    if !rustix::process::geteuid().is_root() {
        return missing(
            test,
            "the docker tests run as root (the suite's dockerd is root's)",
        );
    }
    let Some(program) = on_path("docker", &["/usr/local/bin", "/usr/bin", "/bin"]) else {
        return missing(
            test,
            "docker is not installed (apt-get install --no-install-recommends docker.io)",
        );
    };
    let engine = Engine {
        name: "docker",
        program,
        vars: vec![("DOCKER_HOST".into(), format!("unix://{DOCKER_SOCKET}"))],
        bed: None,
        childguard: crate::bin("cg-childguard"),
    };
    let server = engine.call(&["version", "--format", "{{.Server.Version}}"]);
    match server {
        Ok(version) => {
            static SAID: OnceLock<()> = OnceLock::new();
            SAID.get_or_init(|| eprintln!("docker bed: dockerd {version} on {DOCKER_SOCKET}"));
        }
        Err(e) => {
            let log = Path::new(DOCKER_RUN).join("dockerd.log");
            let tail = std::fs::read_to_string(&log).map_or_else(
                |_| format!("no log at {}: no dockerd was started", log.display()),
                |text| {
                    let lines: Vec<&str> = text.lines().collect();
                    let end = lines[lines.len().saturating_sub(10)..].join("\n");
                    format!("the end of {}:\n{end}", log.display())
                },
            );
            let dockerd = on_path("dockerd", &["/usr/sbin", "/usr/bin", "/usr/local/bin"]);
            let why = match dockerd {
                None => "dockerd is not installed (apt-get install --no-install-recommends \
                         docker.io)"
                    .to_string(),
                Some(_) => format!("no dockerd answers on {DOCKER_SOCKET} ({e}); {tail}\n"),
            };
            return missing(test, &why);
        }
    }
    engine.checked(test)
}

/// The containers one `childguard` named (`childguard-<its pid>-…`), as the engine's `ps -a`
/// shows them; any left is killed and removed on drop.
#[derive(Debug)]
pub struct Guard<'a> {
    engine: &'a Engine,
    prefix: String,
}

impl Guard<'_> {
    /// Its containers there now (running, exited, being removed).
    pub fn made(&self) -> Vec<Container> {
        self.engine
            .containers()
            .into_iter()
            .filter(|c| c.name.starts_with(&self.prefix))
            .collect()
    }

    /// Waits up to `limit` for its one container to be running, and returns it; fails if none
    /// runs by then (saying what `ps -a` showed and `why`, the launcher's stderr), or if more
    /// than one does.
    pub fn running(&self, limit: Duration, why: impl Fn() -> String) -> Container {
        let mut made = Vec::new();
        crate::eventually(limit, || {
            made = self.made();
            // Not every millisecond: each look is an engine call.
            made.iter().any(|c| c.state == "running") || {
                std::thread::sleep(Duration::from_millis(20));
                false
            }
        });
        let running: Vec<&Container> = made.iter().filter(|c| c.state == "running").collect();
        assert!(
            running.len() == 1,
            "expected one container {}… running within {limit:?}; {} ps -a shows {made:?}; \
             the launcher said:\n{}",
            self.prefix,
            self.engine.who(),
            why()
        );
        running[0].clone()
    }

    /// Waits up to `limit` until `ps -a` shows none of its containers. Returns when that was
    /// seen (from `since`), or what was left at the end.
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
                "engine bed: removing a container left behind: {} ({}, {})",
                c.name, c.id, c.state
            );
            let _ = self.engine.call(&["kill", &c.id]);
            let _ = self.engine.call(&["rm", "-f", &c.id]);
        }
    }
}
