//! The ladder as `run` climbs it: which rungs a trigger leads to ([`plan`]), and climbing them
//! with [`ChildHandle::kill`] while listening for a second Ctrl-C ([`climb`]).
//!
//! `run` climbs itself instead of calling `close()` at once because the climb must stay
//! interruptible: a signal received mid-rung cuts that rung's grace short. `close()` follows
//! and takes over what is left (reaping; the rest of the ladder for `--group` members).

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant, SystemTime};

use childguard::{ChildHandle, Ending, Ladder, Rung, SentSignal, Signal};

use crate::args::OnSignal;
use crate::events::{Events, Woke};
use crate::messages::say;

/// What started the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// `--timeout` expired.
    Timeout(Duration),
    /// childguard received this signal.
    Signal(Signal),
    /// stdin closed (`--stop-on-stdin-eof`).
    StdinClosed,
}

impl Trigger {
    fn describe(self) -> String {
        match self {
            Trigger::Timeout(after) => {
                format!("timeout {} expired", humantime::format_duration(after))
            }
            Trigger::Signal(signal) => format!("childguard received SIG{signal}"),
            Trigger::StdinClosed => "stdin closed".into(),
        }
    }
}

/// The rungs a trigger leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Wait this long for CMD to exit before the first signal (the ladder's `EOF:` item).
    pub eof_wait: Option<Duration>,
    /// The rungs, in order.
    pub rungs: Vec<Rung>,
}

/// The signals forwarded to CMD (with `--on-signal forward`) besides those the ladder names.
const FORWARDED: [Signal; 6] = [
    Signal::INT,
    Signal::TERM,
    Signal::HUP,
    Signal::QUIT,
    Signal::USR1,
    Signal::USR2,
];

/// Whether a received `signal` is forwarded to CMD (else it climbs the ladder as written).
pub fn forwards(ladder: &Ladder, on_signal: OnSignal, signal: Signal) -> bool {
    on_signal == OnSignal::Forward
        && (FORWARDED.contains(&signal) || ladder.rungs().iter().any(|r| r.signal == signal))
}

/// The ladder for `trigger`. A forwarded signal (see [`forwards`]) goes out at once, in place
/// of the first rung's signal and with its grace; the ladder then goes on from its second
/// rung. (A one-rung ladder keeps its rung after the forwarded signal, unless it sends that
/// signal.) Every other trigger climbs the ladder as written.
pub fn plan(ladder: &Ladder, trigger: Trigger, on_signal: OnSignal) -> Plan {
    let as_written = || Plan {
        eof_wait: ladder.eof_grace(),
        rungs: ladder.rungs().to_vec(),
    };
    let Trigger::Signal(received) = trigger else {
        return as_written();
    };
    if !forwards(ladder, on_signal, received) {
        return as_written();
    }
    let rungs = ladder.rungs();
    let forwarded = Rung::new(received, rungs[0].grace);
    let rest = match rungs {
        [only] if only.signal != received => rungs,
        _ => &rungs[1..],
    };
    Plan {
        eof_wait: None,
        rungs: std::iter::once(forwarded)
            .chain(rest.iter().copied())
            .collect(),
    }
}

/// What the climb did, with offsets from its start (the trigger).
#[derive(Debug, Clone)]
pub struct Climbed {
    /// When the trigger fired.
    pub started: Instant,
    /// The same moment on the wall clock.
    pub started_wall: SystemTime,
    /// When our socket (`--activate`) was shut down.
    pub shutdown: Option<Duration>,
    /// Signals sent, with indices into [`Plan::rungs`].
    pub sent: Vec<SentSignal>,
    /// When CMD's exit was seen (`None`: it outlived the climb).
    pub exited: Option<Duration>,
    /// What ended CMD, if it exited.
    pub ended_by: Option<Ending>,
    /// Plan index minus ladder index for the rungs both share (for rungs `close()` sends).
    pub rung_offset: usize,
    /// Trigger and skips, for the report's notes.
    pub notes: Vec<String>,
    /// Whether `--timeout` started it.
    pub timed_out: bool,
    /// Whether the plan began with an EOF wait.
    eof_waited: bool,
}

