//! From runs to verdicts, and from verdicts to a ladder.
//!
//! A signal **ends the server cleanly** when, in every run, the main process exited within
//! the window *by its own hand* — an exit status (a code), or, when a handler was installed
//! (`SigCgt`), death by that same signal re-raised after the handler ran — and nothing was left
//! in its cgroup once it had exited (members still there [`SETTLE`](super::measure) after the
//! exit, or at the end of the window if later, count against it). Not clean: ignored
//! (`SigIgn`), ended by the kernel's default action (no handler: no cleanup ran), still
//! running at the end of the window (a reload, or a shutdown that waits), an exit that leaves
//! processes behind, or runs that disagree.
//!
//! The **recommended ladder** has every clean signal, then `KILL`. Each grace is
//! [`GRACE_MULTIPLE`]× the slowest exit measured for that signal, rounded up to whole seconds,
//! at least [`GRACE_FLOOR`]; `KILL`'s is the same rule over the `KILL` closes measured, at
//! least [`KILL_FLOOR`]. Fastest first: by grace, and among equal graces in the conventional
//! order [`CONVENTIONAL`] (the gentler request first) — timings a few ms apart are noise, and
//! the order must not change from one probe to the next because of it.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use childguard::Signal;

use super::measure::{Disposition, RunResult};

/// Graces are this many times the slowest exit.
pub const GRACE_MULTIPLE: u32 = 3;
/// The least grace of a graceful rung.
pub const GRACE_FLOOR: Duration = Duration::from_secs(2);
/// The least grace of the final `KILL`.
pub const KILL_FLOOR: Duration = Duration::from_secs(5);
/// Among equal graces, this order; other signals after these, as probed.
pub const CONVENTIONAL: [Signal; 6] = [
    Signal::TERM,
    Signal::INT,
    Signal::HUP,
    Signal::QUIT,
    Signal::USR2,
    Signal::USR1,
];

/// Everything measured for one signal.
#[derive(Debug)]
pub struct SignalResult {
    pub signal: Signal,
    pub runs: Vec<RunResult>,
    /// Every run ended cleanly (see the module's documentation).
    pub clean: bool,
    /// The runs' outcome, in words (one, or each differing one).
    pub verdict: String,
    /// Median and max time from the signal to the exit, over the runs that exited.
    pub median: Option<Duration>,
    pub max: Option<Duration>,
    /// The grace it would get in a ladder.
    pub grace: Option<Duration>,
}

/// One run's outcome in words, and whether it was clean.
pub fn outcome(signal: Signal, run: &RunResult) -> (String, bool) {
    let Some(status) = run.status else {
        let what = match (run.disposition, run.kept_serving) {
            (Disposition::Ignored, _) => "ignored (SigIgn)".to_string(),
            (Disposition::Blocked, _) => "blocked (SigBlk): still pending".to_string(),
            // Said it is stopping, but still there: a shutdown that waits (for clients…).
            _ if run.stopping == Some(true) => {
                "kept running after STOPPING=1 (a shutdown that waits)".into()
            }
            (_, Some(true)) => "kept running and serving (reload?)".into(),
            (_, Some(false)) => "kept running, not serving".into(),
            (_, None) => "kept running".into(),
        };
        return (what, false);
    };
    let own_hand = status.code().is_some()
        || (run.disposition == Disposition::Caught && status.signal() == Some(signal.as_raw()));
    let mut what = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(s)) if s == signal.as_raw() && own_hand => {
            format!("handled, then died of {signal} (re-raised)")
        }
        (None, Some(s)) if s == signal.as_raw() => {
            format!("killed by {signal}: default action, no handler")
        }
        (None, Some(s)) => format!("killed by signal {}", signal_name(s)),
        (None, None) => "ended".into(),
    };
    if run.left_after_settle > 0 {
        what.push_str(&format!(", left {} in its cgroup", run.left_after_settle));
    }
    if let Some(left) = &run.left_after_close {
        what.push_str(&format!(", left after the KILL close: {left}"));
    }
    let clean = own_hand && run.left_after_settle == 0 && run.left_after_close.is_none();
    (what, clean)
}

fn signal_name(raw: i32) -> String {
    Signal::from_raw(raw).map_or_else(|| raw.to_string(), |s| s.to_string())
}

/// The verdict on `signal` from its runs.
pub fn judge(signal: Signal, runs: Vec<RunResult>) -> SignalResult {
    let outcomes: Vec<(String, bool)> = runs.iter().map(|r| outcome(signal, r)).collect();
    let clean = !outcomes.is_empty() && outcomes.iter().all(|(_, c)| *c);
    let mut words: Vec<String> = Vec::new();
    for (what, _) in &outcomes {
        // Exit codes and cgroup counts may differ per run; say each distinct outcome once.
        if !words.contains(what) {
            words.push(what.clone());
        }
    }
    let verdict = match words.len() {
        1 => words.remove(0),
        _ => format!("runs differ: {}", words.join(" / ")),
    };
    let mut times: Vec<Duration> = runs.iter().filter_map(|r| r.exited_after).collect();
    times.sort();
    // The middle one, or the mean of the middle two.
    let median = match times.len() {
        0 => None,
        n if n % 2 == 1 => Some(times[n / 2]),
        n => Some((times[n / 2 - 1] + times[n / 2]) / 2),
    };
    let max = times.last().copied();
    let grace = max.map(|m| grace_for(m, GRACE_FLOOR));
    SignalResult {
        signal,
        runs,
        clean,
        verdict,
        median,
        max,
        grace,
    }
}

