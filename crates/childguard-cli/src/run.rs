//! `childguard run`: spawn CMD, wait for it or for a trigger, close it with the ladder the
//! trigger calls for, and exit as `timeout(1)` would.

use std::cell::{Cell, RefCell};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use childguard::{ChildHandle, CloseControl, CloseReport, Ladder, Rung, Signal, SocketMode};

use crate::activate;
use crate::args::RunOptions;
use crate::events::{Events, Woke};
use crate::exit_code;
use crate::messages::say;
use crate::received::Received;
use crate::timeline;
use crate::trigger::{self, Trigger};

/// A failure of childguard itself: the exit code and what to say.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) message: String,
}

impl From<childguard::Error> for Failure {
    fn from(e: childguard::Error) -> Failure {
        Failure {
            code: exit_code::FAILED,
            message: e.to_string(),
        }
    }
}

/// Runs CMD under `options`; returns the exit code.
pub fn run(options: &RunOptions) -> i32 {
    match supervise(options) {
        Ok(code) => code,
        Err(failure) => {
            say!("{}", failure.message);
            failure.code
        }
    }
}

fn supervise(options: &RunOptions) -> Result<i32, Failure> {
    let socket = match &options.activate {
        None => SocketMode::None,
        Some(name) => activate::socket_mode(name.clone()),
    };
    let mut events = Events::start(options.stop_on_stdin_eof).map_err(|e| Failure {
        code: exit_code::FAILED,
        message: format!("cannot listen for signals: {e}"),
    })?;
    if options.stdio_server {
        // Before the spawn: the parent is the one that started us.
        events.watch_host();
    }
    if let Some(restart) = &options.restart {
        return crate::restarting::run(options, restart.clone(), &events);
    }
    let mut handle = spawn(options, socket)?;
    activate::announce(&handle).map_err(|e| Failure {
        code: exit_code::FAILED,
        message: format!("cannot print the socket path: {e}"),
    })?;

    // A timeout too long for the clock (`--timeout inf`) is no deadline at all.
    let deadline = options
        .timeout
        .and_then(|after| Instant::now().checked_add(after));
    let trigger = match events.wait(&mut handle, deadline)? {
        Woke::Exited => None,
        Woke::Deadline => options.timeout.map(Trigger::Timeout),
        // timeout(1)'s own timer is SIGALRM: one sent to it is the timeout firing.
        Woke::Signal(received)
            if options.gnu_timeout && received.signal.as_raw() == libc::SIGALRM =>
        {
            Some(Trigger::Timeout(options.timeout.unwrap_or_default()))
        }
        Woke::Signal(received) => Some(signal_trigger(received, &handle, options)),
        Woke::StdinClosed => Some(Trigger::StdinClosed),
        Woke::ParentExited(pid) => Some(Trigger::ParentExited(pid)),
    };
    let report = match trigger {
        Some(trigger) => close_for(handle, &events, trigger, options)?,
        None => handle.close()?,
    };
    if let Some(format) = options.report {
        timeline::write(&report, format);
    }
    let left_running = report.handed_to_reaper && !wait_for_reaper(&report, &options.ladder);
    let timed_out = matches!(trigger, Some(Trigger::Timeout(_)));
    Ok(exit_code_for(&report, left_running, timed_out, options))
}

/// The trigger a received signal is: [`Trigger::Delivered`] when the terminal sent it to CMD
/// too (CMD shares our foreground process group: see `received`), so that one Ctrl-C reaches
/// CMD once. `childguard timeout` forwards it all the same, as GNU timeout(1) does: its
/// handler sends every signal it gets on to the child, so with `--foreground` (the child in
/// the terminal's group) a Ctrl-C reaches the child twice there too.
fn signal_trigger(received: Received, handle: &ChildHandle, options: &RunOptions) -> Trigger {
    if !options.gnu_timeout && received.reached(handle.id()) {
        Trigger::Delivered(received.signal)
    } else {
        Trigger::Signal(received.signal)
    }
}

/// Closes CMD for `trigger`: the library's close climbs [`trigger::plan`]'s ladder, and a
/// signal childguard receives meanwhile cuts the current wait short (the next rung goes out at
/// once: a second Ctrl-C escalates). With `-v`, each rung is announced as it is sent.
fn close_for(
    handle: ChildHandle,
    events: &Events,
    trigger: Trigger,
    options: &RunOptions,
) -> childguard::Result<CloseReport> {
    let plan = trigger::plan(&options.ladder, trigger, options.on_signal);
    let ladder = trigger::ladder(&plan);
    let started = Instant::now();
    let notes = RefCell::new(vec![format!("{}; ladder {ladder}", trigger.describe())]);
    // The wait a signal cuts short: the EOF wait, then each rung's grace.
    let current: Cell<Option<(usize, Rung)>> = Cell::new(None);
    let command = options.command[0].to_string_lossy().into_owned();
    let control = CloseControl::new()
        .ladder(ladder)
        .skip_when_readable(events.doorbell(), || {
            let signals = events.signals_arrived();
            let what = match current.get() {
                Some((index, rung)) => format!("rung {index} ({rung})"),
                None => "the EOF wait".into(),
            };
            for signal in &signals {
                let at = started.elapsed().as_secs_f64() * 1000.0;
                notes.borrow_mut().push(format!(
                    "SIG{signal} received at +{at:.1}ms: cut {what} short"
                ));
            }
            !signals.is_empty()
        })
        .on_rung(|index, rung| {
            current.set(Some((index, rung)));
            if options.verbose {
                // As timeout -v says it, before the signal goes out.
                say!("sending signal {} to command '{command}'", rung.signal);
            }
        });
    let mut report = handle.close_with(control)?;
    let mut all = notes.into_inner();
    all.append(&mut report.notes);
    report.notes = all;
    Ok(report)
}

