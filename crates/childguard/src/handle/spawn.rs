//! [`Builder::spawn`]: the checks, the cgroup and its placement, the stdio socket, the
//! capture, activation and readiness set up before the fork; the child adopted, connected and
//! waited ready after it. On every error nothing is left behind.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::handle::builder::{Builder, SocketMode};
use crate::handle::readiness;
use crate::handle::{birth, ChildHandle};
use crate::process::containment::Containment;
use crate::process::sigchld;
use crate::spawn::placing::ContainedIn;
use crate::spawn::stdio::Pipes;
use crate::spawn::{activation, own_exec};

impl Builder {
    /// Spawns the child. On error nothing is left behind: no fd, no zombie.
    ///
    /// Only fds 0, 1 and 2 (and 3, the listener, with [`SocketMode::Activation`]) reach the
    /// program, even if something in this process opened an fd without `O_CLOEXEC`. Each spawn
    /// first checks for such an fd (a few µs; linear in the number of open fds, ~0.15 µs each
    /// above 256): with none, std spawns through `posix_spawn`; with one, the spawn marks every
    /// other fd close-on-exec between `fork` and `exec`, which costs a `fork` (about twice a
    /// `posix_spawn`, more in a process with much memory). The check keeps one handle on
    /// `/proc/self/fd` open for the life of the process (close-on-exec, never on fds 0–2).
    pub fn spawn(mut self) -> Result<ChildHandle> {
        let program = self.command.get_program().to_string_lossy().into_owned();
        let fail = |kind, e: io::Error| Error::new(kind, Some(&program), e);
        let _span = crate::base::trace::spawn_span(&program);
        sigchld::check_not_ignored().map_err(|e| fail(ErrorKind::SigchldIgnored, e))?;
        // Off Linux only the (refused) watchdog would read it.
        #[cfg_attr(not(target_os = "linux"), allow(unused_variables))]
        let started = Instant::now();
        if let Some(interval) = self.watchdog {
            readiness::check_watchdog(self.ready.as_ref(), interval)
                .map_err(|e| fail(ErrorKind::Config, e))?;
            // As systemd: the interval in microseconds, and `WATCHDOG_PID` the child's pid
            // (written by the child itself, below); an inherited one is never passed on.
            self.command
                .env("WATCHDOG_USEC", interval.as_micros().to_string())
                .env_remove("WATCHDOG_PID");
        }
        if self.exit_with_parent && !cfg!(any(target_os = "linux", target_os = "android")) {
            return Err(fail(
                ErrorKind::Config,
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "exit_with_parent needs Linux PR_SET_PDEATHSIG",
                ),
            ));
        }
        #[cfg(target_os = "linux")]
        let mut launched = self.launch_container(&program)?;
        #[cfg(target_os = "linux")]
        let holds_container = launched.is_some();
        #[cfg(not(target_os = "linux"))]
        let holds_container = false;
        let Contained {
            cgroup,
            tree,
            passed_over,
        } = match holds_container {
            // The container is the tree: the client needs no cgroup or tree init of ours.
            true => Contained::default(),
            false => self.make_cgroup(&program)?,
        };
        #[cfg(target_os = "linux")]
        let own =
            crate::spawn::clone3::chosen(self.own_spawn).map_err(|e| fail(ErrorKind::Config, e))?;
        // Our own spawn is Linux's (clone3); the choice is kept for the builder's sake only.
        #[cfg(not(target_os = "linux"))]
        let own = false;
        let activating = matches!(self.socket, SocketMode::Activation { .. });
        // A pre_exec hook forces std onto fork() (2-3x slower than posix_spawn): install it only
        // when it has work to do. Asked before this spawn creates its own (close-on-exec) fds,
        // which the check would only have to read past. See `inheritable` for the race left.
        // Our own spawn always marks every fd close-on-exec (one close_range): no need to ask,
        // unless it falls back to std's path (then `birth` asks).
        let sweep = self.exit_with_parent
            || activating
            || cgroup.is_some()
            || self.ignore_sigpipe
            || (!own && crate::spawn::inheritable::any_from(3));
        let socket = self
            .connect_stdio()
            .map_err(|e| fail(ErrorKind::Socket, e))?;
        let stdout_is_socket = self.socket == SocketMode::Stdio;
        let mut readiness = match self.ready.take() {
            None => None,
            Some(ready) => Some(
                readiness::Pending::prepare(
                    readiness::Setup {
                        ready,
                        timeout: self.ready_timeout,
                        extend_max: self.notify_extend_max,
                        runtime_dir: self.runtime_dir.as_deref(),
                        notify_owner: self.notify_owner,
                        notify_access: self.notify_access,
                        activating,
                        stdout_is_socket,
                        interrupt: self.interrupt.clone(),
                    },
                    &mut self.command,
                    &mut self.capture,
                )
                .map_err(|(kind, e)| fail(kind, e))?,
            ),
        };
        if let Some(capture) = &self.capture {
            capture
                .prepare(&mut self.command, stdout_is_socket)
                .map_err(|e| match e.kind() {
                    io::ErrorKind::InvalidInput => fail(ErrorKind::Config, e),
                    _ => fail(ErrorKind::Spawn, e),
                })?;
        }
        // WATCHDOG_PID (as systemd sets it) names the child, known only after the fork: our
        // own exec writes it there (`spawn/own_exec.rs`), as it writes LISTEN_PID.
        let watchdog_pid = self.watchdog.is_some() && cfg!(target_os = "linux");
        let (own_exec, pending) = match &self.socket {
            SocketMode::Activation { name } => {
                let prepared = activation::prepare(
                    &self.command,
                    name.as_deref(),
                    self.runtime_dir.as_deref(),
                    watchdog_pid,
                )
                .map_err(|(kind, e)| fail(kind, e))?;
                (Some(prepared.exec), Some((prepared.dir, prepared.listener)))
            }
            _ if watchdog_pid => {
                let exec = own_exec::prepare(&self.command, |_| {}, &["WATCHDOG_PID"], None)
                    .map_err(|(kind, e)| fail(kind, e))?;
                (Some(exec), None)
            }
            _ => (None, None),
        };
        // A container launch with our `--name` in its argv (activation and a watchdog were
        // refused with it).
        #[cfg(target_os = "linux")]
        let own_exec = own_exec.or_else(|| launched.as_mut().and_then(|l| l.exec.take()));
        let death_signal = self
            .exit_with_parent
            .then(|| (self.death_signal, std::process::id()));
        let may_fall_back = self.may_fall_back();
        let birth = birth::give(birth::Conception {
            command: self.command,
            own,
            exit_with_parent: self.exit_with_parent,
            death_signal,
            ignore_sigpipe: self.ignore_sigpipe,
            start_signals: self.start_signals,
            sweep,
            own_exec,
            cgroup,
            tree,
            passed_over,
            to_all: self.kill_mode == crate::process::containment::KillMode::ControlGroup,
            may_fall_back,
            process_group: self.process_group,
            portable: self.portable,
        })
        .map_err(|(kind, e)| fail(kind, e))?;
        self.process_group = birth.process_group;
        let containment_fallback = birth.fell_back;
        let containment = birth.containment;
        #[cfg(target_os = "linux")]
        let (containment, launched) = match launched {
            Some(l) => (Some(l.report), Some(l.container)),
            None => (containment, None),
        };
        match (&containment, &containment_fallback) {
            (Some(c), _) => {
                crate::base::trace::contained(birth.pid, Some(c.backend.name()), &c.passed_over)
            }
            (None, Some(why)) => {
                crate::base::trace::contained(birth.pid, None, std::slice::from_ref(why))
            }
            (None, None) => {}
        }
        let (process, cgroup, mut pipes, child_pid, spawned_by_std) = (
            birth.process,
            birth.cgroup,
            birth.pipes,
            birth.pid,
            birth.spawned_by_std,
        );
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
        let mut process = process;
        #[cfg(target_os = "linux")]
        if let Some(cgroup) = cgroup {
            crate::process::containment::after_birth(&cgroup);
            process.contain(cgroup, self.kill_mode);
        }
        #[cfg(target_os = "linux")]
        if let Some(tree) = birth.tree {
            process.contain_tree(tree, self.kill_mode);
        }
        #[cfg(target_os = "linux")]
        if let Some(container) = launched {
            process.contain_container(container);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = cgroup; // containment is Linux-only: elsewhere there is never a cgroup
        let notify = readiness.as_mut().and_then(|r| r.notify_for(&process));
        let mut handle = ChildHandle {
            program: Some(program.clone()),
            socket,
            process: Some(process),
            ladder: self.ladder.unwrap_or_default(),
            reap: self.reap.unwrap_or_default(),
            reap_chosen: self.reap.is_some(),
            release_memory: self.release_memory,
            skip_ignored: self.skip_ignored,
            last_kill: None,
            closed: false,
            socket_dir: None,
            capture: None,
            pipes: Pipes::default(),
            containment_fallback,
            containment,
            spawned_by_std,
            notify,
        };
        if let Some(capture) = &self.capture {
            let watch = readiness.as_ref().and_then(|r| r.watched_text());
            match capture.start(&mut pipes, &program, child_pid, watch) {
                Ok(captured) => handle.capture = Some(captured),
                Err(e) => {
                    handle.abandon();
                    return Err(fail(ErrorKind::Spawn, e));
                }
            }
        }
        handle.pipes = pipes;
        if let Some((dir, listener)) = pending {
            let connected = match handle.process.as_mut() {
                Some(process) => {
                    let interrupt = self.interrupt.as_ref();
                    activation::connect(listener, &dir, process, self.connect_timeout, interrupt)
                }
                None => Err(io::Error::other("no child to connect to")),
            };
            handle.socket_dir = Some(dir);
            match connected {
                Ok(stream) => handle.socket = Some(stream),
                Err(e) if crate::core::wait::is_interrupt(&e) => {
                    return Err(handle.interrupted_at_spawn(e));
                }
                Err(e) => {
                    let tail = handle.abandon();
                    return Err(fail(ErrorKind::Connect, e).with_output_tail(tail));
                }
            }
        }
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
        let mut handle = match readiness {
            Some(pending) => pending.await_on(handle, spawn_probe)?,
            None => handle,
        };
        // Off Linux `check_watchdog` refused a watchdog before the fork (it needs
        // `Ready::Notify`, which needs `SO_PASSCRED`): nothing to arm.
        #[cfg(target_os = "linux")]
        if let Some(interval) = self.watchdog {
            let on_miss = self.on_watchdog.take();
            if let Err(e) = handle.arm_watchdog(interval, started, on_miss) {
                let tail = handle.abandon();
                return Err(fail(ErrorKind::Spawn, e).with_output_tail(tail));
            }
        }
        Ok(handle)
    }