/// Climbs the [`plan`] for `trigger` on `handle` (whose ladder is `ladder`), starting now.
/// `to_group`: the handle signals CMD's process group (`--group`).
pub fn climb(
    handle: &mut ChildHandle,
    events: &Events,
    ladder: &Ladder,
    trigger: Trigger,
    on_signal: OnSignal,
    to_group: bool,
    verbose: Option<String>,
) -> childguard::Result<Climbed> {
    let plan = plan(ladder, trigger, on_signal);
    let started = Instant::now();
    let mut climbed = Climbed {
        started,
        started_wall: SystemTime::now(),
        shutdown: None,
        sent: Vec::new(),
        exited: None,
        ended_by: None,
        rung_offset: plan.rungs.len() - ladder.rungs().len(),
        notes: vec![format!("{}; ladder {}", trigger.describe(), show(&plan))],
        timed_out: matches!(trigger, Trigger::Timeout(_)),
        eof_waited: plan.eof_wait.is_some(),
    };
    // As in close(): the socket first, so a server blocked on it wakes up (--activate).
    if let Some(socket) = handle.socket() {
        shut_down(socket);
        climbed.shutdown = Some(started.elapsed());
    }
    if let Some(grace) = plan.eof_wait {
        let deadline = far(started, grace);
        if let Some(at) = wait_out(handle, events, deadline, &mut climbed, "the EOF wait")? {
            return Ok(climbed.ended(at, Ending::Eof));
        }
    }
    for (index, rung) in plan.rungs.iter().enumerate() {
        if handle.try_wait()?.is_some() {
            // Exited just before this rung: the previous step ended it.
            let ending = climbed.previous_step();
            return Ok(climbed.ended(started.elapsed(), ending));
        }
        if let Some(command) = &verbose {
            // As timeout -v says it, before the signal goes out.
            say!("sending signal {} to command '{command}'", rung.signal);
        }
        let at = started.elapsed();
        // Sends the signal (and CONT); `Some` if CMD is already gone right after (KILL).
        let gone = handle.kill(rung.signal, Duration::ZERO)?.is_some();
        climbed
            .sent
            .push(SentSignal::new(rung.signal, at, index, to_group));
        let exited = match gone {
            true => Some(started.elapsed()),
            false => {
                let what = format!("rung {index} ({rung})");
                let deadline = far(Instant::now(), rung.grace);
                wait_out(handle, events, deadline, &mut climbed, &what)?
            }
        };
        if let Some(at) = exited {
            let ending = Ending::Rung {
                index,
                signal: rung.signal,
            };
            return Ok(climbed.ended(at, ending));
        }
    }
    Ok(climbed)
}

impl Climbed {
    /// Records CMD's exit, seen at `at`, and what ended it.
    fn ended(mut self, at: Duration, ending: Ending) -> Climbed {
        self.exited = Some(at);
        self.ended_by = Some(ending);
        self
    }

    /// What ended CMD if it is found gone before the next rung: the last signal sent; else
    /// the socket shutdown or EOF wait; else nothing of ours (e.g. the terminal's Ctrl-C
    /// reached CMD directly).
    fn previous_step(&self) -> Ending {
        match self.sent.last() {
            Some(sent) => Ending::Rung {
                index: sent.rung,
                signal: sent.signal,
            },
            None if self.shutdown.is_some() || self.eof_waited => Ending::Eof,
            None => Ending::BeforeClose,
        }
    }
}

/// Waits until `deadline` for CMD to exit; a received signal ends the wait early (and is
/// noted). Returns when CMD's exit was seen, if it was.
fn wait_out(
    handle: &mut ChildHandle,
    events: &Events,
    deadline: Instant,
    climbed: &mut Climbed,
    what: &str,
) -> childguard::Result<Option<Duration>> {
    loop {
        match events.wait(handle, Some(deadline))? {
            Woke::Exited => return Ok(Some(climbed.started.elapsed())),
            Woke::Deadline => return Ok(None),
            Woke::Signal(signal) => {
                let at = climbed.started.elapsed();
                climbed.notes.push(format!(
                    "SIG{signal} received at +{:.1}ms: cut {what} short",
                    at.as_secs_f64() * 1000.0
                ));
                return Ok(None);
            }
            // Only a trigger before the ladder; now it changes nothing.
            Woke::StdinClosed => {}
        }
    }
}

