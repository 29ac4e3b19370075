//! `childguard run`: spawn CMD, wait for it or for a trigger, climb the ladder, close, and
//! exit as `timeout(1)` would.

use std::process::{Command, Stdio};
use std::time::Instant;

use childguard::{ChildHandle, CloseReport, SocketMode};

use crate::activate;
use crate::args::RunOptions;
use crate::escalation::{self, Trigger};
use crate::events::{Events, Woke};
use crate::exit_code;
use crate::timeline;

/// A failure of childguard itself: the exit code and what to say.
#[derive(Debug)]
struct Failure {
    code: i32,
    message: String,
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
            eprintln!("childguard: {}", failure.message);
            failure.code
        }
    }
}

fn supervise(options: &RunOptions) -> Result<i32, Failure> {
    let socket = match &options.activate {
        None => SocketMode::None,
        Some(name) => activate::socket_mode(name.clone()),
    };
    let events = Events::start(options.stop_on_stdin_eof).map_err(|e| Failure {
        code: exit_code::FAILED,
        message: format!("cannot listen for signals: {e}"),
    })?;
    let mut handle = spawn(options, socket)?;
    activate::announce(&handle).map_err(|e| Failure {
        code: exit_code::FAILED,
        message: format!("cannot print the socket path: {e}"),
    })?;

    let deadline = options.timeout.map(|after| Instant::now() + after);
    let trigger = match events.wait(&mut handle, deadline)? {
        Woke::Exited => None,
        Woke::Deadline => options.timeout.map(Trigger::Timeout),
        Woke::Signal(signal) => Some(Trigger::Signal(signal)),
        Woke::StdinClosed => Some(Trigger::StdinClosed),
    };
    let climbed = match trigger {
        Some(trigger) => Some(escalation::climb(
            &mut handle,
            &events,
            &options.ladder,
            trigger,
            options.group,
        )?),
        None => None,
    };
    let close_started = Instant::now();
    let report = handle.close()?;
    let report = match &climbed {
        Some(climbed) => timeline::rebase(report, climbed, close_started),
        None => report,
    };
    if let Some(format) = options.report {
        timeline::write(&report, format);
    }
    let timed_out = climbed.as_ref().is_some_and(|c| c.timed_out);
    Ok(exit_code_for(&report, timed_out, options.preserve_status))
}

fn spawn(options: &RunOptions, socket: SocketMode) -> Result<ChildHandle, Failure> {
    let mut command = Command::new(&options.command[0]);
    command.args(&options.command[1..]);
    if options.stop_on_stdin_eof {
        // stdin is our lifeline; CMD must not eat it.
        command.stdin(Stdio::null());
    }
    ChildHandle::builder(command)
        .socket(socket)
        .ladder(options.ladder.clone())
        .process_group(options.group)
        .exit_with_parent(options.exit_with_parent)
        .contain(match options.contain {
            true => childguard::Containment::Cgroup,
            false => childguard::Containment::None,
        })
        .spawn()
        .map_err(|e| Failure {
            code: exit_code::for_spawn_error(&e),
            message: e.to_string(),
        })
}

/// 124 if the timeout fired (unless `--preserve-status`), else CMD's status; 125 (with a
/// message) when there is no status to give.
fn exit_code_for(report: &CloseReport, timed_out: bool, preserve_status: bool) -> i32 {
    let program = report.program.as_deref().unwrap_or("CMD");
    let pid = report.pid.unwrap_or(0);
    if report.outlived_ladder {
        eprintln!("childguard: {program}[{pid}] outlived the ladder and may still be running");
    }
    if timed_out && !preserve_status {
        return exit_code::TIMED_OUT;
    }
    match report.status {
        Some(status) => exit_code::from_status(status),
        None if report.outlived_ladder => exit_code::FAILED,
        None => {
            eprintln!("childguard: {program}[{pid}]: exit status lost (reaped by someone else)");
            exit_code::FAILED
        }
    }
}