    /// Makes the child's cgroup as [`contain`](Builder::contain) asks, or says which tree
    /// inits to try (`Containment::PidNamespace`, `Subreaper`, or `BestEffort` when no cgroup
    /// can be made: see `process/containment/tree_init`), with why the cgroup was passed over.
    fn make_cgroup(&self, program: &str) -> Result<Contained> {
        use crate::process::containment::Backend;
        let config = |why: String| {
            Error::new(
                ErrorKind::Config,
                Some(program),
                io::Error::new(io::ErrorKind::InvalidInput, why),
            )
        };
        let trees = match self.containment {
            Containment::PidNamespace => vec![Backend::PidNamespace],
            Containment::Subreaper => vec![Backend::Subreaper],
            _ => Vec::new(),
        };
        let nothing = Contained {
            cgroup: None,
            tree: Vec::new(),
            passed_over: Vec::new(),
        };
        if self.containment == Containment::None || !trees.is_empty() {
            if !self.limits.is_empty() {
                let backend = trees
                    .first()
                    .map_or("no containment".into(), |b| b.to_string());
                return Err(config(format!(
                    "limits ({}) are set on the child's cgroup: they need containment by a \
                     cgroup (Builder::contain with Containment::Cgroup), not {backend}",
                    self.limits
                )));
            }
            if !cfg!(target_os = "linux") && !trees.is_empty() {
                return Err(Error::new(
                    ErrorKind::Containment,
                    Some(program),
                    io::Error::new(
                        io::ErrorKind::Unsupported,
                        "a PID namespace or a subreaper tree init needs Linux",
                    ),
                ));
            }
            return Ok(Contained {
                tree: trees,
                ..nothing
            });
        }
        #[cfg(target_os = "linux")]
        let made =
            crate::process::containment::create_cgroup(self.cgroup_parent.as_deref(), &self.limits);
        #[cfg(not(target_os = "linux"))]
        let _ = (self.kill_mode, &self.cgroup_parent);
        #[cfg(not(target_os = "linux"))]
        let made: io::Result<ContainedIn> = Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "containment needs Linux cgroup v2",
        ));
        #[cfg(target_os = "linux")]
        let made = made.and_then(|mut cgroup| {
            if self.exit_with_parent {
                cgroup.guard()?;
            }
            Ok(cgroup)
        });
        match made {
            Ok(cgroup) => Ok(Contained {
                cgroup: Some(cgroup),
                ..nothing
            }),
            Err(e)
                if self.limits.is_empty()
                    && matches!(self.containment, Containment::BestEffort | Containment::Any) =>
            {
                Ok(Contained {
                    tree: if cfg!(target_os = "linux") {
                        vec![Backend::PidNamespace, Backend::Subreaper]
                    } else {
                        Vec::new()
                    },
                    passed_over: vec![format!("cgroup: {e}")],
                    ..nothing
                })
            }
            Err(e) => Err(Error::new(ErrorKind::Containment, Some(program), e)),
        }
    }

    /// Whether a cgroup that cannot be made or joined leaves the child uncontained (in a
    /// process group of its own): `Containment::BestEffort`, unless limits are set — they are
    /// applied or the spawn fails, so a server meant to be bounded never runs unbounded.
    fn may_fall_back(&self) -> bool {
        self.containment == Containment::BestEffort && self.limits.is_empty()
    }

    fn connect_stdio(&mut self) -> io::Result<Option<UnixStream>> {
        match self.socket {
            SocketMode::None | SocketMode::Activation { .. } => Ok(None),
            SocketMode::Stdio => {
                let (ours, theirs) = UnixStream::pair()?;
                let theirs = OwnedFd::from(theirs);
                self.command.stdin(Stdio::from(theirs.try_clone()?));
                self.command.stdout(Stdio::from(theirs));
                Ok(Some(ours))
            }
        }
    }
}