/// [`GRACE_MULTIPLE`]× `slowest`, rounded up to whole seconds, at least `floor`.
pub fn grace_for(slowest: Duration, floor: Duration) -> Duration {
    let scaled = slowest * GRACE_MULTIPLE;
    let secs = scaled.as_secs() + u64::from(scaled.subsec_nanos() > 0);
    Duration::from_secs(secs).max(floor)
}

/// The recommendation.
#[derive(Debug)]
pub struct Recommendation {
    /// The clean signals, in ladder order, with their graces.
    pub clean: Vec<(Signal, Duration)>,
    pub kill_grace: Duration,
    /// The ladder text, e.g. `TERM:2s,INT:2s,KILL:5s`.
    pub ladder: String,
}

fn rank(signal: Signal) -> usize {
    CONVENTIONAL
        .iter()
        .position(|&s| s == signal)
        .unwrap_or(CONVENTIONAL.len())
}

/// The ladder from the verdicts.
pub fn ladder(results: &[SignalResult]) -> Recommendation {
    let mut clean: Vec<(Signal, Duration)> = results
        .iter()
        .filter(|r| r.clean)
        .filter_map(|r| Some((r.signal, r.grace?)))
        .collect();
    // A stable sort: signals outside CONVENTIONAL keep the order they were probed in.
    clean.sort_by_key(|&(signal, grace)| (grace, rank(signal)));
    let slowest_kill = results
        .iter()
        .flat_map(|r| &r.runs)
        .filter_map(|r| r.kill_close)
        .max()
        .unwrap_or_default();
    let kill_grace = grace_for(slowest_kill, KILL_FLOOR);
    let mut rungs: Vec<String> = clean
        .iter()
        .map(|(s, g)| format!("{s}:{}s", g.as_secs()))
        .collect();
    rungs.push(format!("KILL:{}s", kill_grace.as_secs()));
    Recommendation {
        clean,
        kill_grace,
        ladder: rungs.join(","),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graces_are_three_times_the_slowest_rounded_up_with_a_floor() {
        assert_eq!(
            grace_for(Duration::from_millis(7), GRACE_FLOOR),
            Duration::from_secs(2)
        );
        assert_eq!(
            grace_for(Duration::from_millis(700), GRACE_FLOOR),
            Duration::from_secs(3)
        );
        assert_eq!(
            grace_for(Duration::from_secs(1), GRACE_FLOOR),
            Duration::from_secs(3)
        );
        assert_eq!(
            grace_for(Duration::from_millis(1001), GRACE_FLOOR),
            Duration::from_secs(4)
        );
        assert_eq!(
            grace_for(Duration::ZERO, KILL_FLOOR),
            Duration::from_secs(5)
        );
    }

    fn run(disposition: Disposition, status: Option<i32>, ms: u64) -> RunResult {
        RunResult {
            settled: None,
            disposition,
            cgroup: None,
            fallback: None,
            exited_after: status.map(|_| Duration::from_millis(ms)),
            status: status.map(std::process::ExitStatus::from_raw),
            kept_serving: status.is_none().then_some(true),
            stopping: None,
            left_at_exit: 0,
            left_after_settle: 0,
            kill_close: Some(Duration::from_millis(3)),
            left_after_close: None,
        }
    }

    #[test]
    fn clean_signals_by_grace_then_convention_then_kill() {
        let caught = Disposition::Caught;
        let results = vec![
            judge(Signal::HUP, vec![run(caught, None, 0)]),
            // Exit 0 (wait status 0) in 1.2 s: grace 4 s.
            judge(Signal::INT, vec![run(caught, Some(0), 1200)]),
            // Killed by QUIT's default action (wait status = the signal number).
            judge(
                Signal::QUIT,
                vec![run(Disposition::Default, Some(libc::SIGQUIT), 1)],
            ),
            // Handled, then re-raised: clean.
            judge(Signal::USR2, vec![run(caught, Some(libc::SIGUSR2), 5)]),
            judge(
                Signal::TERM,
                vec![run(caught, Some(0), 8), run(caught, Some(0), 30)],
            ),
        ];
        let clean: Vec<bool> = results.iter().map(|r| r.clean).collect();
        assert_eq!(clean, [false, true, false, true, true]);
        assert_eq!(results[0].verdict, "kept running and serving (reload?)");
        assert_eq!(
            results[2].verdict,
            "killed by QUIT: default action, no handler"
        );
        assert_eq!(results[4].max, Some(Duration::from_millis(30)));
        assert_eq!(ladder(&results).ladder, "TERM:2s,USR2:2s,INT:4s,KILL:5s");
        let parsed: childguard::Ladder = ladder(&results).ladder.parse().unwrap();
        assert_eq!(parsed.to_string(), "TERM:2s,USR2:2s,INT:4s,KILL:5s");
    }

    #[test]
    fn no_clean_signal_is_kill_alone() {
        let results = vec![judge(
            Signal::TERM,
            vec![run(Disposition::Ignored, None, 0)],
        )];
        assert_eq!(results[0].verdict, "ignored (SigIgn)");
        let rec = ladder(&results);
        assert!(rec.clean.is_empty());
        assert_eq!(rec.ladder, "KILL:5s");
    }
}
