//! [`ChildHandle`]: a spawned server and the socket connected to it, closed as one.

#[cfg(doctest)]
mod api_marks;
pub(crate) mod detach;
pub(crate) mod exit_watch;
mod interruptible;
pub(crate) mod on_drop;
pub(crate) mod output;
pub(crate) mod readiness;
mod stdio;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::base::signal::Signal;
use crate::close::climb::Climb;
use crate::close::close_control::CloseControl;
use crate::close::ladder::{Ladder, Rung};
use crate::close::report::{CloseReport, Ending};
use crate::core::wait::later;
use crate::core::wait::Interrupt;
use crate::error::{Error, ErrorKind, Result};
use crate::handle::on_drop::OnDrop;
use crate::handle::readiness::notify::NotifySocket;
use crate::handle::readiness::{NotifyAccess, Ready};
use crate::process::containment::{Containment, KillMode};
use crate::process::{sigchld, Process};
use crate::reaper::{self, Job};
use crate::spawn::activation::{self, SocketDir};
use crate::spawn::capture::{Capture, Captured};
use crate::spawn::placing::{self, placing_error, ContainedIn, Placing};
use crate::spawn::stdio::Pipes;
use crate::{spawn::spawner, sys};

/// How the child is connected to us.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SocketMode {
    /// No socket: the child's stdio is whatever the `Command` says.
    #[default]
    None,
    /// A `socketpair(2)`: the child's end on its fds 0 and 1 (as libnbd's `connect_command`),
    /// our end a [`UnixStream`] (close-on-exec, so other children never inherit it).
    Stdio,
    /// systemd-style socket activation (as libnbd's `connect_systemd_socket_activation`): a
    /// Unix socket bound and listening in a new private directory (mode 0700, under
    /// `$XDG_RUNTIME_DIR`, else `/tmp`, or [`runtime_dir`](Builder::runtime_dir)) reaches the
    /// child as fd 3, with `LISTEN_FDS=1`, `LISTEN_FDNAMES` and `LISTEN_PID` set to the
    /// child's own pid (inherited `LISTEN_*` are removed). We connect, wait until the server
    /// has accepted (bounded by [`connect_timeout`](Builder::connect_timeout)), and own that
    /// connection. The socket file and directory are removed on close and on every error;
    /// [`ChildHandle::socket_path`] gives the path for further connections.
    ///
    /// The child is exec'd by childguard (`execve`, the program looked up in `PATH` before the
    /// fork) as std would: the Command's arguments, `arg0`, environment (`env_clear`, `env`,
    /// `env_remove`) plus the `LISTEN_*` above, directory, stdio and process group. No getters
    /// for `env_clear`/`arg0`: read from its `Debug` output, unreadable → [`ErrorKind::Config`].
    Activation {
        /// The `LISTEN_FDNAMES` value (default `unknown`). systemd's rules apply: at most 255
        /// printable ASCII characters, no `:`; anything else is an [`ErrorKind::Config`] error.
        name: Option<String>,
    },
}

/// Who pays for the end of the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Reap {
    /// `close()`/`drop` climb the ladder and reap before returning (bounded by the ladder).
    ///
    /// The default — but a drop inside a tokio context treats the default as `Background`.
    /// Chosen explicitly with [`Builder::reap`], a drop keeps it on a multi-thread runtime:
    /// on a `spawn_blocking` thread it simply blocks; on a worker thread it blocks inside
    /// `tokio::task::block_in_place`, so tokio first moves the worker's other tasks to another
    /// thread and the executor keeps running (other futures of the *same* task wait, as with
    /// any `block_in_place`). On a current-thread runtime a drop always goes `Background`:
    /// that runtime's one thread runs every task, and tokio cannot tell it from a
    /// `spawn_blocking` thread without panicking; call `close()` there to block.
    #[default]
    Blocking,
    /// `close()`/`drop` shut the socket down, send the first due rung, and return; the shared
    /// reaper (on the event loop) sends the rest and reaps. See [`reaper`](crate::reaper).
    Background,
}

/// Configures and spawns a [`ChildHandle`]. Made by [`ChildHandle::builder`].
#[derive(Debug)]
#[must_use = "a Builder spawns nothing until .spawn() is called"]
pub struct Builder {
    command: Command,
    socket: SocketMode,
    /// `None`: [`Ladder::default()`], built at spawn (most callers set their own).
    ladder: Option<Ladder>,
    process_group: bool,
    exit_with_parent: bool,
    death_signal: Signal,
    ignore_sigpipe: bool,
    /// `None`: not chosen (`Reap::Blocking`, but `Background` on a drop in a tokio context).
    reap: Option<Reap>,
    portable: bool,
    release_memory: bool,
    connect_timeout: Duration,
    runtime_dir: Option<PathBuf>,
    capture: Option<Capture>,
    containment: Containment,
    kill_mode: KillMode,
    cgroup_parent: Option<PathBuf>,
    ready: Option<Ready>,
    ready_timeout: Duration,
    notify_extend_max: Duration,
    notify_owner: Option<(u32, u32)>,
    notify_access: NotifyAccess,
    /// [`Builder::interrupt`] (`interruptible.rs`).
    pub(crate) interrupt: Option<Interrupt>,
}

