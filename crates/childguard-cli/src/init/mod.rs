//! `childguard init`: a container's PID 1 — tini's behaviour (reap every zombie, forward every
//! signal, exit with CMD's status), plus the engine's stop done within a budget: the first
//! `TERM` (or `INT`) climbs CMD's ladder fitted to `--stop-budget`, then every process left in
//! the PID namespace gets what is left of it, and a report of who ended when goes to stderr.
//!
//! Run as `tini` (argv[0]'s file name) it is this, with tini's messages' program name.
//!
//! The pieces: `args` (tini's getopt and ours), `forward` (which signals, where), `reap`
//! (every zombie but CMD's, by pid), `stop` (fitting the ladder, the sweep), `ready` (the
//! ready file), `report` (the stop's lines on stderr); the signal mask and dispositions are
//! read and restored through `crate::sys`.

mod args;
mod forward;
mod ready;
mod reap;
mod report;
mod stop;

use std::ffi::OsString;
use std::process::Command;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, CloseControl, CloseReport, Containment, KillMode, Signal};

use crate::events::{Event, Events};
use crate::exit_code;
use crate::messages::{self, say};
use crate::sys::{self, SignalState};
use args::{InitOptions, Parsed};

/// tini's exit code for its own failures (a bad option, a failed set-up).
const FAILED: i32 = 1;

/// The whole of `childguard init ARGS` (or `tini ARGS`); returns the exit code.
pub fn main(args: Vec<OsString>, as_tini: bool) -> i32 {
    messages::set_program(if as_tini { "tini" } else { "childguard init" });
    let env = |name: &str| std::env::var_os(name);
    match args::parse(args, &env) {
        Ok(Parsed::Print(text)) => match messages::stdout(&text) {
            true => 0,
            false => FAILED,
        },
        Ok(Parsed::Run(options)) => run(*options),
        Err(err) => {
            say!("{err}");
            messages::raw_stderr(&format!("Try '{}' for more information.\n", err.hint()));
            FAILED
        }
    }
}

/// Why the main loop ended.
enum Ended {
    /// CMD exited on its own.
    Exited,
    /// A stop signal came.
    Stop(Signal),
}

fn run(o: InitOptions) -> i32 {
    // Before any thread exists: the mask read here is the one we were started with.
    let state = match SignalState::capture() {
        Ok(state) => state,
        Err(e) => return fail(format_args!("cannot read the signal mask: {e}")),
    };
    if let Err(e) = set_up_signals(&o) {
        return fail(format_args!("{e}"));
    }
    let pid1 = std::process::id() == 1;
    reaper_check(&o, pid1);
    let events = match Events::listen(&forward::listened(), false) {
        Ok(events) => events,
        Err(e) => return fail(format_args!("cannot listen for signals: {e}")),
    };
    let mut handle = match spawn(&o, state) {
        Ok(handle) => handle,
        Err(e) => {
            say!("{e}");
            return match exit_code::for_spawn_error(&e) {
                exit_code::FAILED => FAILED,
                code => code,
            };
        }
    };
    let cmd = handle.id();
    if o.verbosity > 1 {
        say!(
            "spawned child process {:?} with pid {}",
            o.command[0],
            cmd.unwrap_or(0)
        );
    }
    let ready = match (&o.ready, &o.ready_file) {
        (Some(to), Some(path)) => match ready::ReadyFile::watch(to.clone(), path.clone()) {
            Ok(watch) => Some(watch),
            Err(e) => {
                say!("cannot start the readiness watch: {e}");
                None
            }
        },
        _ => None,
    };
    let ended = match wait(&o, &events, &mut handle, cmd) {
        Ok(ended) => ended,
        Err(e) => {
            say!("{e}");
            Ended::Exited
        }
    };
    let started = Instant::now();
    if let Some(ready) = &ready {
        ready.withdraw();
    }
    // A failed close still goes on to the sweep: what is left must not wait for the engine.
    let report = match close(&o, &events, handle, &ended, cmd) {
        Ok(report) => Some(report),
        Err(e) => {
            say!("closing CMD failed: {e}");
            None
        }
    };
    // What is left — daemons CMD started, workers it orphaned — gets the rest of the budget.
    let mut left = stop::leftovers(pid1);
    let mut swept = None;
    if !left.is_empty() {
        let remaining = o.stop_budget.saturating_sub(started.elapsed());
        let signal = match ended {
            Ended::Stop(signal) => signal,
            Ended::Exited => o.ladder.rungs()[0].signal,
        };
        let ladder = stop::fit(&stop::starting_with(&o.ladder, signal), remaining);
        let took = stop::sweep(
            &mut left,
            &ladder,
            events.doorbell(),
            || events.signals_arrived().into_iter().any(forward::is_stop),
            || reap_and_warn(&o, None),
        );
        swept = Some((ladder, took));
    }
    reap_and_warn(&o, None);
    let Some(report) = report else {
        return FAILED;
    };
    let outcome = exit_status(&o, &report);
    let stopped = matches!(ended, Ended::Stop(_));
    if o.verbosity > 0 && (stopped || !left.is_empty() || !report.signals.is_empty()) {
        report::write(&report, &left, swept.as_ref(), started.elapsed(), pid1);
    }
    outcome
}

