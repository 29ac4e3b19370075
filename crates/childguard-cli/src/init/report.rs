//! The stop's report on stderr, the container's log: CMD's close report (which rung ended it,
//! when), then each process left that was swept (pid, name, the rung it went after, when),
//! then how many processes are left.
//!
//! ```text
//! childguard init: stop: server[7]: TERM +0.0ms, KILL +4000.2ms, exited +4000.9ms (signal 9, ended by rung 1 (KILL)), reaped +4001.0ms
//! childguard init: stop: swept 2 left: 12 (daemon) after TERM +0.8ms; 13 (worker) after KILL +0.9ms (TERM skipped (ignored)) (ladder TERM:4.5s,KILL:1s)
//! childguard init: stop: 0 processes left after 8501.7ms
//! ```

use std::time::Duration;

use childguard::{CloseReport, Ladder};

use super::stop::Leftover;
use super::{ms, reap};
use crate::messages::say;

/// Writes the report.
pub fn write(
    report: &CloseReport,
    left: &[Leftover],
    swept: Option<&(Ladder, Duration)>,
    took: Duration,
    whole_namespace: bool,
) {
    say!("stop: {report}");
    if let Some((ladder, _)) = swept {
        let each: Vec<String> = left
            .iter()
            .map(|l| {
                let Some(outcome) = &l.outcome else {
                    return format!("{} ({}) not swept", l.pid, l.comm);
                };
                let ended = match outcome.ended {
                    Some((Some((_, signal)), at)) => format!("after {signal} +{}", ms(at)),
                    Some((None, at)) => format!("exited +{} before any rung", ms(at)),
                    None => "outlived the ladder".to_string(),
                };
                let notes = if outcome.notes.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", outcome.notes.join(", "))
                };
                format!("{} ({}) {ended}{notes}", l.pid, l.comm)
            })
            .collect();
        say!(
            "stop: swept {} left: {} (ladder {ladder})",
            left.len(),
            each.join("; ")
        );
    }
    let remaining = still_running(whole_namespace);
    say!(
        "stop: {} processes left after {}{}",
        remaining.len(),
        ms(took),
        if remaining.is_empty() {
            String::new()
        } else {
            format!(": {remaining:?}")
        }
    );
}

/// The processes still running (not zombies) that the stop was for: the whole namespace but
/// us as PID 1, else our descendants.
fn still_running(whole_namespace: bool) -> Vec<u32> {
    let me = std::process::id();
    let pids = if whole_namespace {
        reap::all_pids()
    } else {
        reap::descendants()
    };
    pids.into_iter()
        .filter(|&pid| pid != me)
        .filter(|&pid| reap::stat(pid).is_some_and(|s| s.state != 'Z' && s.ppid != 2 && pid != 2))
        .collect()
}
