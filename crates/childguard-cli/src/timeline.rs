//! The report `run` prints: the library's [`CloseReport`] of the close the trigger started
//! (its offsets count from the trigger: the close begins at once).

use childguard::CloseReport;

use crate::args::ReportFormat;
use crate::messages::{raw_stderr, say};

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
