//! The [`Builder`] of a [`ChildHandle`] and its options: how the child is connected
//! ([`SocketMode`]), who climbs the end of the ladder ([`Reap`]), containment, capture,
//! readiness. What [`Builder::spawn`] does with them is in `spawn.rs`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::base::signal::Signal;
use crate::close::ladder::Ladder;
use crate::core::wait::Interrupt;
use crate::handle::readiness::{self, NotifyAccess, Ready};
use crate::process::containment::limits::Limits;
use crate::process::containment::{Containment, KillMode};
use crate::spawn::capture::Capture;

// Named by the docs only.
#[cfg(doc)]
use {
    crate::close::report::CloseReport,
    crate::error::ErrorKind,
    crate::handle::ChildHandle,
    std::{io, os::unix::net::UnixStream},
};

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
    pub(super) command: Command,
    pub(super) socket: SocketMode,
    /// `None`: [`Ladder::default()`], built at spawn (most callers set their own).
    pub(super) ladder: Option<Ladder>,
    pub(super) process_group: bool,
    pub(super) exit_with_parent: bool,
    pub(super) death_signal: Signal,
    pub(super) ignore_sigpipe: bool,
    /// `None`: not chosen (std's path, unless `CHILDGUARD_SPAWN=clone3`).
    pub(super) own_spawn: Option<bool>,
    pub(super) start_signals: crate::sys::StartSignals,
    /// `None`: not chosen (`Reap::Blocking`, but `Background` on a drop in a tokio context).
    pub(super) reap: Option<Reap>,
    pub(super) portable: bool,
    pub(super) release_memory: bool,
    pub(super) skip_ignored: bool,
    pub(super) connect_timeout: Duration,
    pub(super) runtime_dir: Option<PathBuf>,
    pub(super) capture: Option<Capture>,
    pub(super) containment: Containment,
    pub(super) kill_mode: KillMode,
    pub(super) cgroup_parent: Option<PathBuf>,
    /// [`Builder::container_engine`] (`handle/container.rs`).
    #[cfg(target_os = "linux")]
    pub(super) container_engine: Option<std::ffi::OsString>,
    /// [`Builder::limits`].
    pub(super) limits: Limits,
    pub(super) ready: Option<Ready>,
    pub(super) ready_timeout: Duration,
    pub(super) notify_extend_max: Duration,
    pub(super) notify_owner: Option<(u32, u32)>,
    pub(super) notify_access: NotifyAccess,
    /// [`Builder::watchdog`].
    pub(super) watchdog: Option<Duration>,
    /// [`Builder::on_watchdog`].
    pub(super) on_watchdog: Option<readiness::OnWatchdog>,
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

    /// The signal dispositions and mask the program starts with: each signal in `ignored`
    /// starts ignored, every other at its default, and the mask is `blocked` (default: as std
    /// leaves them — only `SIGPIPE` back at its default, nothing blocked, what this process
    /// ignores still ignored). For a wrapper that passes on what it was started with, as tini's
    /// `restore_signals` and `childguard init` do. [`ignore_sigpipe`](Builder::ignore_sigpipe)
    /// keeps `SIGPIPE` ignored whatever `ignored` says. Made in the child right before its
    /// exec, on both spawn paths (on std's it costs a `fork`). Without it the mask is still
    /// cleared on both: std would pass the spawning thread's on, so on std's path a thread
    /// that blocks signals (one reading them from a `signalfd`) costs that `fork` too.
    pub fn start_signals(mut self, ignored: &[Signal], blocked: &[Signal]) -> Builder {
        let mask = |set: &[Signal]| {
            set.iter()
                .map(|s| s.as_raw())
                .filter(|n| (1..=64).contains(n))
                .fold(0u64, |m, n| m | 1 << (n - 1))
        };
        self.start_signals.dispositions = Some((mask(ignored), mask(blocked)));
        self
    }

    /// Start the program as the foreground job of the terminal on its stdin (default off): it
    /// leads a process group of its own, which it makes the terminal's foreground group
    /// (`tcsetpgrp(3)`; no terminal on stdin is fine), so that Ctrl-C and the terminal's other
    /// signals reach it, as a shell does for a foreground job (and `childguard init`, as
    /// tini's `isolate_child`). The ladder still targets the process, or its group with
    /// [`process_group`](Builder::process_group). On both spawn paths.
    pub fn foreground(mut self, on: bool) -> Builder {
        self.start_signals.foreground = on;
        self
    }

    /// Spawn with childguard's own spawn (default off): `clone3(2)` with `CLONE_VM |
    /// CLONE_VFORK` (no page table copied, however large this process), the child's pidfd at
    /// its birth, and with [`contain`](Builder::contain) the cgroup at its birth
    /// (`CLONE_INTO_CGROUP`: no `cgroup.procs` write, which waits an RCU grace period — the
    /// most of a contained spawn's cost). `childguard run`, `with`, `timeout`, `init`, the C
    /// library and the Python package turn it on.
    ///
    /// **Why it is not the default for your Command**: std keeps a Command's `pre_exec` hooks
    /// where no one can see them, so our spawn cannot run them, nor even know they are there.
    /// Turn this on only for a Command without a `pre_exec` hook of its own (the builder's own
    /// settings — [`exit_with_parent`](Builder::exit_with_parent),
    /// [`ignore_sigpipe`](Builder::ignore_sigpipe), activation, containment — are all made by
    /// our spawn).
    ///
    /// What it honours: the program (found in the `PATH` the child will have, as `execvp`
    /// does), args, `arg0`, env (`env_clear` included), `current_dir`, stdio of every kind and
    /// `process_group`. A Command that sets anything else (`uid`, `gid`, `groups`, `chroot`)
    /// is spawned by std, as is every spawn on a host where `clone3` cannot be used (no
    /// `clone3`, an older kernel, a seccomp profile, a cgroup a process cannot be born in):
    /// the first such failure sends every later spawn of the process to std at once. Not on a
    /// target other than Linux x86_64. The environment variable `CHILDGUARD_SPAWN=std` forces
    /// std's path for every builder; `CHILDGUARD_SPAWN=clone3` ours for every builder that did
    /// not call this.
    pub fn own_spawn(mut self, on: bool) -> Builder {
        self.own_spawn = Some(on);
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
    /// private socket directory is made (default `$XDG_RUNTIME_DIR`, else `/tmp`). At
    /// `spawn()` it is resolved (absolute, no `..` nor symlink: libsystemd refuses a relative
    /// `NOTIFY_SOCKET`) and trusted only if nobody but root and us can change it — ours and
    /// not group/other-writable, or sticky and root's like `/tmp`, every directory on the way
    /// root's or ours — else an [`ErrorKind::Config`] error naming its owner and mode. (An
    /// unsafe `$XDG_RUNTIME_DIR` is passed over for `/tmp`, said by a `tracing` debug event.)
    /// Everything in it is then made and removed through fds: docs/security.md. The socket
    /// path must fit `sun_path`.
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
    /// e.g. postgres): the socket file becomes `uid:gid`'s (0600, `fchownat` in the directory
    /// we hold) so the child can send on it; the directory stays ours, 0711 — another user
    /// never owns a directory we work in. Needs root. Default: owned by us.
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

    /// With [`Ready::Notify`]: systemd's watchdog (`WatchdogSec=`). The child gets
    /// `WATCHDOG_USEC` (microseconds) and `WATCHDOG_PID` (its own pid, as systemd sets it, so
    /// libsystemd's `sd_watchdog_enabled(3)` answers yes in the child and no in the processes
    /// it forks; written by the child between fork and exec, through our own exec, so a spawn
    /// with a watchdog always forks) and must send
    /// `WATCHDOG=1` on its `NOTIFY_SOCKET` at least every `interval` once it is ready. From
    /// readiness on, a deadline without one — or a `WATCHDOG=trigger` — is a miss: the server
    /// is closed with its ladder in the background (or [`on_watchdog`](Builder::on_watchdog)
    /// is called instead), [`ChildHandle::watchdog_missed`] says so, and so does the close
    /// report ("watchdog missed at +X ms", [`NotifyReport::watchdog`](crate::NotifyReport::watchdog)).
    /// `WATCHDOG_USEC=` sent by the child changes the interval from then on (0 turns it off),
    /// as with systemd. The deadline is a timer of the library's one event loop, which reads the
    /// notify socket from readiness on: no thread of its own. A zero `interval` is refused.
    pub fn watchdog(mut self, interval: Duration) -> Builder {
        self.watchdog = Some(interval);
        self
    }

    /// With [`watchdog`](Builder::watchdog): on a miss, call `f` (on a thread started for that
    /// one call, never the event loop's) instead of closing the server. The handle stays as it
    /// is: close it, or let the server be, as `f` decides through your own state.
    pub fn on_watchdog(
        mut self,
        f: impl Fn(crate::WatchdogMiss) + Send + Sync + 'static,
    ) -> Builder {
        self.on_watchdog = Some(readiness::OnWatchdog(std::sync::Arc::new(f)));
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

    /// Skip a rung whose signal the server ignores (default on; Linux): right before each
    /// catchable rung but the last, the close reads the server's `SigIgn` in
    /// `/proc/PID/status`, and a rung it ignores is skipped at once — its grace not spent —
    /// rather than sent and waited out (redis ignores `SIGHUP`: the default ladder closes it in
    /// ~2 ms, at most ~0.1 s, instead of 1 s). [`CloseReport::skipped`](crate::CloseReport::skipped)
    /// lists the skipped rungs. `false`: every rung is sent as written. A rung is skipped only if
    /// the ladder allows it too ([`Ladder::skip_ignored`], `NOSKIP` in its text), on every
    /// close of the handle: blocking, background, async, `output()`, `close_with`.
    pub fn skip_ignored_rungs(mut self, on: bool) -> Builder {
        self.skip_ignored = on;
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
    ///   `populated 0`, woken by its `POLLPRI`), not when the child exits; the child is reaped and
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

    /// With [`contain`](Builder::contain): resource limits on the child's cgroup, systemd's
    /// `MemoryMax=`, `MemoryHigh=`, `TasksMax=`, `CPUQuota=` (see [`Limits`]). They are
    /// written before the child is spawned, so it never runs without them; on a hybrid host
    /// (controllers on cgroup v1) the child also gets a cgroup of the same name in each v1
    /// hierarchy it needs, removed with the v2 one. `spawn()` fails with
    /// [`ErrorKind::Containment`](crate::ErrorKind::Containment) naming the limit, the file
    /// and why when one cannot be applied (never a silent no-op), and with
    /// [`ErrorKind::Config`](crate::ErrorKind::Config) without containment;
    /// [`Containment::BestEffort`] does not fall back when limits are set. What the kernel did
    /// under them — the OOM killer (`oom-kill`), throttling, the peak usage — is in
    /// [`CgroupReport::limits`](crate::CgroupReport::limits).
    pub fn limits(mut self, limits: Limits) -> Builder {
        self.limits = limits;
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
}
