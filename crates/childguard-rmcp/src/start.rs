//! [`ChildTransport::serve`]: rmcp's client start-up, whose error says why the server did not
//! start — in the server's own words, the last lines of its stderr.

use std::fmt;

use childguard::{CloseReport, Ending};
use rmcp::service::{ClientInitializeError, RunningService};
use rmcp::{RoleClient, Service, ServiceExt};

use crate::ChildTransport;

/// How many of the server's last stderr lines a [`StartError`] shows.
pub const START_ERROR_LINES: usize = 12;

impl ChildTransport {
    /// rmcp's start-up (`service.serve(transport)`: `initialize`, its answer,
    /// `notifications/initialized`) over this transport — what `().serve(transport)` does — but
    /// a failure comes with the server's side of it: a server that exits before it answers
    /// (npm's `E404` through `npx`, a missing module, a bad flag) makes rmcp say only
    /// `connection closed: initialize response`; the [`StartError`] adds how the server ended
    /// and its last [`START_ERROR_LINES`] stderr lines.
    ///
    /// On a failure rmcp drops the transport, whose drop closes the server (the ladder: at once
    /// for a server already gone); this waits for that close, within the ladder's bound, and
    /// takes its report (the stderr tail, read to its end).
    pub async fn serve<S: Service<RoleClient>>(
        self,
        service: S,
    ) -> Result<RunningService<RoleClient, S>, StartError> {
        let closed = self.closed();
        match service.serve(self).await {
            Ok(running) => Ok(running),
            Err(error) => Err(StartError {
                error,
                report: closed.report().await,
            }),
        }
    }
}

/// [`ChildTransport::serve`] failed: rmcp's error, and the report of the server's close.
///
/// Its `Debug` is its `Display` (what `fn main() -> Result<(), Box<dyn Error>>` prints): the
/// server's lines as lines, not one escaped string inside a report.
pub struct StartError {
    error: ClientInitializeError,
    report: Option<CloseReport>,
}

impl StartError {
    /// rmcp's error.
    pub fn error(&self) -> &ClientInitializeError {
        &self.error
    }

    /// rmcp's error, taken out.
    pub fn into_error(self) -> ClientInitializeError {
        self.error
    }

    /// The close report of the server (how it ended, its stderr tail); `None` if the close
    /// could not report (see [`Closed::report`](crate::Closed::report)).
    pub fn report(&self) -> Option<&CloseReport> {
        self.report.as_ref()
    }

    /// The server's last stderr lines, at most [`START_ERROR_LINES`], oldest first.
    pub fn stderr_lines(&self) -> Vec<&str> {
        let tail = self
            .report
            .as_ref()
            .and_then(|r| r.output_tail.as_deref())
            .unwrap_or_default();
        let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(START_ERROR_LINES)..].to_vec()
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(report) = &self.report else {
            return write!(
                f,
                "the MCP server did not start: {} (no close report: the server's stderr is \
                 lost)",
                self.error
            );
        };
        let who = match (&report.program, report.pid) {
            (Some(program), Some(pid)) => format!("`{program}` (pid {pid})"),
            (Some(program), None) => format!("`{program}`"),
            _ => "the server".to_owned(),
        };
        write!(f, "the MCP server {who} did not start: {}; ", self.error)?;
        let status = report
            .status
            .map_or_else(|| "its status unknown".to_owned(), |s| s.to_string());
        match &report.ended_by {
            Ending::BeforeClose => write!(f, "it had exited ({status})")?,
            Ending::Eof => write!(f, "it exited at its stdin's EOF ({status})")?,
            Ending::Rung { signal, .. } => write!(f, "the close ended it with {signal}")?,
            other => write!(f, "its close: {other:?}")?,
        }
        let lines = self.stderr_lines();
        if lines.is_empty() {
            return write!(f, "; it wrote nothing on stderr");
        }
        write!(f, "; its last stderr lines:")?;
        for line in lines {
            write!(f, "\n    {line}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
