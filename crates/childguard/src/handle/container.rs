//! A container launch as the tree ([`Builder::container_engine`], and read from the command
//! line under [`Containment::Any`] and [`Containment::BestEffort`]): the launch read, our
//! `--name` put after `run`, the engine found as the launch would find it, the guardian
//! given the engine's `kill`. The mechanism is `process/containment/container`.

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, ErrorKind, Result};
use crate::handle::builder::{Builder, SocketMode};
use crate::process::containment::container::engine::Engine;
use crate::process::containment::container::{launcher, Container};
use crate::process::containment::{Backend, Containment, ContainmentReport};
use crate::spawn::own_exec;
use crate::sys::PidExec;

/// The environment variable that gives the child the container's name: what a script the
/// launch cannot be read from passes to `run --name`.
pub const CONTAINER_NAME_ENV: &str = "CHILDGUARD_CONTAINER_NAME";

/// A container launch, ready to spawn.
pub(super) struct Launched {
    pub(super) container: Container,
    /// The launcher's exec with our `--name` in its argv (`None`: the argv is the Command's).
    pub(super) exec: Option<PidExec>,
    pub(super) report: ContainmentReport,
}

impl Builder {
    /// The child launches a container with the engine `engine` (`docker`, `podman`,
    /// `nerdctl`, or a path): its processes are the engine's, not the child's — no cgroup,
    /// process group or PID namespace of ours holds them, and killing the client only
    /// detaches it — so the ladder reaches the container through the engine's CLI:
    ///
    /// - **spawn**: the child gets `CHILDGUARD_CONTAINER_NAME`, the container's name. Where
    ///   the command line is a launch we can read (`ENGINE [globals] run …`, also after `env`
    ///   or in a `sh -c` string of plain words), `--name NAME` is put after `run` (a `--name`
    ///   of the user's is kept and used); otherwise the command must pass
    ///   `--name "$CHILDGUARD_CONTAINER_NAME"` itself. With
    ///   [`exit_with_parent`](Builder::exit_with_parent) the guardian is given `ENGINE kill
    ///   NAME` to run if this process dies first, before the child is spawned. The child leads
    ///   a process group.
    /// - **a catchable rung**: `ENGINE [globals] kill --signal N NAME`; the client is not
    ///   signalled (it would pass the signal on: a second copy). While the engine does not
    ///   know the container (an image still pulled), the client's group gets it instead.
    /// - **`SIGKILL`**: `ENGINE kill NAME`, then `SIGKILL` to the client's group.
    /// - **the end**: the close is over once the client has exited and the engine no longer
    ///   runs the container (with `--rm`, no longer has it), asked every 50 ms from the
    ///   client's exit; with `--rm`, a container the engine did not remove is removed
    ///   (`ENGINE rm -f NAME`) and the report says so.
    ///
    /// The engine runs with the child's environment (`DOCKER_HOST`, `CONTAINER_HOST`, a
    /// rootless podman's `XDG_RUNTIME_DIR` …) and the launch's global options (`--context`,
    /// `--runtime` …), found on the child's `PATH`; each call is bounded (10 s). Detached
    /// runs (`-d`) are refused: nothing stays attached to close. Not with
    /// [`limits`](Builder::limits) (give them to the engine: `--memory`, `--pids-limit`),
    /// socket activation or a watchdog.
    ///
    /// Without this call, [`Containment::Any`] and [`Containment::BestEffort`] take a
    /// launch they can read this way too, and report [`Backend::Container`].
    pub fn container_engine(mut self, engine: impl Into<OsString>) -> Builder {
        self.container_engine = Some(engine.into());
        self
    }