/// The default of [`Builder::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl Builder {
    /// How the child is connected (default [`SocketMode::None`]).
    pub fn socket(mut self, mode: SocketMode) -> Builder {
        self.socket = mode;
        self
    }

    /// The ladder climbed on close (default [`Ladder::default()`]: `HUP:1s,TERM:2s,KILL:5s`).
    pub fn ladder(mut self, ladder: Ladder) -> Builder {
        self.ladder = Some(ladder);
        self
    }

    /// Make the child the leader of a new process group, and signal the whole group on every
    /// rung. Members still alive after the leader exited get the remaining rungs (the group id
    /// stays ours meanwhile: the leader is kept unreaped until the group is empty).
    pub fn process_group(mut self, on: bool) -> Builder {
        self.process_group = on;
        self
    }

    /// Have the kernel send the child a signal (`SIGKILL` unless
    /// [`parent_death_signal`](Builder::parent_death_signal) says otherwise) when we die, even
    /// by `SIGKILL` (Linux `PR_SET_PDEATHSIG`).
    ///
    /// The kernel ties this to the *thread* that forked the child. Such children are therefore
    /// forked by one internal, long-lived spawner thread, so spawning from a thread that exits
    /// at once is safe. Other platforms: `spawn()` fails with [`io::ErrorKind::Unsupported`].
    pub fn exit_with_parent(mut self, on: bool) -> Builder {
        self.exit_with_parent = on;
        self
    }

    /// The signal sent by [`exit_with_parent`](Builder::exit_with_parent) (default `KILL`).
    pub fn parent_death_signal(mut self, signal: Signal) -> Builder {
        self.death_signal = signal;
        self
    }

    /// Start the program with `SIGPIPE` ignored (default off: std resets `SIGPIPE` to its
    /// default in every child, undoing the `SIG_IGN` Rust's runtime sets for itself).
    ///
    /// A wrapper such as `timeout(1)` passes on the disposition it was started with:
    /// `.ignore_sigpipe(childguard::sigpipe_ignored_at_start().unwrap_or(false))`, so that
    /// `(trap '' PIPE; wrapper yes | head -1)` makes `yes` see `EPIPE` as it would unwrapped.
    /// Costs a `fork` instead of a `posix_spawn` (the setting is made between them).
    pub fn ignore_sigpipe(mut self, on: bool) -> Builder {
        self.ignore_sigpipe = on;
        self
    }

    /// Who climbs the rest of the ladder on close (default [`Reap::Blocking`], which a drop
    /// inside a tokio context treats as `Background`; set it explicitly to keep a blocking
    /// drop there — see [`Reap::Blocking`]).
    pub fn reap(mut self, reap: Reap) -> Builder {
        self.reap = Some(reap);
        self
    }

    /// With [`SocketMode::Activation`]: how long `spawn()` waits for the server to accept our
    /// connection (default [`DEFAULT_CONNECT_TIMEOUT`], 10 s). If the child exits first,
    /// `spawn()` fails at once with an [`ErrorKind::Connect`] error saying so.
    pub fn connect_timeout(mut self, timeout: Duration) -> Builder {
        self.connect_timeout = timeout;
        self
    }

    /// With [`SocketMode::Activation`] or [`Ready::Notify`]: the directory in which the
    /// private socket directory is made (default `$XDG_RUNTIME_DIR`, else `/tmp`). A relative
    /// path is made absolute against the current directory at `spawn()` (a relative
    /// `NOTIFY_SOCKET` is refused by libsystemd); the socket path must fit `sun_path`.
    pub fn runtime_dir(mut self, dir: impl Into<PathBuf>) -> Builder {
        self.runtime_dir = Some(dir.into());
        self
    }

    /// Capture the server's output (see [`Capture`]): drained from the fork on by one thread
    /// shared by all handles, so the server never blocks on a full pipe; its bounded tail is in
    /// [`ChildHandle::output_tail`], in errors after the fork, and in
    /// [`CloseReport::output_tail`].
    pub fn capture(mut self, capture: Capture) -> Builder {
        self.capture = Some(capture);
        self
    }

    /// `spawn()` returns only once the server is ready by `condition` (see [`Ready`] for each
    /// condition, and [`readiness`](crate::Ready) for what happens when it is not: the child
    /// exits first → an [`ErrorKind::Ready`] error at once, with its status and output tail;
    /// the [`ready_timeout`](Builder::ready_timeout) passes → the child is closed with its
    /// ladder, and the error carries the [`CloseReport`]).
    pub fn ready(mut self, condition: Ready) -> Builder {
        self.ready = Some(condition);
        self
    }

    /// How long `spawn()` waits for [`ready`](Builder::ready) (default
    /// [`DEFAULT_READY_TIMEOUT`](crate::DEFAULT_READY_TIMEOUT), 30 s).
    pub fn ready_timeout(mut self, timeout: Duration) -> Builder {
        self.ready_timeout = timeout;
        self
    }

    /// With [`Ready::Notify`]: how far `EXTEND_TIMEOUT_USEC=` may extend the ready timeout, and
    /// each wait of the close, beyond its own length (default
    /// [`DEFAULT_NOTIFY_EXTEND_MAX`](crate::DEFAULT_NOTIFY_EXTEND_MAX), 30 s; zero: ignore
    /// extensions). The close's bound grows by this much per rung — on every close path: the
    /// blocking close, `output`, the reaper (`Reap::Background`, a drop inside a runtime, a
    /// child handed over) and `close_async`.
    pub fn notify_extend_max(mut self, max: Duration) -> Builder {
        self.notify_extend_max = max;
        self
    }

    /// With [`Ready::Notify`], for a child that runs as another user (`CommandExt::uid`/`gid`,
    /// e.g. postgres, which refuses to run as root): the private `NOTIFY_SOCKET` directory
    /// (still mode 0700) and the socket are chowned to `uid:gid`, so that the child can send
    /// on it. Needs the privilege to chown (root). Default: owned by us.
    pub fn notify_owner(mut self, uid: u32, gid: u32) -> Builder {
        self.notify_owner = Some((uid, gid));
        self
    }

    /// With [`Ready::Notify`]: whose datagrams count (see [`NotifyAccess`]; default
    /// [`NotifyAccess::All`] — the child's cgroup when [contained](Builder::contain), else
    /// the child and its descendants — unlike systemd's `main`, so that a wrapper such as
    /// `runuser` or `sh -c 'helper; exec server'` works). Others are ignored and listed in
    /// [`NotifyReport::ignored`](crate::NotifyReport::ignored).
    pub fn notify_access(mut self, access: NotifyAccess) -> Builder {
        self.notify_access = access;
        self
    }

    /// After a `SIGKILL` rung, call `process_mrelease(2)` on a child with at least 64 MiB
    /// resident (Linux 5.15; default on). The memory of a big child is then freed by two CPUs
    /// at once — its own exit path and a short-lived helper thread that sends the kill and
    /// makes the call — so the exit, and the close, come sooner (~0.55× the plain `waitpid`
    /// time at 8 GiB here). The close still returns at the rung's deadline or the exit,
    /// whichever comes first, however long the call takes (the helper finishes it alone), and
    /// the event loop (the shared reaper) is held up by at most 1 ms per release. Skipped when the
    /// system holds transparent huge pages of at least half the child's size (their teardown
    /// is not sped up), and where the close must return at once (an async task, before a
    /// `Reap::Background` drop returns). The outcome is in [`CloseReport::memory_release`].
    pub fn release_memory_on_kill(mut self, on: bool) -> Builder {
        self.release_memory = on;
        self
    }

    /// Give the child a cgroup v2 of its own (Linux), so that *everything* it starts goes with
    /// it on close — workers that called `setsid`, double-forked daemons — which a process
    /// group cannot promise (default [`Containment::None`]).
    ///
    /// What happens, and when:
    /// - **`spawn()`**: a new cgroup `childguard-<our pid>-<n>-t<our start time>-ns<our pid
    ///   namespace>` (mode 0755) is made under the cgroup this process runs in (found through
    ///   `/proc/self/cgroup` and the cgroup2 mount in `/proc/self/mountinfo`, hybrid or pure
    ///   v2), or under [`cgroup_parent`](Builder::cgroup_parent). The child moves itself into it
    ///   *before it execs* (it writes `0` to the cgroup's `cgroup.procs`), so every descendant
    ///   is born inside. If the cgroup cannot be made or joined, `spawn()` fails with
    ///   [`ErrorKind::Containment`] naming the path, the errno and the reason, and leaves no
    ///   directory, fd or zombie ([`Containment::BestEffort`] falls back to a process group
    ///   instead — also when only the join failed: the child then leads a group of its own and
    ///   execs uncontained — and the report says so). Containment takes std's `fork` path (a
    ///   `pre_exec` hook), not `posix_spawn`.
    /// - **first use of a parent** in this process: the `childguard-*` cgroups that dead
    ///   supervisors left in it (crashed without `exit_with_parent`) are killed and removed
    ///   before ours is made, and the first contained close report says so in
    ///   [`CloseReport::notes`]. A supervisor is dead when its pid is gone, a zombie, or has
    ///   another start time than its cgroup's name records; our own cgroups, those of live
    ///   supervisors and those named in another pid namespace are never touched.
    /// - **each rung**: catchable signals go where [`kill_mode`](Builder::kill_mode) says
    ///   (default [`KillMode::Mixed`]: the child, or its group); the `KILL` rung writes
    ///   `cgroup.kill`, which kills every member atomically (no pid read, no fork escapes).
    ///   [`CloseReport::signals`] says how many processes each rung reached.
    /// - **the end**: the close is over when the cgroup is empty (`cgroup.events` says
    ///   `populated 0`, woken by inotify), not when the child exits; the child is reaped and
    ///   the directory removed, bottom-up: cgroups the server made inside its own (a nested
    ///   contained run, a container runtime) first; one that stays is named in
    ///   [`CloseReport::notes`]. Members that outlive the last rung (uninterruptible sleep) are
    ///   left to the background reaper, which removes the cgroup once they are gone;
    ///   [`CloseReport::cgroup`] says how many were left.
    /// - **we die**: with [`exit_with_parent`](Builder::exit_with_parent), a guardian process
    ///   kills the whole cgroup when this process dies, even by `SIGKILL`, and removes it
    ///   (bottom-up). Without it, the cgroup and whatever is left in it stay until the next
    ///   process that contains a child under the same parent sweeps them (above).
    ///
    /// Needs write access to the parent cgroup: root, or a subtree delegated to this user
    /// (systemd `Delegate=yes`, or a user session's `user@.service`). Without root, the child's
    /// move also needs write access to `cgroup.procs` of the nearest common ancestor of this
    /// process's cgroup and the new one, so a `cgroup_parent` outside this process's own
    /// delegated subtree cannot be joined (and before Linux 5.16 a child given another user
    /// with `CommandExt::uid` cannot join a root-made cgroup).
    pub fn contain(mut self, containment: Containment) -> Builder {
        self.containment = containment;
        self
    }

    /// With [`contain`](Builder::contain): who gets the catchable rungs (default
    /// [`KillMode::Mixed`], as postgres asks of its unit: the leader stops its own workers).
    pub fn kill_mode(mut self, mode: KillMode) -> Builder {
        self.kill_mode = mode;
        self
    }

    /// With [`contain`](Builder::contain): the cgroup directory under which the child's cgroup
    /// is made, instead of the cgroup this process runs in (e.g. a delegated subtree).
    pub fn cgroup_parent(mut self, dir: impl Into<PathBuf>) -> Builder {
        self.cgroup_parent = Some(dir.into());
        self
    }

    /// The program's name, for errors.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn program_name(&self) -> String {
        self.command.get_program().to_string_lossy().into_owned()
    }

    /// Use the portable `kill` + `SIGCHLD` mechanism even where pidfds exist (for tests and
    /// comparisons).
    #[doc(hidden)]
    pub fn force_portable(mut self, on: bool) -> Builder {
        self.portable = on;
        self
    }

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
        if self.exit_with_parent && !cfg!(any(target_os = "linux", target_os = "android")) {
            return Err(fail(
                ErrorKind::Config,
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    "exit_with_parent needs Linux PR_SET_PDEATHSIG",
                ),
            ));
        }
        let (cgroup, containment_fallback) = self.make_cgroup(&program)?;
        if containment_fallback.is_some() {
            self.process_group = true;
        }
        let activating = matches!(self.socket, SocketMode::Activation { .. });
        // A pre_exec hook forces std onto fork() (2-3x slower than posix_spawn): install it only
        // when it has work to do. Asked before this spawn creates its own (close-on-exec) fds,
        // which the check would only have to read past. See `inheritable` for the race left.
        let sweep = self.exit_with_parent
            || activating
            || cgroup.is_some()
            || self.ignore_sigpipe
            || crate::spawn::inheritable::any_from(3);
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
        let (activation_exec, pending) = match &self.socket {
            SocketMode::Activation { name } => {
                let prepared = activation::prepare(
                    &self.command,
                    name.as_deref(),
                    self.runtime_dir.as_deref(),
                )
                .map_err(|(kind, e)| fail(kind, e))?;
                (Some(prepared.exec), Some((prepared.dir, prepared.listener)))
            }
            _ => (None, None),
        };
        if self.process_group {
            self.command.process_group(0);
        }
        let death_signal = self
            .exit_with_parent
            .then(|| (self.death_signal, std::process::id()));
        // With activation fd 3 is the listener; everything above stays ours.
        let first_private_fd = if activation_exec.is_some() { 4 } else { 3 };
        let placement = cgroup
            .as_ref()
            .map(|c| Placing::new(c, self.containment == Containment::BestEffort))
            .transpose()
            .map_err(|e| fail(ErrorKind::Containment, e))?;
        if sweep {
            if activation_exec.is_none() {
                crate::spawn::exec_check::refuse_unknown_format(&self.command)
                    .map_err(|e| fail(ErrorKind::Spawn, e))?;
            }
            sys::install_child_setup(
                &mut self.command,
                sys::ChildSetup {
                    death_signal,
                    first_private_fd,
                    activation: activation_exec,
                    placement: placement.as_ref().map(Placing::fds),
                    ignore_sigpipe: self.ignore_sigpipe,
                },
            );
        }
        let spawn_began = Instant::now();
        // The Command (holding the child's ends of the socket) is dropped right after the fork,
        // in whichever thread forked, so our process keeps only its own end.
        let spawned = if self.exit_with_parent {
            spawner::spawn(self.command)
        } else {
            let mut command = self.command;
            command.spawn()
        };
        let mut child = match (spawned, &placement, &cgroup) {
            (Ok(child), _, _) => child,
            (Err(e), Some(placing), Some(cgroup)) => {
                // The cgroup is dropped (removed: the child never got to run in it).
                return Err(match placing.failure() {
                    Some(errno) => fail(ErrorKind::Containment, placing_error(cgroup, errno)),
                    None => fail(ErrorKind::Spawn, e),
                });
            }
            (Err(e), _, _) => return Err(fail(ErrorKind::Spawn, e)),
        };
        // BestEffort: a child that could not join its cgroup runs on uncontained, leading a
        // group of its own (`sys::Placement::fall_back`); its cgroup is removed (dropped).
        let (cgroup, containment_fallback) = match placing::joined(placement.as_ref(), cgroup) {
            Ok(cgroup) => (cgroup, containment_fallback),
            Err(why) => {
                self.process_group = true;
                (None, Some(why))
            }
        };
        drop(placement);
        // Our ends of the pipes the Command asked for: kept, never dropped with `child`.
        let mut pipes = Pipes::take_from(&mut child);
        let process =
            match Process::adopt(child.id(), spawn_began, self.process_group, self.portable) {
                Ok(p) => p,
                Err(e) => {
                    #[cfg(target_os = "linux")]
                    if let Some(cgroup) = &cgroup {
                        let _ = crate::process::containment::kill::kill_all(cgroup);
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(fail(ErrorKind::Pidfd, e));
                }
            };
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
        let mut process = process;
        #[cfg(target_os = "linux")]
        if let Some(cgroup) = cgroup {
            process.contain(cgroup, self.kill_mode);
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
            last_kill: None,
            closed: false,
            socket_dir: None,
            capture: None,
            pipes: Pipes::default(),
            containment_fallback,
            notify,
        };
        if let Some(capture) = &self.capture {
            let watch = readiness.as_ref().and_then(|r| r.watched_text());
            match capture.start(&mut pipes, &program, child.id(), watch) {
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
                    activation::connect(
                        listener,
                        dir.path(),
                        process,
                        self.connect_timeout,
                        interrupt,
                    )
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
        match readiness {
            Some(pending) => pending.await_on(handle),
            None => Ok(handle),
        }
    }

    /// Makes the child's cgroup as [`contain`](Builder::contain) asks: `(cgroup, None)`,
    /// `(None, None)` without containment, or `(None, Some(why))` when `BestEffort` fell back.
    fn make_cgroup(&self, program: &str) -> Result<(Option<ContainedIn>, Option<String>)> {
        if self.containment == Containment::None {
            return Ok((None, None));
        }
        #[cfg(target_os = "linux")]
        let made = crate::process::containment::create_cgroup(self.cgroup_parent.as_deref());
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
        match (made, &self.containment) {
            (Ok(cgroup), _) => Ok((Some(cgroup), None)),
            (Err(e), Containment::BestEffort) => Ok((None, Some(e.to_string()))),
            (Err(e), _) => Err(Error::new(ErrorKind::Containment, Some(program), e)),
        }
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

/// A spawned server process and the socket connected to it, closed together.
///
/// # The close timeline
///
/// [`close`](ChildHandle::close) and `Drop` run the same path, top to bottom:
///
/// 1. **Shutdown** — `shutdown(SHUT_RDWR)` on our socket. This is what wakes a server blocked in
///    `read` or `write` on it, even if another process (a forked worker) still holds a copy of
///    its end: `close` alone would not, as long as any copy stays open.
/// 2. **Close** — our socket fd is closed. With [`SocketMode::Activation`], the socket file and
///    its private directory are removed right after.
/// 3. **EOF wait** (only if the ladder starts with `EOF:…`) — a well-behaved server exits on
///    EOF; give it that long before any signal.
/// 4. **Rungs** — for each rung: send its signal (to the group with
///    [`process_group`](Builder::process_group)), then `SIGCONT` if the signal is catchable so
///    a stopped server can act on it; wait up to the rung's grace for the exit, woken by the
///    pidfd the moment it happens. The next rung comes only if the grace ran out.
/// 5. **Reap** — `waitid` collects the exit status and frees the pid. A child that outlived
///    the last rung (uninterruptible sleep) is handed to the background reaper instead, and the
///    report says so: the close never blocks longer than the ladder's
///    [`total_grace`](Ladder::total_grace) plus a few milliseconds.
///
/// A [`kill`](ChildHandle::kill) before the close counts as a rung already taken: the close
/// resumes after the first rung sending that signal, once its grace (from the kill) ran out.
///
/// [`detach`](ChildHandle::detach) gives the child up instead of closing it: it keeps running,
/// you keep the socket, and the shared reaper still reaps it when it exits.
///
/// With the `tokio` feature, a handle dropped (not closed) inside a tokio context closes as with
/// [`Reap::Background`] unless the builder chose [`Reap::Blocking`] explicitly (kept on a
/// multi-thread runtime, see there), so that no grace period blocks an executor thread:
/// shutdown, close, the first due rung, and the rest is climbed by the shared
/// [`reaper`](crate::reaper). `close_async` (see `childguard::tokio`) is the awaitable close.
#[derive(Debug)]
#[must_use = "dropping a ChildHandle closes the child at once: its ladder runs (up to 8 s by default); keep it, or call close()/detach()"]
pub struct ChildHandle {
    program: Option<String>,
    socket: Option<UnixStream>,
    process: Option<Process>,
    ladder: Ladder,
    reap: Reap,
    /// Whether `reap` was set with [`Builder::reap`] (see [`crate::handle::on_drop`]).
    reap_chosen: bool,
    release_memory: bool,
    last_kill: Option<(Signal, Instant)>,
    closed: bool,
    /// Socket activation: the socket file and its private directory, removed on close.
    socket_dir: Option<SocketDir>,
    /// The stdio pipes the Command asked for (see [`crate::spawn::stdio`]).
    pipes: Pipes,
    /// [`Builder::capture`]: the handle's side of the capture (drained by the event loop).
    capture: Option<Captured>,
    /// `Containment::BestEffort` fell back to the process group: why.
    containment_fallback: Option<String>,
    /// [`Ready::Notify`]: the `NOTIFY_SOCKET`, read until the close ends.
    notify: Option<NotifySocket>,
}

impl ChildHandle {
    /// Starts configuring a handle for `command`.
    pub fn builder(command: Command) -> Builder {
        Builder {
            command,
            socket: SocketMode::None,
            ladder: None,
            process_group: false,
            exit_with_parent: false,
            death_signal: Signal::KILL,
            ignore_sigpipe: false,
            reap: None,
            portable: false,
            release_memory: true,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            runtime_dir: None,
            capture: None,
            containment: Containment::None,
            kill_mode: KillMode::default(),
            cgroup_parent: None,
            ready: None,
            ready_timeout: readiness::DEFAULT_READY_TIMEOUT,
            notify_extend_max: readiness::DEFAULT_NOTIFY_EXTEND_MAX,
            notify_owner: None,
            notify_access: NotifyAccess::default(),
            interrupt: None,
        }
    }

    /// A handle over a socket for which we spawned no server. Closing it shuts the socket down
    /// and closes it; it never signals anyone.
    pub fn from_socket(socket: impl Into<OwnedFd>) -> ChildHandle {
        ChildHandle {
            program: None,
            socket: Some(UnixStream::from(socket.into())),
            process: None,
            ladder: Ladder::default(),
            reap: Reap::Blocking,
            reap_chosen: false,
            release_memory: false,
            last_kill: None,
            closed: false,
            socket_dir: None,
            pipes: Pipes::default(),
            capture: None,
            containment_fallback: None,
            notify: None,
        }
    }

    /// The stdio pipes the Command asked for, for the accessors in [`crate::spawn::stdio`].
    pub(crate) fn pipes_mut(&mut self) -> &mut Pipes {
        &mut self.pipes
    }

    /// Our end of the socket, if the handle has one.
    pub fn socket(&self) -> Option<&UnixStream> {
        self.socket.as_ref()
    }

    /// With [`SocketMode::Activation`]: the listening socket's path, for clients that open
    /// more connections (it is removed on close).
    pub fn socket_path(&self) -> Option<&Path> {
        self.socket_dir.as_ref().map(SocketDir::path)
    }

    /// With [`Builder::capture`]: the tail of the child's output as it stands (complete lines,
    /// oldest first, bounded by [`Capture::tail_bytes`]/[`Capture::tail_lines`]).
    pub fn output_tail(&self) -> Option<String> {
        self.capture.as_ref().map(Captured::tail_text)
    }

    /// Ends a child whose start failed (activation connect, capture, readiness): `SIGKILL` (to
    /// the group with `process_group`) and reap, bounded like any close; the socket directory
    /// goes too. Returns the output tail, for the error.
    pub(crate) fn abandon(self) -> Option<String> {
        self.abandon_with_report().ok().and_then(|r| r.output_tail)
    }

    /// [`abandon`](ChildHandle::abandon), returning the close report.
    pub(crate) fn abandon_with_report(mut self) -> Result<CloseReport> {
        if let Ok(ladder) = Ladder::new([Rung::new(Signal::KILL, Duration::from_secs(1))]) {
            self.ladder = ladder;
        }
        self.reap = Reap::Blocking;
        self.close_path(CloseControl::new())
    }

    /// The capture, lent to a readiness wait ([`put_capture`](ChildHandle::put_capture) gives
    /// it back).
    pub(crate) fn take_capture(&mut self) -> Option<Captured> {
        self.capture.take()
    }

    pub(crate) fn put_capture(&mut self, captured: Captured) {
        self.capture = Some(captured);
    }

    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))] // Linux-only callers
    pub(crate) fn notify_mut(&mut self) -> Option<&mut NotifySocket> {
        self.notify.as_mut()
    }

    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))] // Linux-only callers
    pub(crate) fn notify_ref(&self) -> Option<&NotifySocket> {
        self.notify.as_ref()
    }

    /// The child's pid, if there is a child.
    pub fn id(&self) -> Option<u32> {
        self.process.as_ref().map(Process::pid)
    }

    /// The program this handle spawned.
    pub fn program(&self) -> Option<&str> {
        self.program.as_deref()
    }

    /// The ladder the close path will climb.
    pub fn ladder(&self) -> &Ladder {
        &self.ladder
    }

    /// Whether the child has exited, without blocking. Like `std`, this reaps an exited child
    /// — except a process-group leader, which stays a zombie until `close` so that its group
    /// id cannot be recycled while we may still signal the group.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        let Some(process) = self.process.as_mut() else {
            return Err(no_child());
        };
        if process.is_inherited() {
            return Err(inherited(self.program.as_deref(), process));
        }
        // `check_exit` reaps a child that leads no group in the `waitid` that sees it exited.
        process
            .check_exit()
            .map_err(|e| Error::new(ErrorKind::Wait, self.program.as_deref(), e))
    }

    /// Sends `signal` once (to the group with `process_group`), then waits up to `grace` for
    /// the exit. `Ok(None)`: still alive. After the child exited this sends nothing and returns
    /// its status again.
    pub fn kill(&mut self, signal: Signal, grace: Duration) -> Result<Option<ExitStatus>> {
        match self.send_kill(signal)? {
            Err(status) => Ok(Some(status)),
            Ok(sent_at) => self.wait_until(later(sent_at, grace), None),
        }
    }

    /// The sending half of [`kill`](ChildHandle::kill), shared with the tokio face: `Ok(when)`
    /// the signal (and `SIGCONT`) went out, `Err(status)` if the child had already exited.
    pub(crate) fn send_kill(
        &mut self,
        signal: Signal,
    ) -> Result<std::result::Result<Instant, ExitStatus>> {
        if let Some(status) = self.try_wait()? {
            return Ok(Err(status));
        }
        let process = self.process.as_mut().ok_or_else(no_child)?;
        let err = |kind, e| Error::new(kind, self.program.as_deref(), e);
        let sent_at = Instant::now();
        process
            .signal(signal)
            .map_err(|e| err(ErrorKind::Signal, e))?;
        if signal.is_catchable() {
            process
                .signal(Signal::CONT)
                .map_err(|e| err(ErrorKind::Signal, e))?;
        }
        self.last_kill = Some((signal, sent_at));
        Ok(Ok(sent_at))
    }

    /// The child, for drivers that wait on it their own way (the tokio face).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn process(&self) -> Option<&Process> {
        self.process.as_ref()
    }

    /// Waits up to `timeout` for the child to exit, woken by its pidfd (or `SIGCHLD`) the
    /// moment it does. `Ok(None)`: still running. Reaps like [`try_wait`](ChildHandle::try_wait).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        self.wait_until(later(Instant::now(), timeout), None)
    }

    /// Shuts the socket down, closes it, climbs the ladder and reaps the child (see the close
    /// timeline above). `Drop` does the same and discards the report.
    ///
    /// An error names the step that failed ([`ErrorKind::Signal`]: the kernel refused a rung,
    /// e.g. `EPERM` from an LSM; [`ErrorKind::Wait`]: waiting or reaping failed) and carries the
    /// report ([`Error::close_report`]). Whatever failed, the child is not dropped unreaped: it was
    /// reaped, or handed to the background reaper, which watches it (sending nothing more
    /// after a refused signal) and reaps it when it exits. If no reaper thread can be started
    /// either, the close still returns within its bound, with a report that notes the child
    /// was left unreaped; it is handed over at the next hand-off or
    /// [`reaper::drain`](crate::reaper::drain).
    pub fn close(mut self) -> Result<CloseReport> {
        self.close_path(CloseControl::new())
    }

    /// [`close`](ChildHandle::close), told things while it climbs (see [`CloseControl`]):
    /// a ladder to climb instead of the handle's, an fd whose readability means "go to the
    /// next rung now", and a callback before each rung's signal. The steps, their order and
    /// the report are `close()`'s; only the waits between the rungs watch more.
    ///
    /// This is how a supervisor that receives signals of its own (the `childguard` CLI: a
    /// second Ctrl-C escalates at once) drives the library's climb instead of its own.
    pub fn close_with(mut self, control: CloseControl<'_>) -> Result<CloseReport> {
        self.close_path(control)
    }

    /// The one close path: shutdown → close → ladder → reap, each a named step.
    fn close_path(&mut self, mut control: CloseControl<'_>) -> Result<CloseReport> {
        let _span = crate::base::trace::close_span(
            self.program.as_deref(),
            self.process.as_ref().map(Process::pid),
        );
        if let Some(ladder) = control.ladder.take() {
            self.ladder = ladder;
        }
        let reap = self.reap;
        let mut closing = self.begin_close();
        let Some((mut process, mut climb)) = closing.child.take() else {
            return closing.finish(None, Ok(true));
        };
        // A NOTIFY_SOCKET is in the climb (`begin_close`): read before every step, for
        // EXTEND_TIMEOUT_USEC= and STOPPING=1, here and in the reaper alike.
        let climbed = match closing.earlier_exit.take() {
            Some(e) => Err(e),
            None if reap == Reap::Blocking => climb.run_blocking(&mut process, &mut control),
            None => climb_ladder(&mut climb, &mut process, reap),
        };
        let finished = closing.finish(Some((process, climb)), climbed);
        crate::handle::interruptible::after_close(finished, control.take_interrupted())
    }

    /// Steps 0–2 of the close path (note an earlier exit, shutdown, close), shared with the
    /// tokio face: what is left is the climb, which each driver does its own way, and
    /// [`Closing::finish`]. Marks the handle closed.
    pub(crate) fn begin_close(&mut self) -> Closing {
        if self.process.as_ref().is_some_and(Process::is_inherited) {
            return self.let_go_inherited();
        }
        self.closed = true;
        let mut process = self.process.take();
        let earlier_exit = observe_earlier_exit(process.as_mut()).err();
        if let Some(p) = process.as_mut() {
            p.snapshot_descendants();
        }
        let started = Instant::now();
        // The handle is done with its program name: the report carries it from here.
        let mut report = CloseReport::new(self.program.take(), process.as_ref().map(Process::pid));
        report
            .notes
            .extend(process.as_ref().and_then(Process::fallback_note));
        report.containment_fallback = self.containment_fallback.take();
        shut_down_and_close(self.socket.take(), started, &mut report);
        // Our end of a piped stdin goes with the socket: EOF for a server reading it. Its
        // stdout/stderr stay open until the handle is gone (see `crate::spawn::stdio`).
        drop(self.pipes.stdin.take());
        remove_socket_dir(self.socket_dir.take(), &mut report);
        let notify = self.notify.take();
        let child = process.map(|p| {
            let mut climb =
                Climb::begin(&self.ladder, started, self.last_kill, self.release_memory);
            // The climb reads the NOTIFY_SOCKET, whoever drives it (blocking, reaper, tokio).
            if let Some(notify) = notify {
                climb.listen_to(notify);
            }
            (p, climb)
        });
        Closing {
            started,
            report,
            child,
            earlier_exit,
            capture: self.capture.take(),
        }
    }
}

