//! One probe run: start the server fresh, wait until it is ready, start the client, send the
//! one signal to the server's main process, watch what happens for the window, then close
//! everything with a `KILL` ladder and check that nothing is left.
//!
//! Every mechanism is the library's: the spawn, the containment (a cgroup, or a process group
//! when none can be made), the readiness wait (also for the re-check after the signal), the
//! exit wait (the child's pidfd) and the close. What is read here directly is what the kernel
//! shows in `/proc` and the cgroup's `cgroup.procs`.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use childguard::{
    Capture, ChildHandle, CloseControl, Containment, ErrorKind, Ladder, Ready, Signal,
};

use super::observe;
use super::settle::Settled;
use super::ProbeOptions;

/// The close after each run.
const KILL_LADDER: &str = "KILL:5s";
/// How long the readiness condition is re-checked after a signal the server survived.
const RECHECK: Duration = Duration::from_secs(2);
/// How long, at least, members left in the cgroup when the main process exited are given to
/// go (or the rest of the window, if longer).
const SETTLE: Duration = Duration::from_millis(500);

/// What `/proc/PID/status` said about the signal just before it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// In `SigCgt`: a handler runs.
    Caught,
    /// In `SigIgn`.
    Ignored,
    /// Not caught, not ignored, but blocked in every thread (`SigBlk` of each task, e.g. read
    /// through a `signalfd`): it stays pending until the server unblocks or reads it.
    Blocked,
    /// None of these: the kernel's default action.
    Default,
}

impl Disposition {
    pub fn word(self) -> &'static str {
        match self {
            Disposition::Caught => "caught",
            Disposition::Ignored => "ignored",
            Disposition::Blocked => "blocked",
            Disposition::Default => "default",
        }
    }
}

/// What one run saw.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Without `--ready`: how the wait for the server to settle ended.
    pub settled: Option<Settled>,
    pub disposition: Disposition,
    /// The server's cgroup, or `None` when it ran uncontained (`fallback` says why).
    pub cgroup: Option<PathBuf>,
    pub fallback: Option<String>,
    /// Time from the signal to the main process's exit, if within the window.
    pub exited_after: Option<Duration>,
    pub status: Option<ExitStatus>,
    /// Not exited: whether the readiness condition held again (`None`: not re-checkable).
    pub kept_serving: Option<bool>,
    /// With notify readiness: whether `STOPPING=1` came.
    pub stopping: Option<bool>,
    /// Processes left in the cgroup when the main process exited, and after the settle wait.
    pub left_at_exit: usize,
    pub left_after_settle: usize,
    /// Time the `KILL` close took, when the server was still running at the close.
    pub kill_close: Option<Duration>,
    /// Whether something (a process, the cgroup) was left after the close.
    pub left_after_close: Option<String>,
}