/// How a [`Ready::Exec`](crate::Ready::Exec) probe is started: by this builder, as any child —
/// its own process group (the ladder reaches what it starts), stdout and stderr captured (the
/// tail quoted when it never passes), and the ladder `KILL:1s` for a probe that overran (a
/// probe has nothing to clean up). Not contained: it is our client, not part of the server.
pub(super) fn spawn_probe(command: std::process::Command) -> Result<ChildHandle> {
    use crate::base::signal::Signal;
    use crate::close::ladder::{Ladder, Rung};
    use crate::handle::readiness::{EXEC_OUTPUT_BYTES, EXEC_OUTPUT_LINES};
    use crate::spawn::capture::Capture;
    let ladder = Ladder::new([Rung::new(Signal::KILL, std::time::Duration::from_secs(1))])
        .map_err(|e| Error::new(ErrorKind::Config, None, io::Error::other(e.to_string())))?;
    ChildHandle::builder(command)
        .process_group(true)
        .capture(
            Capture::both()
                .tail_bytes(EXEC_OUTPUT_BYTES)
                .tail_lines(EXEC_OUTPUT_LINES),
        )
        .ladder(ladder)
        .spawn()
}

/// What [`Builder::make_cgroup`] made or chose.
#[derive(Default)]
struct Contained {
    cgroup: Option<ContainedIn>,
    /// Tree inits to try in this order (none: a cgroup, or no containment).
    tree: Vec<crate::process::containment::Backend>,
    /// The backends tried and passed over, with why.
    passed_over: Vec<String>,
}