impl ChildHandle {
    /// For [`detach`](ChildHandle::detach): takes the child, our socket and the activation
    /// directory out of the handle and marks it closed, so that its drop does nothing but
    /// close the stdio pipes it still holds.
    pub(crate) fn take_for_detach(&mut self) -> crate::handle::detach::Parts {
        self.closed = true;
        crate::handle::detach::Parts {
            program: self.program.clone(),
            process: self.process.take(),
            socket: self.socket.take(),
            socket_dir: self.socket_dir.take(),
        }
    }

    /// Undoes [`take_for_detach`](ChildHandle::take_for_detach) after a failed detach.
    pub(crate) fn untake(&mut self, parts: crate::handle::detach::Parts) {
        self.closed = false;
        self.process = parts.process;
        self.socket = parts.socket;
        self.socket_dir = parts.socket_dir;
    }
}

impl ChildHandle {
    /// The close of a handle inherited through `fork()` without `exec` (see
    /// [`Process::is_inherited`]): the child, its socket, socket directory, cgroup and guardian
    /// are the parent's. A normal close here would end them for the parent: the shutdown acts
    /// on the shared socket (the parent's server sees EOF), the pidfd and `cgroup.kill` reach
    /// the parent's child, the socket directories would be removed, the guardian dismissed. So
    /// this process only closes its copies of the socket and pipes; everything whose drop
    /// would act on the parent's state (the process with its pidfd, cgroup and guardian, the
    /// socket directory, the capture, the `NOTIFY_SOCKET`) is forgotten: its fds stay open,
    /// close-on-exec, until this process execs or exits. The report says so; nothing is
    /// signalled or waited for.
    fn let_go_inherited(&mut self) -> Closing {
        self.closed = true;
        let started = Instant::now();
        let process = self.process.take();
        let mut report = CloseReport::new(self.program.take(), process.as_ref().map(Process::pid));
        if let Some(process) = &process {
            report.notes.push(format!(
                "inherited through fork(): the child belongs to process {}, which spawned it; \
                 this process only closed its copies of the handle's fds",
                process.owner()
            ));
        }
        std::mem::forget(process);
        std::mem::forget(self.socket_dir.take());
        std::mem::forget(self.capture.take());
        // Off Linux a NotifySocket has nothing to drop; forgetting it is then a no-op.
        #[allow(clippy::forget_non_drop)]
        std::mem::forget(self.notify.take());
        // Closing (not shutting down) our copy of the socket leaves the parent's connection be.
        drop(self.socket.take());
        Closing {
            started,
            report,
            child: None,
            earlier_exit: None,
            capture: None,
        }
    }
}

