//! `childguard run --restart on-failure|always`: CMD under the library's `Supervisor` (the one
//! restart mechanism: delays on the event loop's timers, the crash-loop limit, each start's
//! close). childguard waits for a trigger — the timeout, a signal, stdin closing — or for the
//! supervision to end (no restart by the policy, or the crash-loop limit), then closes it.
//!
//! Where this differs from a plain `run`: a trigger closes the running start with the ladder
//! as written (a signal received is not forwarded as the first rung: the supervisor owns the
//! handle); `--activate` and `--stdio-server` are refused with `--restart`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use childguard::{Restart, SocketMode, Supervisor};

use crate::args::RunOptions;
use crate::events::{Event, Events};
use crate::exit_code;
use crate::messages::say;
use crate::run::{builder, exit_code_for, Failure};
use crate::timeline;

/// Sets `sup` to raise a `SIGCHLD` of our own when its supervision ends, and returns the flag
/// it sets then. The end is decided on the library's loop thread after the `SIGCHLD` of the
/// exit that ended it woke our wait: without a second one, a wait that looked before the
/// decision would sleep on (a lost wake-up). `run --restart` and `with` wait this way.
pub(crate) fn wake_on_end(sup: &Supervisor) -> Arc<AtomicBool> {
    let ended = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ended);
    sup.on_end(move || {
        flag.store(true, Ordering::SeqCst);
        let _ = rustix::process::kill_process(
            rustix::process::getpid(),
            rustix::process::Signal::CHILD,
        );
    });
    ended
}

/// Runs CMD restarting as `restart` says; returns the exit code.
pub(crate) fn run(options: &RunOptions, restart: Restart, events: &Events) -> Result<i32, Failure> {
    let opts = options.clone();
    let sup =
        Supervisor::start(move || builder(&opts, SocketMode::None), restart).map_err(|e| {
            Failure {
                code: exit_code::for_spawn_error(&e),
                message: e.to_string(),
            }
        })?;
    let ended = wake_on_end(&sup);
    let program = options.command[0].to_string_lossy().into_owned();
    sup.on_change(move |generation| say!("restarting {program}: start {generation}"));
    let deadline = options
        .timeout
        .and_then(|after| Instant::now().checked_add(after));
    let timed_out = loop {
        if ended.load(Ordering::SeqCst) || sup.ended() {
            break false;
        }
        match events.next(deadline) {
            None => break true,
            Some(Event::ChildChanged) => {}
            Some(Event::Signal(_) | Event::StdinClosed | Event::ParentExited(_)) => break false,
        }
    };
    let report = sup.close()?;
    let last = report.last.as_ref().or(report.previous.last());
    if let (Some(format), Some(last)) = (options.report, last) {
        timeline::write(last, format);
    }
    if report.restarts > 0 {
        say!(
            "{}: restarted {} time(s)",
            options.command[0].to_string_lossy(),
            report.restarts
        );
    }
    if let Some(why) = &report.gave_up {
        say!("{}: {why}", options.command[0].to_string_lossy());
        return Ok(exit_code::FAILED);
    }
    Ok(match last {
        Some(last) => exit_code_for(last, false, timed_out, options),
        None => exit_code::FAILED,
    })
}
