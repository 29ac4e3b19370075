//! Containment by a container engine: the server runs in a container that `docker run`,
//! `podman run` or `nerdctl run` (the launcher, our child) asked an engine for. Its processes
//! are the engine's — children of containerd's shim or podman's `conmon`, in the engine's
//! cgroups — so neither our process group, nor a cgroup, PID namespace or subreaper of ours
//! holds them, and killing the client only detaches it: the container runs on. Only the
//! engine can end it, so the rungs go through the engine's CLI ([`engine`]):
//!
//! | moment | what happens |
//! |---|---|
//! | spawn | the launch is read ([`launcher`]); `--name childguard-…` is put after `run` (the user's own `--name` is kept); the guardian is given `ENGINE kill NAME` to run if we die first (with `exit_with_parent`); the client is spawned leading a process group |
//! | EOF rung | nothing new: the client passes the EOF on to the container's stdin |
//! | a catchable rung | `ENGINE kill --signal N NAME`; while the engine does not know the container yet (an image being pulled), the client's group gets the signal instead |
//! | `KILL` | `ENGINE kill NAME`, then `SIGKILL` to the client's group |
//! | waiting | gone when the client has exited and the engine no longer runs the container (with `--rm`: no longer has it), asked now and then once the client is gone |
//! | after the close | with `--rm`, a container the engine did not remove is removed (`ENGINE rm -f NAME`); the guardian's command is withdrawn |
//! | our death | the guardian runs `ENGINE kill NAME` (the engine's own `--rm` then removes it) |
//!
//! Each engine call is bounded ([`CALL_BOUND`]). The close does not know it holds a
//! container: [`Process`](crate::process::Process) answers its questions from here.

pub(crate) mod engine;
pub(crate) mod launcher;

use std::ffi::OsStr;
use std::io;
use std::time::{Duration, Instant};

use crate::base::signal::Signal;
use engine::Engine;

use super::guardian::{self, Registration};

/// The longest one engine call may take (a daemon that does not answer).
pub(crate) const CALL_BOUND: Duration = Duration::from_secs(10);
/// How often the engine is asked whether the container is gone, once the client has exited.
pub(crate) const POLL_EVERY: Duration = Duration::from_millis(50);

/// A container launched by our child.
#[derive(Debug)]
pub(crate) struct Container {
    engine: Engine,
    name: String,
    /// `--rm` was given.
    remove: bool,
    /// The guardian's `ENGINE kill NAME`, until the container is gone.
    guard: Option<Registration>,
    /// Seen gone by the engine.
    gone: bool,
    /// When the engine was last asked (for [`POLL_EVERY`]).
    asked_at: Option<Instant>,
    /// What the close report should say (engine errors, a removal of ours).
    notes: Vec<String>,
    /// The container's main process as the host sees it (`State.Pid`), asked once while it
    /// runs: whose signal dispositions decide a skipped rung.
    main_pid: std::sync::OnceLock<u32>,
}

/// What a rung did to the container.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Rung {
    /// The engine signalled it.
    Signalled,
    /// The engine does not know it (not created yet, or gone): the client is the tree.
    NotThere,
}

impl Container {
    pub(crate) fn new(engine: Engine, name: String, remove: bool) -> Container {
        Container {
            engine,
            name,
            remove,
            guard: None,
            gone: false,
            asked_at: None,
            notes: Vec::new(),
            main_pid: std::sync::OnceLock::new(),
        }
    }