/// The error for anything but a close on a handle inherited through `fork()`.
fn inherited(program: Option<&str>, process: &Process) -> Error {
    Error::new(
        ErrorKind::Inherited,
        program,
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "this handle was inherited through fork(): its child belongs to process {}, \
                 which spawned it; only that process may signal or wait for it",
                process.owner()
            ),
        ),
    )
}

/// A close between its socket steps and its ladder (see [`ChildHandle::begin_close`]).
#[derive(Debug)]
pub(crate) struct Closing {
    started: Instant,
    report: CloseReport,
    /// The child and its climb; `None` for a socket-only handle.
    pub(crate) child: Option<(Process, Climb)>,
    /// Noting an earlier exit failed: skip the ladder, report this error.
    pub(crate) earlier_exit: Option<io::Error>,
    /// The output capture, whose tail goes into the report.
    capture: Option<Captured>,
}

impl Closing {
    /// Step 5 and the report, once the climb is over (`climbed`: whether the child is gone).
    pub(crate) fn finish(
        mut self,
        child: Option<(Process, Climb)>,
        climbed: io::Result<bool>,
    ) -> Result<CloseReport> {
        let mut error = None;
        if let Some((process, mut climb)) = child {
            climb.record(&process, &mut self.report);
            let refused = climb.take_signal_error();
            if let Some((rung, signal, e)) = &refused {
                self.report.notes.push(format!(
                    "rung {rung} ({signal}): {e}; no further signal sent, the child is watched \
                     and reaped when it exits"
                ));
            }
            let outcome = reap_or_hand_off(process, climb, climbed, self.started, &mut self.report);
            // Each error with the kind of the step that failed; the report goes with it.
            error = match (outcome, refused) {
                (Err(e), _) => Some((ErrorKind::Wait, e)),
                (Ok(()), Some((_, _, e))) => Some((ErrorKind::Signal, e)),
                (Ok(()), None) => None,
            };
        }
        if let Some(capture) = self.capture.take() {
            // The child is gone: what it wrote is in the pipes. Let the capture thread read it
            // (microseconds) so the tail ends with its last words — but never wait on an
            // async runtime's thread, where the tail is taken as it stands.
            if !on_async_runtime() {
                capture.sync(Instant::now() + CAPTURE_SYNC_MAX);
            }
            capture.report_into(&mut self.report);
        }
        let report = finish(self.report, self.started);
        match error {
            None => Ok(report),
            Some((kind, e)) => {
                Err(Error::new(kind, report.program.as_deref(), e).with_close_report(report))
            }
        }
    }
}