/// `at + wait`, or a century from `at` when that overflows the clock (`-k inf`).
fn far(at: Instant, wait: Duration) -> Instant {
    at.checked_add(wait)
        .or_else(|| at.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(at)
}

fn shut_down(socket: &UnixStream) {
    // ENOTCONN (CMD already gone) is harmless; close() shuts down again and says so if not.
    let _ = socket.shutdown(std::net::Shutdown::Both);
}

/// The plan in ladder syntax, e.g. `INT:1s,TERM:2s,KILL:5s`.
fn show(plan: &Plan) -> String {
    match Ladder::new(plan.rungs.iter().copied()) {
        Ok(ladder) => match plan.eof_wait {
            Some(grace) => ladder.with_eof_grace(grace).to_string(),
            None => ladder.to_string(),
        },
        Err(_) => String::from("(no rungs)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rungs(text: &str) -> Vec<Rung> {
        text.parse::<Ladder>().unwrap().rungs().to_vec()
    }

    #[test]
    fn timeout_and_stdin_climb_the_ladder_as_written() {
        let ladder: Ladder = "EOF:50ms,HUP:1s,KILL".parse().unwrap();
        let fw = OnSignal::Forward;
        let p = plan(&ladder, Trigger::Timeout(Duration::from_secs(1)), fw);
        assert_eq!(p.eof_wait, Some(Duration::from_millis(50)));
        assert_eq!(p.rungs, ladder.rungs());
        assert_eq!(plan(&ladder, Trigger::StdinClosed, fw), p);
        // A signal that is not forwarded, or any signal with --on-signal ladder.
        let alrm = Signal::from_raw(libc::SIGALRM).unwrap();
        assert_eq!(plan(&ladder, Trigger::Signal(alrm), fw), p);
        let ladder_mode = plan(&ladder, Trigger::Signal(Signal::TERM), OnSignal::Ladder);
        assert_eq!(ladder_mode, p);
    }

    #[test]
    fn a_received_signal_takes_the_first_rungs_place() {
        let ladder: Ladder = "EOF:50ms,HUP:1s,TERM:2s,KILL:5s".parse().unwrap();
        let p = plan(&ladder, Trigger::Signal(Signal::INT), OnSignal::Forward);
        assert_eq!(p.eof_wait, None, "a forwarded signal goes out at once");
        assert_eq!(p.rungs, rungs("INT:1s,TERM:2s,KILL:5s"));
        let p = plan(&ladder, Trigger::Signal(Signal::HUP), OnSignal::Forward);
        assert_eq!(p.rungs, rungs("HUP:1s,TERM:2s,KILL:5s"));
        let p = plan(&ladder, Trigger::Signal(Signal::QUIT), OnSignal::Forward);
        assert_eq!(p.rungs, rungs("QUIT:1s,TERM:2s,KILL:5s"));
        let rt = Signal::from_raw(libc::SIGRTMIN()).unwrap();
        let with_rt = Ladder::new([Rung::new(rt, Duration::from_secs(1))]).unwrap();
        let p = plan(&with_rt, Trigger::Signal(rt), OnSignal::Forward);
        assert_eq!(
            p.rungs,
            with_rt.rungs(),
            "a signal the ladder names is forwarded"
        );
    }

    #[test]
    fn a_one_rung_ladder_keeps_its_rung() {
        let ladder: Ladder = "KILL:3s".parse().unwrap();
        let p = plan(&ladder, Trigger::Signal(Signal::TERM), OnSignal::Forward);
        assert_eq!(p.rungs, rungs("TERM:3s,KILL:3s"));
        let ladder: Ladder = "TERM:3s".parse().unwrap();
        let p = plan(&ladder, Trigger::Signal(Signal::TERM), OnSignal::Forward);
        assert_eq!(p.rungs, rungs("TERM:3s"));
    }
}