/// Says `message` and gives tini's failure code.
fn fail(message: std::fmt::Arguments<'_>) -> i32 {
    say!("{message}");
    FAILED
}

/// Every signal reaches us (the engine may have blocked some), `TTIN`/`TTOU` are ignored (we
/// give CMD's group the terminal, which makes us a background group), then the parent-death
/// signal and the subreaper bit, as tini sets them up.
fn set_up_signals(o: &InitOptions) -> Result<(), String> {
    sys::unblock_all().map_err(|e| format!("cannot unblock signals: {e}"))?;
    for signo in [libc::SIGTTIN, libc::SIGTTOU] {
        sys::ignore(signo).map_err(|e| format!("cannot ignore signal {signo}: {e}"))?;
    }
    if let Some(signal) = o.parent_death {
        let named = rustix::process::Signal::from_named_raw(signal.as_raw())
            .ok_or_else(|| format!("cannot use SIG{signal} as the parent-death signal"))?;
        rustix::process::set_parent_process_death_signal(Some(named))
            .map_err(|e| format!("cannot set the parent-death signal SIG{signal}: {e}"))?;
    }
    if o.subreaper {
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(|e| format!("cannot register as a child subreaper: {e}"))?;
    }
    Ok(())
}

/// Not PID 1 and not a subreaper: orphans go to someone else, and are not ours to reap.
fn reaper_check(o: &InitOptions, pid1: bool) {
    if pid1 || o.verbosity == 0 {
        return;
    }
    if matches!(rustix::process::child_subreaper(), Ok(Some(_))) {
        return;
    }
    say!(
        "not running as PID 1 and not registered as a child subreaper: orphaned processes \
         are re-parented to another process, so zombie reaping won't work. Use -s, or set \
         TINI_SUBREAPER or CHILDGUARD_SUBREAPER, or run as PID 1."
    );
}

/// CMD in a cgroup of its own where one can be made, else as it is: init is already the PID 1
/// of a namespace, whose sweep reaches whatever CMD leaves, so no other backend is wanted
/// here (a tree init would only stand between init and CMD).
fn spawn(o: &InitOptions, state: SignalState) -> childguard::Result<ChildHandle> {
    if !o.contain {
        return spawn_in(o, state, Containment::None);
    }
    match spawn_in(o, state, Containment::Cgroup) {
        Err(e) if e.kind() == childguard::ErrorKind::Containment => {
            spawn_in(o, state, Containment::None)
        }
        other => other,
    }
}

fn spawn_in(
    o: &InitOptions,
    state: SignalState,
    containment: Containment,
) -> childguard::Result<ChildHandle> {
    let mut command = Command::new(&o.command[0]);
    command.args(&o.command[1..]);
    let (ignored, blocked) = state.for_cmd();
    ChildHandle::builder(command)
        // CMD's Command is built here, without a pre_exec hook: our own spawn (clone3) takes
        // it, the start-up `init` exists for.
        .own_spawn(true)
        // tini's restore_signals: CMD starts with the signal state init was started with.
        .start_signals(&ignored, &blocked)
        // tini's isolate_child: CMD leads a group of its own, the terminal's foreground one.
        .foreground(true)
        .ladder(o.ladder.clone())
        // CMD leads its group either way (foreground); the rungs go to the group with -g.
        .process_group(o.kill_group)
        // A writable cgroup holds everything CMD starts; without one, a process group (and
        // the PID-namespace sweep afterwards).
        .contain(containment)
        // Every rung to every process in the cgroup (systemd's KillMode=control-group): the
        // daemons CMD left get the TERM too, so a stop ends as soon as all exit. With `Mixed`
        // they would get nothing before the KILL at the end of the budget.
        .kill_mode(KillMode::ControlGroup)
        // tini sets no parent-death signal on CMD: when PID 1 dies the kernel kills the
        // namespace; with -s, CMD outlives us as it would outlive tini.
        .exit_with_parent(false)
        .ignore_sigpipe(state.is_ignored(libc::SIGPIPE))
        .spawn()
}