/// The longest a close waits for the capture thread to read what the exited child left. It
/// answers in microseconds; the bound is for a thread held up by a slow line callback (or a
/// panic hook printing a backtrace), and adds to the close's bound only with a capture.
const CAPTURE_SYNC_MAX: Duration = Duration::from_secs(1);

pub(crate) fn no_child() -> Error {
    Error::new(
        ErrorKind::Config,
        None,
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "this handle has no child (made by from_socket)",
        ),
    )
}

/// Step 0: notes an exit that happened before the close, before its clock starts.
fn observe_earlier_exit(process: Option<&mut Process>) -> io::Result<()> {
    process.map_or(Ok(()), |p| p.check_exit().map(drop))
}

/// Steps 1 and 2: `shutdown(SHUT_RDWR)`, then close.
fn shut_down_and_close(socket: Option<UnixStream>, started: Instant, report: &mut CloseReport) {
    let Some(socket) = socket else { return };
    // ENOTCONN (the peer is already gone) is expected and harmless.
    if let Err(e) = rustix::net::shutdown(socket.as_fd(), rustix::net::Shutdown::Both) {
        if e != rustix::io::Errno::NOTCONN {
            report
                .notes
                .push(format!("shutdown: {}", io::Error::from(e)));
        }
    }
    report.shutdown = Some(started.elapsed());
    drop(socket);
}