/// The longest childguard waits, after the ladder, for the background reaper to see a CMD
/// that outlived it exit: the last rung's grace again, at least 1 s and at most 10 s.
fn reaper_wait(ladder: &Ladder) -> Duration {
    let last = ladder.rungs().last().map_or(Duration::ZERO, |r| r.grace);
    last.clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// CMD (or a `--group` member) outlived the ladder and `close()` handed it to the library's
/// background reaper, a thread of this process: it dies with us. So wait for it — bounded,
/// saying so — and return whether it was reaped. If not, the caller names the pid left.
fn wait_for_reaper(report: &CloseReport, ladder: &Ladder) -> bool {
    let program = report.program.as_deref().unwrap_or("CMD");
    let pid = report.pid.unwrap_or(0);
    let bound = reaper_wait(ladder);
    say!(
        "{program}[{pid}] outlived the ladder; waiting up to {} more for it to exit",
        humantime::format_duration(bound)
    );
    let deadline = childguard_deadline(bound);
    childguard::reaper::drain(deadline)
}

fn childguard_deadline(after: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(after).unwrap_or(now)
}

fn spawn(options: &RunOptions, socket: SocketMode) -> Result<ChildHandle, Failure> {
    builder(options, socket).spawn().map_err(|e| Failure {
        code: exit_code::for_spawn_error(&e),
        message: e.to_string(),
    })
}

/// CMD's builder as the options say (each start of `--restart` makes a new one).
pub(crate) fn builder(options: &RunOptions, socket: SocketMode) -> childguard::Builder {
    let mut command = Command::new(&options.command[0]);
    command.args(&options.command[1..]);
    // std resets SIGPIPE to its default in every child; timeout(1) passes on what it was
    // started with, so that `(trap '' PIPE; childguard run -- yes | :)` sees EPIPE.
    let ignore_sigpipe = childguard::sigpipe_ignored_at_start().unwrap_or(false);
    if options.stop_on_stdin_eof {
        // stdin is our lifeline; CMD must not eat it.
        command.stdin(Stdio::null());
    }
    let builder = ChildHandle::builder(command);
    #[cfg(target_os = "linux")]
    let builder = match &options.container_engine {
        Some(engine) => builder.container_engine(engine),
        None => builder,
    };
    // Refused when parsed elsewhere (`--container` needs Linux).
    #[cfg(not(target_os = "linux"))]
    let _ = &options.container_engine;
    builder
        .socket(socket)
        .ladder(options.ladder.clone())
        // The ladder's own flag (`--no-skip-ignored`, `NOSKIP,` in `--ladder`; timeout(1)'s
        // off unless asked) on the handle: the ladder a trigger climbs is rebuilt from rungs.
        .skip_ignored_rungs(options.ladder.skips_ignored())
        .process_group(options.group)
        .exit_with_parent(options.exit_with_parent)
        .contain(options.contain.clone().unwrap_or_default())
        .limits(options.limits.clone())
        .parent_death_signal(death_signal(&options.ladder))
        .ignore_sigpipe(ignore_sigpipe)
        // CMD's Command is built here, without a pre_exec hook: our own spawn can take it.
        .own_spawn(true)
}

/// The parent-death signal: the first rung's (as timeout(1) uses its `-s` signal), or the
/// first rung that sends one when the ladder starts with a `0` rung; `KILL` if none does.
fn death_signal(ladder: &Ladder) -> Signal {
    ladder
        .rungs()
        .iter()
        .map(|r| r.signal)
        .find(|&s| s != Signal::NONE)
        .unwrap_or(Signal::KILL)
}

/// 124 if the timeout fired (unless `--preserve-status`), else CMD's status; 125 (with a
/// message) when there is no status to give. `left_running`: CMD outlived the ladder and the
/// wait for the reaper; its pid is named.
pub(crate) fn exit_code_for(
    report: &CloseReport,
    left_running: bool,
    timed_out: bool,
    options: &RunOptions,
) -> i32 {
    let program = report.program.as_deref().unwrap_or("CMD");
    let pid = report.pid.unwrap_or(0);
    if left_running {
        say!("{program}[{pid}] is still running: left behind unreaped as pid {pid}");
    }
    // As systemd's `Result: oom-kill`: a KILL nobody here sent is named.
    if let Some(limits) = report.cgroup.as_ref().and_then(|cg| cg.limits.as_ref()) {
        if limits.result.is_some() {
            say!("{program}[{pid}]: {limits}");
        }
    }
    // timeout(1) after its timeout: a command that had to be KILLed gives 137 (timeout is in
    // the group it KILLs, or forces the status with --foreground), any other 124.
    let killed = report
        .status
        .and_then(|s| std::os::unix::process::ExitStatusExt::signal(&s))
        == Some(libc::SIGKILL);
    if timed_out && !options.preserve_status && !(options.gnu_timeout && killed) {
        return exit_code::TIMED_OUT;
    }
    match report.status {
        Some(status) => exit_code::from_status(status),
        // Named above when still running; otherwise it exited during the wait for the
        // reaper, which took its status.
        None if report.outlived_ladder => {
            if !left_running {
                say!("{program}[{pid}] exited after the ladder; its exit status was not kept");
            }
            exit_code::FAILED
        }
        None => {
            say!("{program}[{pid}]: exit status lost (reaped by someone else)");
            exit_code::FAILED
        }
    }
}