/// One run of `signal`.
pub fn one_run(options: &ProbeOptions, signal: Signal) -> Result<RunResult, String> {
    let spawned = Instant::now();
    let mut handle = spawn_server(options)?;
    let pid = handle.id().ok_or("the server has no pid")?;
    let cgroup = contained_cgroup(pid);
    let settled = match options.ready.is_empty() {
        true => {
            let timeout = options.settle_timeout;
            match observe::wait_settled(&mut handle, pid, cgroup.as_deref(), spawned, timeout)? {
                Ok(settled) => Some(settled),
                Err(status) => return Err(exited_while_starting(handle, status)),
            }
        }
        false => None,
    };
    let client = match &options.client {
        Some((text, argv)) => {
            Some(spawn_client(options, argv).map_err(|e| format!("the client {text:?}: {e}"))?)
        }
        None => None,
    };
    let disposition = disposition(pid, signal)?;
    let sent = Instant::now();
    send(pid, signal)?;
    let waited = handle
        .wait_timeout(options.window)
        .map_err(|e| format!("waiting for the server's exit: {e}"))?;
    let exited_after = waited.map(|_| sent.elapsed());
    let (mut left_at_exit, mut left_after_settle) = (0, 0);
    if let (Some(_), Some(dir)) = (waited, &cgroup) {
        left_at_exit = observe::members(dir, pid).len();
        let settle = options.window.saturating_sub(sent.elapsed()).max(SETTLE);
        let deadline = Instant::now() + settle;
        left_after_settle = left_at_exit;
        while left_after_settle > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            left_after_settle = observe::members(dir, pid).len();
        }
    }
    let kept_serving = match waited {
        Some(_) => None,
        None => recheck(&ready_of(options)?),
    };
    let close_started = Instant::now();
    let report = handle
        .close_with(CloseControl::new().ladder(kill_ladder()))
        .map_err(|e| format!("closing the server with {KILL_LADDER}: {e}"))?;
    let kill_close = waited.is_none().then(|| close_started.elapsed());
    let mut left = Vec::new();
    if let Some(client) = client {
        if let Err(e) = client.close_with(CloseControl::new().ladder(kill_ladder())) {
            left.push(format!("the client: {e}"));
        }
    }
    if let Some(c) = &report.cgroup {
        if !c.removed || c.members_left > 0 {
            left.push(format!(
                "{} process(es) in {}",
                c.members_left,
                c.path.display()
            ));
        }
    }
    if report.status.is_none() {
        left.push(format!("the server [{pid}] was not reaped ({report})"));
    }
    if let Some(dir) = &cgroup {
        if dir.exists() {
            left.push(format!("the cgroup {} still exists", dir.display()));
        }
    }
    Ok(RunResult {
        settled,
        disposition,
        fallback: report.containment_fallback.clone(),
        cgroup,
        exited_after,
        status: waited,
        kept_serving,
        stopping: report.notify.as_ref().map(|n| n.stopping.is_some()),
        left_at_exit,
        left_after_settle,
        kill_close,
        left_after_close: (!left.is_empty()).then(|| left.join("; ")),
    })
}

/// The error for a server that exited before its signal, with the tail of its output.
fn exited_while_starting(handle: ChildHandle, status: ExitStatus) -> String {
    let tail = handle
        .close_with(CloseControl::new().ladder(kill_ladder()))
        .ok()
        .and_then(|report| report.output_tail)
        .unwrap_or_default();
    let tail = match tail.trim().is_empty() {
        true => String::new(),
        false => format!("; its output ends with:\n{}", tail.trim_end()),
    };
    format!("the server exited while starting, before any signal ({status}){tail}")
}

fn kill_ladder() -> Ladder {
    KILL_LADDER.parse().expect("the KILL ladder parses")
}

/// The server's one readiness condition (every `--ready` must hold), if any.
fn ready_of(options: &ProbeOptions) -> Result<Option<Ready>, String> {
    let mut all: Vec<Ready> = options.ready.iter().map(|(_, r)| r.clone()).collect();
    Ok(match all.len() {
        0 => None,
        1 => all.pop(),
        _ => Some(Ready::all(all)),
    })
}

fn as_user(command: &mut Command, options: &ProbeOptions) {
    if let Some((_, uid, gid)) = &options.user {
        command.uid(*uid).gid(*gid);
    }
}

fn spawn_server(options: &ProbeOptions) -> Result<ChildHandle, String> {
    let mut command = Command::new(&options.command[0]);
    command.args(&options.command[1..]).stdin(Stdio::null());
    as_user(&mut command, options);
    let mut builder = ChildHandle::builder(command)
        .contain(Containment::BestEffort)
        .process_group(true)
        .exit_with_parent(true)
        .ladder(kill_ladder())
        .capture(Capture::both());
    if let Some((_, uid, gid)) = &options.user {
        builder = builder.notify_owner(*uid, *gid);
    }
    if let Some(ready) = ready_of(options)? {
        builder = builder.ready(ready);
    }
    if let Some(timeout) = options.ready_timeout {
        builder = builder.ready_timeout(timeout);
    }
    builder.spawn().map_err(|e| e.to_string())
}

/// The client, in a process group of its own, ready by `--client-ready` when given.
fn spawn_client(options: &ProbeOptions, argv: &[String]) -> Result<ChildHandle, String> {
    let mut command = Command::new(&argv[0]);
    command.args(&argv[1..]).stdin(Stdio::null());
    as_user(&mut command, options);
    let mut builder = ChildHandle::builder(command)
        .process_group(true)
        .exit_with_parent(true)
        .ladder(kill_ladder())
        .capture(Capture::both());
    if let Some((_, ready)) = &options.client_ready {
        builder = builder.ready(ready.clone());
    }
    if let Some(timeout) = options.ready_timeout {
        builder = builder.ready_timeout(timeout);
    }
    builder.spawn().map_err(|e| e.to_string())
}

