//! The report `run` prints: the library's [`CloseReport`], re-based so that it covers the
//! whole stop — from the trigger, through the rungs `run` climbed, to `close()`'s reap.

use std::time::{Duration, Instant};

use childguard::{CloseReport, Ending};

use crate::args::ReportFormat;
use crate::escalation::Climbed;
use crate::messages::{raw_stderr, say};

/// Merges what the climb did into the report of the `close()` that followed it (begun at
/// `close_started`). Offsets are then measured from the trigger.
pub fn rebase(mut report: CloseReport, climbed: &Climbed, close_started: Instant) -> CloseReport {
    let offset = close_started.saturating_duration_since(climbed.started);
    let later = |d: Duration| d + offset;
    report.started_at = climbed.started_wall;
    report.shutdown = climbed.shutdown.or(report.shutdown.map(later));
    // Rungs close() sent (to `--group` members left behind) come after ours.
    let mut signals = climbed.sent.clone();
    signals.extend(report.signals.iter().map(|s| {
        let mut s = *s;
        s.at = later(s.at);
        s.rung += climbed.rung_offset;
        s
    }));
    report.signals = signals;
    report.exited = climbed.exited.or(report.exited.map(later));
    report.reaped = report.reaped.map(later);
    report.ended_by = match (climbed.ended_by, report.ended_by) {
        (Some(ours), _) => ours,
        (None, Ending::Rung { index, signal }) => Ending::Rung {
            index: index + climbed.rung_offset,
            signal,
        },
        (None, theirs) => theirs,
    };
    report.total = later(report.total);
    let mut notes = climbed.notes.clone();
    notes.append(&mut report.notes);
    report.notes = notes;
    report
}

/// Writes the report to stderr: the `Display` line (and the notes), or one line of JSON.
pub fn write(report: &CloseReport, format: ReportFormat) {
    match format {
        ReportFormat::Text => {
            say!("{report}");
            for note in &report.notes {
                say!("note: {note}");
            }
        }
        ReportFormat::Json => match serde_json::to_string(report) {
            Ok(json) => raw_stderr(&format!("{json}\n")),
            Err(e) => say!("cannot write the report as JSON: {e}"),
        },
    }
}