/// Step 2, socket activation: remove the socket file and its private directory, now that our
/// connection is closed (the server's listener copy does not need the name).
fn remove_socket_dir(dir: Option<SocketDir>, report: &mut CloseReport) {
    let Some(dir) = dir else { return };
    let path = dir.path().display().to_string();
    if let Err(e) = dir.remove() {
        report.notes.push(format!("removing socket {path}: {e}"));
    }
}

/// Steps 3 and 4: the EOF wait and the rungs. Returns whether the child (and its group) is gone.
fn climb_ladder(climb: &mut Climb, process: &mut Process, reap: Reap) -> io::Result<bool> {
    match reap {
        Reap::Blocking => climb.run_blocking(process, &mut CloseControl::new()),
        Reap::Background => {
            if process.is_gone()? {
                return Ok(true);
            }
            climb.advance(process, Instant::now())?;
            Ok(false)
        }
    }
}

/// Step 5: reap what is gone; hand the rest (with any rungs still to come) to the reaper.
fn reap_or_hand_off(
    mut process: Process,
    mut climb: Climb,
    climbed: io::Result<bool>,
    started: Instant,
    report: &mut CloseReport,
) -> io::Result<()> {
    report.group_survivors = process.survivor_pids();
    report.escaped = process.escaped_pids();
    let contained = process.cgroup_report().is_some();
    // Only a handle that had a socket can have it held by someone else. A contained child's
    // descendants are all in its cgroup, which the close waits to be empty. A group whose
    // members could not be listed is treated as off Linux: members we do not know of may
    // survive.
    let unlisted = process.survivors_unlisted().map(|e| e.to_string());
    report.socket_may_be_held = report.shutdown.is_some()
        && !contained
        && (!process.leads_group() || !cfg!(target_os = "linux") || unlisted.is_some());
    if let Some(e) = unlisted {
        report.notes.push(format!(
            "process group members could not be listed ({e}): survivors may exist"
        ));
    }
    let ladder_done = matches!(climbed, Ok(false)) && climb.is_exhausted(Instant::now());
    // What the NOTIFY_SOCKET heard so far; the socket goes on with the climb if the reaper
    // takes it (and is removed with the climb), else it is removed now, below.
    report.notify = climb.notify_report(started);
    if matches!(climbed, Ok(true))
        || (ladder_done && !process.is_running() && !process.waits_for_cgroup())
    {
        report.notify = climb.finish_notify(started);
        // Gone — or only group members outlived the ladder: release the leader now.
        report.outlived_ladder = !report.group_survivors.is_empty();
        let reaped = process.reap();
        // Also when the reap (or the cgroup's removal) failed: the report says where it is.
        report.cgroup = process.cgroup_report();
        report.notes.extend(process.take_cgroup_notes());
        report.status = reaped?;
        report.reaped = Some(started.elapsed());
        if report.status.is_none() {
            report
                .notes
                .push("exit status lost: the child was reaped by someone else".into());
        }
        return climbed.map(drop);
    }
    report.outlived_ladder = ladder_done;
    report.handed_to_reaper = true;
    // Before the hand-off: members left in the cgroup (D state) are counted now.
    report.cgroup = process.cgroup_report();
    report.notes.extend(process.take_cgroup_notes());
    if !ladder_done {
        report.ended_by = Ending::InBackground;
    }
    let pending = (!ladder_done).then_some(climb);
    let handed = reaper::hand_off(Job {
        process,
        climb: pending,
        on_done: None,
    });
    if let Err(e) = handed {
        note_parked(report, &e);
    }
    climbed.map(drop)
}