/// Sends `signal` to `pid` alone (not its group, not its cgroup). `pid` is our unreaped child,
/// so it cannot have been recycled.
fn send(pid: u32, signal: Signal) -> Result<(), String> {
    let target = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| format!("bad pid {pid}"))?;
    let sig = rustix::process::Signal::from_named_raw(signal.as_raw())
        .ok_or_else(|| format!("{signal} cannot be sent"))?;
    rustix::process::kill_process(target, sig).map_err(|e| format!("kill({pid}, {signal}): {e}"))
}

/// `SigIgn`/`SigCgt`/`SigBlk` of `pid` for `signal`.
pub fn disposition(pid: u32, signal: Signal) -> Result<Disposition, String> {
    let masks = observe::masks(pid)?;
    let bit = 1u64 << (signal.as_raw() - 1);
    Ok(if masks.ignored & bit != 0 {
        Disposition::Ignored
    } else if masks.caught & bit != 0 {
        Disposition::Caught
    } else if blocked_in_every_thread(pid, bit) {
        Disposition::Blocked
    } else {
        Disposition::Default
    })
}

/// Whether every thread of `pid` blocks the signal of `bit` (a process-directed signal goes to
/// any thread that does not block it, so the main thread's mask alone says nothing).
fn blocked_in_every_thread(pid: u32, bit: u64) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for task in tasks.flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let blocked = status
            .lines()
            .find_map(|l| l.strip_prefix("SigBlk:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok());
        match blocked {
            Some(mask) if mask & bit != 0 => any = true,
            // A thread that exited meanwhile (no status) does not count.
            None => {}
            Some(_) => return false,
        }
    }
    any
}

/// The cgroup v2 directory `pid` is in, when it is one the library made for it.
fn contained_cgroup(pid: u32) -> Option<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let name = path.rsplit('/').next()?;
    if !name.starts_with("childguard-") {
        return None;
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = info.lines().find_map(|l| {
        let (before, after) = l.split_once(" - ")?;
        (after.split(' ').next()? == "cgroup2")
            .then(|| before.split(' ').nth(4).map(PathBuf::from))?
    })?;
    Some(mount.join(path.trim_start_matches('/')))
}

/// Whether `ready` holds again (within [`RECHECK`]), through the library's own readiness wait:
/// a placeholder child (this program's slowserver, idle) is spawned with the condition, which
/// for `tcp:`, `unix:`, `http:` and `exec:` is about the server, not the placeholder.
/// `notify` and `line:` are about the spawned process itself: not re-checkable (`None`).
fn recheck(ready: &Option<Ready>) -> Option<bool> {
    let condition = checkable(ready.as_ref()?)?;
    let exe = std::env::current_exe().ok()?;
    let mut command = Command::new(exe);
    command
        .args([crate::SLOWSERVER_SUBCOMMAND, "--ignore-eof"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let spawned = ChildHandle::builder(command)
        .exit_with_parent(true)
        .ladder(kill_ladder())
        .ready(condition)
        .ready_timeout(RECHECK)
        .spawn();
    match spawned {
        Ok(handle) => {
            let _ = handle.close();
            Some(true)
        }
        // The ready timeout passed (the placeholder was closed: the error carries its report).
        Err(e) if e.kind() == ErrorKind::Ready && e.close_report().is_some() => Some(false),
        // The placeholder itself failed (it exited: this program cannot run its fixture):
        // nothing was learnt about the server.
        Err(_) => None,
    }
}

/// The parts of a condition that are about the server as seen from outside.
fn checkable(ready: &Ready) -> Option<Ready> {
    match ready {
        Ready::Connect(_) | Ready::Http(_) | Ready::Exec(_) => Some(ready.clone()),
        Ready::All(parts) => {
            let parts: Vec<Ready> = parts.iter().filter_map(checkable).collect();
            (!parts.is_empty()).then(|| Ready::all(parts))
        }
        Ready::Any(parts) => {
            let parts: Vec<Ready> = parts.iter().filter_map(checkable).collect();
            (!parts.is_empty()).then(|| Ready::any(parts))
        }
        _ => None,
    }
}