    /// The container's name, as the engine knows it.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Has the guardian run `ENGINE kill NAME` if this process dies before the container is
    /// gone. Call before the launcher is spawned: no unguarded moment.
    pub(crate) fn guard(&mut self) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let args = [OsStr::new("kill"), OsStr::new(&self.name)];
        let argv: Vec<&[u8]> = self
            .engine
            .argv(&args)
            .iter()
            .map(|a| a.as_bytes())
            .collect();
        let env: Vec<Vec<u8>> = self
            .engine
            .env
            .iter()
            .map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat())
            .collect();
        let all: Vec<&[u8]> = env.iter().map(Vec::as_slice).collect();
        let registered = guardian::commands::register(&argv, &all).or_else(|e| {
            // Beyond the guardian's bound (64 KiB): what an engine's CLI reads of it.
            let few: Vec<&[u8]> = all.iter().copied().filter(|v| engine_reads(v)).collect();
            guardian::commands::register(&argv, &few).map_err(|_| e)
        })?;
        self.guard = Some(registered);
        Ok(())
    }

    /// Sends `signal` to the container through the engine (`kill --signal N`, or `kill` for
    /// `SIGKILL`).
    pub(crate) fn signal(&mut self, signal: Signal) -> io::Result<Rung> {
        let number = signal.as_raw().to_string();
        let name = &self.name;
        let args: Vec<&OsStr> = if signal == Signal::KILL {
            vec![OsStr::new("kill"), OsStr::new(name)]
        } else {
            vec![
                OsStr::new("kill"),
                OsStr::new("--signal"),
                OsStr::new(&number),
                OsStr::new(name),
            ]
        };
        let answer = self.engine.call(&args, CALL_BOUND)?;
        if answer.status.success() {
            return Ok(Rung::Signalled);
        }
        // Not known, or not running (podman: "can only kill running containers"): created
        // and not started yet, or stopped. Asked without deciding it is gone: the client may
        // still start it.
        if answer.no_such_container() || !matches!(self.state()?.as_deref(), Some("running")) {
            return Ok(Rung::NotThere);
        }
        Err(self.engine.failed(&args, &answer))
    }

    /// Whether the engine no longer runs the container (with `--rm`: no longer has it). Asks
    /// the engine at most once per [`POLL_EVERY`]; once gone, it stays gone.
    ///
    /// An engine that cannot answer (a daemon down, a call past its bound) is not an error of
    /// the close, whose client is gone already: the close ends, the report's notes say what
    /// the engine said, and the guardian keeps its `kill` for our death.
    pub(crate) fn is_gone(&mut self) -> io::Result<bool> {
        if self.gone || self.asked_at.is_some_and(|at| at.elapsed() < POLL_EVERY) {
            return Ok(self.gone);
        }
        match self.is_gone_now() {
            Ok(gone) => Ok(gone),
            Err(e) => {
                self.notes.push(format!(
                    "the container {} may be left: its engine could not say whether it is gone: {e}",
                    self.name
                ));
                self.gone = true;
                Ok(true)
            }
        }
    }

    /// When the engine should next be asked ([`Container::is_gone`]), at the latest `deadline`.
    pub(crate) fn wake_by(&self, deadline: Instant) -> Instant {
        match (self.gone, self.asked_at) {
            (false, Some(at)) => deadline.min(at + POLL_EVERY),
            (false, None) => Instant::now(),
            (true, _) => deadline,
        }
    }

    fn is_gone_now(&mut self) -> io::Result<bool> {
        self.asked_at = Some(Instant::now());
        // Asked once the client has exited: a container it created and never started will
        // not start now.
        self.gone = match self.state()?.as_deref() {
            None => true,
            Some("exited" | "stopped" | "dead" | "configured" | "created") => !self.remove,
            Some(_) => false,
        };
        if self.gone {
            self.guard.take();
        }
        Ok(self.gone)
    }

    /// The container's state as the engine says it (`running`, `exited`, `created` …,
    /// lowercase), `None` if the engine does not know it.
    fn state(&self) -> io::Result<Option<String>> {
        let args = [
            OsStr::new("inspect"),
            OsStr::new("--format"),
            OsStr::new("{{.State.Status}}"),
            OsStr::new(&self.name),
        ];
        let answer = self.engine.call(&args, CALL_BOUND)?;
        if answer.status.success() {
            Ok(Some(answer.stdout.trim().to_ascii_lowercase()))
        } else if answer.no_such_container() {
            Ok(None)
        } else {
            Err(self.engine.failed(&args, &answer))
        }
    }

    /// The host pid of the container's main process (its PID 1), asked of the engine when first
    /// needed and kept once known; `None` if it does not run (yet) or the engine cannot say. A rung the
    /// server ignores is then skipped as for any child (`Ladder::skip_ignored`): the client
    /// catches every signal (to pass it on), so its own dispositions say nothing. Race left:
    /// a container that exits between the answer and the read of `/proc`, its pid taken by
    /// another process meanwhile — at worst one rung sent or skipped wrongly; never a signal
    /// to that process (the rungs go through the engine by name).
    pub(crate) fn main_pid(&self) -> Option<u32> {
        if let Some(&pid) = self.main_pid.get() {
            return Some(pid);
        }
        let args = [
            OsStr::new("inspect"),
            OsStr::new("--format"),
            OsStr::new("{{.State.Pid}}"),
            OsStr::new(&self.name),
        ];
        let answer = self.engine.call(&args, CALL_BOUND).ok()?;
        let pid: u32 = answer.stdout.trim().parse().ok()?;
        if !answer.status.success() || pid == 0 {
            return None;
        }
        Some(*self.main_pid.get_or_init(|| pid))
    }

    /// After the close: a container the engine should have removed (`--rm`) and did not is
    /// removed (`rm -f`); notes for the report.
    pub(crate) fn finish(&mut self) -> Vec<String> {
        if !self.gone && self.remove {
            let args = [OsStr::new("rm"), OsStr::new("-f"), OsStr::new(&self.name)];
            match self.engine.call(&args, CALL_BOUND) {
                Ok(a) if a.status.success() || a.no_such_container() => {
                    if a.status.success() {
                        self.notes.push(format!(
                            "the container {} was left by the engine despite --rm: removed (`{}`)",
                            self.name,
                            self.engine.shown(&args)
                        ));
                    }
                    self.gone = true;
                    self.guard.take();
                }
                Ok(a) => self.notes.push(self.engine.failed(&args, &a).to_string()),
                Err(e) => self
                    .notes
                    .push(format!("`{}`: {e}", self.engine.shown(&args))),
            }
        }
        std::mem::take(&mut self.notes)
    }

    /// The notes so far, without finishing.
    pub(crate) fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// Records an engine error met on the way, for the report.
    pub(crate) fn note(&mut self, note: String) {
        self.notes.push(note);
    }
}

/// Whether an engine's CLI reads the variable `entry` (`NAME=VALUE`): where it finds its
/// daemon, config, storage and user (the environment sent to the guardian when the whole one
/// is too big).
fn engine_reads(entry: &[u8]) -> bool {
    const NAMES: [&[u8]; 9] = [
        b"PATH",
        b"HOME",
        b"USER",
        b"LOGNAME",
        b"TMPDIR",
        b"LANG",
        b"LC_ALL",
        b"SSH_AUTH_SOCK",
        b"SHELL",
    ];
    const PREFIXES: [&[u8]; 10] = [
        b"XDG_",
        b"DOCKER_",
        b"CONTAINER",
        b"PODMAN_",
        b"BUILDAH_",
        b"NERDCTL_",
        b"CONTAINERD_",
        b"REGISTRY_",
        b"DBUS_",
        b"STORAGE_",
    ];
    let name = entry.split(|&b| b == b'=').next().unwrap_or(entry);
    NAMES.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

impl Drop for Container {
    /// A container not seen gone (its engine could not say, a ladder that did not end it, a
    /// detached child's container still running) keeps the guardian's `kill` until our death:
    /// the registration is left in place rather than withdrawn.
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            std::mem::forget(guard);
        }
    }
}