/// The report of a close whose child could not be handed to the reaper (no thread could be
/// started: `pids.max`, `RLIMIT_NPROC`). The close does not wait for the child in place — a
/// child in `D` state, or a ladder without `KILL`, would make that wait unbounded — so it
/// returns within its bound, and the child is left unreaped *for now*: it is parked, and handed
/// to the reaper (rungs still to come included) by the next hand-off or
/// [`reaper::drain`](crate::reaper::drain) that can start the thread.
fn note_parked(report: &mut CloseReport, e: &io::Error) {
    report.handed_to_reaper = false;
    report.notes.push(format!(
        "left unreaped: the background reaper could not be started ({e}); the child is parked \
         and handed to it at the next hand-off or drain()"
    ));
}

fn finish(mut report: CloseReport, started: Instant) -> CloseReport {
    report.total = started.elapsed();
    report
}

impl Drop for ChildHandle {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        match on_drop::decide(self.reap, self.reap_chosen) {
            OnDrop::AsConfigured => drop(self.close_path(CloseControl::new())),
            #[cfg(feature = "tokio")]
            OnDrop::Background => {
                // Never block an executor thread: first due rung now, the rest in the reaper.
                self.reap = Reap::Background;
                drop(self.close_path(CloseControl::new()));
            }
            #[cfg(feature = "tokio")]
            OnDrop::BlockInPlace => {
                ::tokio::task::block_in_place(|| drop(self.close_path(CloseControl::new())));
            }
        }
    }
}

/// Whether this thread runs inside a tokio runtime (feature `tokio`; never without it).
fn on_async_runtime() -> bool {
    #[cfg(feature = "tokio")]
    return ::tokio::runtime::Handle::try_current().is_ok();
    #[cfg(not(feature = "tokio"))]
    return false;
}
