//! Why `run` closes CMD ([`Trigger`]) and the ladder that closes it ([`plan`]): a forwarded
//! signal goes out as the first rung. The climb itself is the library's
//! ([`ChildHandle::close_with`](childguard::ChildHandle::close_with)).

use std::time::Duration;

use childguard::{Ladder, Rung, Signal};

use crate::args::OnSignal;

/// What started the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// `--timeout` expired.
    Timeout(Duration),
    /// childguard received this signal.
    Signal(Signal),
    /// childguard received this signal from the terminal, which sent it to CMD too (CMD is in
    /// childguard's foreground process group; see `received`): it is not sent again.
    Delivered(Signal),
    /// stdin closed (`--stop-on-stdin-eof`), or the host closed it (`--stdio-server`).
    StdinClosed,
    /// childguard's parent, the host (this pid), exited (`--stdio-server`).
    ParentExited(u32),
}

impl Trigger {
    /// For the report's notes.
    pub fn describe(self) -> String {
        match self {
            Trigger::Timeout(after) => {
                format!("timeout {} expired", humantime::format_duration(after))
            }
            Trigger::Signal(signal) => format!("childguard received SIG{signal}"),
            Trigger::Delivered(signal) => format!(
                "childguard received SIG{signal} from the terminal, which sent it to CMD too: \
                 not forwarded"
            ),
            Trigger::StdinClosed => "stdin closed".into(),
            Trigger::ParentExited(pid) => format!("childguard's parent (pid {pid}) exited"),
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
/// signal.) A signal the terminal already delivered to CMD ([`Trigger::Delivered`]) takes the
/// same place as a `0` rung: nothing is sent, CMD has the grace to act on its own copy. Every
/// other trigger climbs the ladder as written.
pub fn plan(ladder: &Ladder, trigger: Trigger, on_signal: OnSignal) -> Plan {
    let as_written = || Plan {
        eof_wait: ladder.eof_grace(),
        rungs: ladder.rungs().to_vec(),
    };
    let (received, delivered) = match trigger {
        Trigger::Signal(signal) => (signal, false),
        Trigger::Delivered(signal) => (signal, true),
        Trigger::Timeout(_) | Trigger::StdinClosed | Trigger::ParentExited(_) => {
            return as_written()
        }
    };
    if !forwards(ladder, on_signal, received) {
        return as_written();
    }
    let rungs = ladder.rungs();
    let sent = if delivered { Signal::NONE } else { received };
    let forwarded = Rung::new(sent, rungs[0].grace);
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

/// The ladder [`plan`] gives, as a [`Ladder`] for `close_with`, e.g. `INT:1s,TERM:2s,KILL:5s`.
pub fn ladder(plan: &Plan) -> Ladder {
    // `plan` always has a rung: a ladder has one, and a forwarded signal adds one.
    let ladder = Ladder::new(plan.rungs.iter().copied()).unwrap_or_default();
    match plan.eof_wait {
        Some(grace) => ladder.with_eof_grace(grace),
        None => ladder,
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
        assert_eq!(plan(&ladder, Trigger::ParentExited(1), fw), p);
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
        // Real-time signals: libc names SIGRTMIN on Linux only.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            let rt = Signal::from_raw(libc::SIGRTMIN()).unwrap();
            let with_rt = Ladder::new([Rung::new(rt, Duration::from_secs(1))]).unwrap();
            let p = plan(&with_rt, Trigger::Signal(rt), OnSignal::Forward);
            assert_eq!(
                p.rungs,
                with_rt.rungs(),
                "a signal the ladder names is forwarded"
            );
        }
    }

    #[test]
    fn a_signal_the_terminal_delivered_is_a_zero_rung() {
        let ladder: Ladder = "EOF:50ms,HUP:1s,TERM:2s,KILL:5s".parse().unwrap();
        let fw = OnSignal::Forward;
        let p = plan(&ladder, Trigger::Delivered(Signal::INT), fw);
        assert_eq!(p.eof_wait, None);
        assert_eq!(p.rungs, rungs("0:1s,TERM:2s,KILL:5s"));
        let one: Ladder = "KILL:3s".parse().unwrap();
        let p = plan(&one, Trigger::Delivered(Signal::INT), fw);
        assert_eq!(p.rungs, rungs("0:3s,KILL:3s"));
        // --on-signal ladder: the ladder as written, as for any signal.
        let p = plan(&ladder, Trigger::Delivered(Signal::INT), OnSignal::Ladder);
        assert_eq!(p.rungs, ladder.rungs());
        assert!(Trigger::Delivered(Signal::INT)
            .describe()
            .contains("not forwarded"));
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