    /// The container launch this spawn makes, if it makes one we hold (see
    /// [`Builder::container_engine`]).
    pub(super) fn launch_container(&mut self, program: &str) -> Result<Option<Launched>> {
        let explicit = self.container_engine.clone();
        let reads = matches!(self.containment, Containment::Any | Containment::BestEffort);
        if explicit.is_none() && !reads {
            return Ok(None);
        }
        let argv: Vec<OsString> = std::iter::once(self.command.get_program())
            .chain(self.command.get_args())
            .map(OsStr::to_os_string)
            .collect();
        let launch = launcher::recognise(&argv);
        let fail = |kind, why: String| {
            Err(Error::new(
                kind,
                Some(program),
                io::Error::new(io::ErrorKind::InvalidInput, why),
            ))
        };
        let (engine, globals) = match (&launch, explicit) {
            (Some(l), _) => (l.engine.clone(), l.globals.clone()),
            (None, Some(engine)) => (engine, Vec::new()),
            (None, None) => return Ok(None),
        };
        if launch.as_ref().is_some_and(|l| l.detach) {
            return fail(
                ErrorKind::Config,
                "a detached container launch (`run -d`) returns at once: nothing stays \
                 attached to close; run it attached (`-i`)"
                    .into(),
            );
        }
        if !self.limits.is_empty() {
            return fail(
                ErrorKind::Config,
                format!(
                    "limits ({}) need a cgroup of ours; a container's processes are the \
                     engine's: give the engine its own (`--memory`, `--pids-limit`)",
                    self.limits
                ),
            );
        }
        if !matches!(self.socket, SocketMode::None | SocketMode::Stdio) || self.watchdog.is_some() {
            return fail(
                ErrorKind::Config,
                "socket activation and a watchdog cannot reach a server inside a container".into(),
            );
        }
        let hidden = crate::spawn::command_debug::read(&self.command)
            .map_err(|e| Error::new(ErrorKind::Config, Some(program), e))?;
        let mut env = own_exec::env_for(&self.command, hidden.env_clear, |_| {}, &[]);
        if let Some(l) = &launch {
            if l.env_clear {
                env.clear();
            }
            for (key, value) in &l.env {
                env.retain(|(k, _)| k != key);
                env.push((key.clone(), value.clone()));
            }
        }
        let cwd = match self.command.get_current_dir() {
            Some(dir) => std::env::current_dir().unwrap_or_default().join(dir),
            None => std::env::current_dir().unwrap_or_default(),
        };
        let engine = Engine::new(engine_path(program, &engine, &env, &cwd)?, globals, env);
        let given = launch.as_ref().and_then(|l| l.name.clone());
        let name = given.clone().unwrap_or_else(new_name);
        self.command.env(CONTAINER_NAME_ENV, &name);
        let exec = match (&launch, &given) {
            (Some(l), None) => {
                let named = l.argv_with_name(&argv, &name);
                Some(
                    own_exec::prepare_with_args(
                        &self.command,
                        Some(&named[1..]),
                        |_| {},
                        &[],
                        None,
                    )
                    .map_err(|(kind, e)| Error::new(kind, Some(program), e))?,
                )
            }
            _ => None,
        };
        let remove = launch.as_ref().is_some_and(|l| l.remove);
        let mut container = Container::new(engine, name.clone(), remove);
        if self.exit_with_parent {
            container
                .guard()
                .map_err(|e| Error::new(ErrorKind::Containment, Some(program), e))?;
        }
        self.process_group = true;
        Ok(Some(Launched {
            container,
            exec,
            report: ContainmentReport {
                backend: Backend::Container,
                passed_over: Vec::new(),
                container: Some(name),
            },
        }))
    }
}

/// The engine `program` as the launch's `execvp` finds it (errors name the `launcher`): a path with a `/` taken from
/// `cwd`, else looked up on the launch's `PATH` (glibc's default without one).
fn engine_path(
    launcher: &str,
    program: &OsStr,
    env: &[(OsString, OsString)],
    cwd: &Path,
) -> Result<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if program.as_bytes().contains(&b'/') {
        return Ok(cwd.join(program));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or_else(|| OsString::from("/bin:/usr/bin"), |(_, v)| v.clone());
    crate::spawn::program::search(program, &path).map_err(|e| {
        let why = format!(
            "the container engine `{}` is not on the launch's PATH: {e}",
            program.to_string_lossy()
        );
        Error::new(
            ErrorKind::Spawn,
            Some(launcher),
            io::Error::new(e.kind(), why),
        )
    })
}

/// `childguard-<our pid>-<n>-<clock>`: unique among our launches, and among other processes'
/// (the pid, and the clock's nanoseconds for a pid reused).
fn new_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("childguard-{}-{n}-{nanos:08x}", std::process::id())
}