/// Reaps the zombies that are not CMD, forwards signals, until CMD exits or a stop signal.
fn wait(
    o: &InitOptions,
    events: &Events,
    handle: &mut ChildHandle,
    cmd: Option<u32>,
) -> childguard::Result<Ended> {
    loop {
        // CMD first: once it exited, the zombies beside it are reaped after its close (the
        // last `reap_and_warn` of `run`), and `init -- true` reads no `children` file.
        if handle.try_wait()?.is_some() {
            return Ok(Ended::Exited);
        }
        reap_and_warn(o, cmd);
        match events.next(None) {
            Some(Event::Signal(received)) if forward::is_stop(received.signal) => {
                return Ok(Ended::Stop(received.signal))
            }
            Some(Event::Signal(received)) => {
                if let Some(pid) = cmd {
                    forward::forward(received.signal, pid, o.kill_group, o.verbosity);
                }
            }
            Some(Event::ChildChanged | Event::StdinClosed | Event::ParentExited(_)) | None => {}
        }
    }
}

/// Closes CMD: at once when it exited; on a stop, its ladder fitted to the budget, with the
/// stop signal as the first rung. Meanwhile a second stop signal skips to the next rung, any
/// other signal is forwarded, and zombies are reaped.
fn close(
    o: &InitOptions,
    events: &Events,
    handle: ChildHandle,
    ended: &Ended,
    cmd: Option<u32>,
) -> childguard::Result<CloseReport> {
    // CMD gone by itself: its cgroup (when contained) may still hold what it started, which
    // the close climbs the ladder over — fitted to the budget too.
    let ladder = match ended {
        Ended::Stop(signal) => stop::starting_with(&o.ladder, *signal),
        Ended::Exited => o.ladder.clone(),
    };
    let ladder = stop::fit(&ladder, o.stop_budget);
    let signal = ladder.rungs()[0].signal;
    if o.verbosity > 1 && matches!(ended, Ended::Stop(_)) {
        say!(
            "SIG{signal} received: stopping CMD with {ladder} (budget {:?})",
            o.stop_budget
        );
    }
    let control = CloseControl::new()
        .ladder(ladder)
        .skip_when_readable(events.doorbell(), || {
            let mut skip = false;
            for signal in events.signals_arrived() {
                if forward::is_stop(signal) {
                    skip = true;
                } else if let Some(pid) = cmd {
                    forward::forward(signal, pid, o.kill_group, o.verbosity);
                }
            }
            // SIGCHLD rang the bell too: orphans dying meanwhile are reaped here.
            reap_and_warn(o, cmd);
            skip
        });
    handle.close_with(control)
}

/// [`reap::reap_others`], with `-w`'s warning per zombie.
fn reap_and_warn(o: &InitOptions, cmd: Option<u32>) {
    for pid in reap::reap_others(cmd) {
        if o.warn_on_reap && o.verbosity > 0 {
            say!("Reaped zombie process with pid={pid}");
        }
    }
}

/// CMD's status as tini gives it: its code, 128+N for signal N, modulo 256, then `-e`'s map.
fn exit_status(o: &InitOptions, report: &CloseReport) -> i32 {
    let code = match report.status {
        Some(status) => exit_code::from_status(status) % 256,
        None => {
            say!("CMD's exit status is unknown (it outlived the ladder)");
            return FAILED;
        }
    };
    match o.expect.get(code as usize) {
        Some(true) => 0,
        _ => code,
    }
}

/// How long a stop took, for the report.
pub(crate) fn ms(d: Duration) -> String {
    format!("{:.1}ms", d.as_secs_f64() * 1000.0)
}
