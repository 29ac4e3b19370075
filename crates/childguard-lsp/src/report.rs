//! [`LspCloseReport`]: what each step of the LSP close did, and what ended the server.

use std::fmt;
use std::time::Duration;

use childguard::{CloseReport, Ending};

/// What came of the `shutdown` request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shutdown {
    /// The server answered it with a result (`null`).
    Answered,
    /// The server answered it with an error.
    Refused {
        /// The error's `code`.
        code: i64,
        /// The error's `message`.
        message: String,
    },
    /// No answer within [`LspClose::shutdown_timeout`](crate::LspClose::shutdown_timeout).
    TimedOut,
    /// The server exited before answering.
    Exited,
    /// The server closed its stdout before answering (end of file on our end).
    StdoutClosed,
    /// The server's output could not be read as LSP messages any further: why.
    Unreadable(String),
    /// `shutdown` was not sent: why (the server had exited; no stdin or stdout to speak
    /// over; the write failed or the pipe stayed full).
    NotSent(String),
}

impl fmt::Display for Shutdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shutdown::Answered => f.write_str("shutdown answered"),
            Shutdown::Refused { code, message } => {
                write!(f, "shutdown refused ({code}: {message})")
            }
            Shutdown::TimedOut => f.write_str("shutdown not answered in time"),
            Shutdown::Exited => f.write_str("exited before answering shutdown"),
            Shutdown::StdoutClosed => f.write_str("stdout closed before shutdown's answer"),
            Shutdown::Unreadable(why) => write!(f, "output unreadable ({why})"),
            Shutdown::NotSent(why) => write!(f, "shutdown not sent ({why})"),
        }
    }
}

/// Whether the `exit` notification went out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exit {
    /// Written to the server's stdin, which was closed right after (end of file).
    Sent,
    /// Not sent: why (the server had exited; the write failed or the pipe stayed full; no
    /// stdin).
    NotSent(String),
}

/// Which step ended the server (the process spawned; what the close did to the rest of its
/// tree is in [`LspCloseReport::close`]: its `signals`, its `cgroup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ended {
    /// It had exited before the LSP close began: nothing was sent.
    BeforeShutdown,
    /// It exited during the `shutdown` step, before `exit` was sent.
    Shutdown,
    /// It exited after `exit` (and the end of file that follows it), before the handle's
    /// close began: the LSP's own close ended it.
    Exit,
    /// The handle's close ended it: that close's [`CloseReport::ended_by`] — `Eof` (it exited
    /// during the ladder's EOF wait, nothing sent), `Rung` (that rung's signal), `Outlived`,
    /// `InBackground`.
    Ladder(Ending),
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::BeforeShutdown => f.write_str("exited before the LSP close"),
            Ended::Shutdown => f.write_str("exited during shutdown"),
            Ended::Exit => f.write_str("ended by exit"),
            Ended::Ladder(Ending::Eof) => f.write_str("ended in the ladder's EOF wait"),
            Ended::Ladder(ending) => write!(f, "ended by the ladder: {ending}"),
        }
    }
}

/// What the LSP close did, step by step, and the handle's [`CloseReport`] after it. Times are
/// since the LSP close began.
#[derive(Debug, Clone)]
#[non_exhaustive]
#[must_use = "the report says whether the server ended by the protocol or by the ladder"]
pub struct LspCloseReport {
    /// What came of `shutdown`.
    pub shutdown: Shutdown,
    /// When `shutdown` was answered (or refused).
    pub shutdown_answered: Option<Duration>,
    /// Whether `exit` went out.
    pub exit: Exit,
    /// When `exit` was written.
    pub exit_sent: Option<Duration>,
    /// When the server was seen exited, if it was before the handle's close began.
    pub exited: Option<Duration>,
    /// Which step ended the server.
    pub ended_by: Ended,
    /// Messages read and dropped while waiting for `shutdown`'s answer: notifications,
    /// answers to requests sent before the close.
    pub dropped: usize,
    /// Requests of the server's answered with a `RequestCancelled` error meanwhile.
    pub refused: usize,
    /// Bytes of the server's stdout skipped as not LSP frames (a stream begun mid-message, a
    /// stray line).
    pub skipped_bytes: usize,
    /// Frames whose body was not JSON (dropped).
    pub garbled: usize,
    /// Bytes read that made no whole message when the `shutdown` step ended: a message cut
    /// short, or output that is not LSP and was not yet passed over.
    pub partial_bytes: usize,
    /// Things worth knowing that are not errors (a wait that failed, an answer not written).
    pub notes: Vec<String>,
    /// The handle's close, after the LSP steps: its ladder, its signals, the tree's end.
    pub close: CloseReport,
    /// How long the whole LSP close took.
    pub total: Duration,
}

impl LspCloseReport {
    /// The LSP close went as the protocol has it: `shutdown` answered, the server gone after
    /// `exit`, and the handle's close sent no signal (to it or to anything of its tree).
    pub fn is_clean(&self) -> bool {
        self.shutdown == Shutdown::Answered
            && self.ended_by == Ended::Exit
            && self.close.signals.is_empty()
    }
}

struct Ms(Duration);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "+{:.1}ms", self.0.as_secs_f64() * 1e3)
    }
}

impl fmt::Display for LspCloseReport {
    /// `LSP close: shutdown answered +2.9ms, exit +3.0ms, exited +41.2ms: ended by exit; total
    /// 42.0ms; close: …` (the handle's [`CloseReport`] line).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LSP close: {}", self.shutdown)?;
        if let Some(at) = self.shutdown_answered {
            write!(f, " {}", Ms(at))?;
        }
        match (&self.exit, self.exit_sent) {
            (Exit::Sent, Some(at)) => write!(f, ", exit {}", Ms(at))?,
            (Exit::Sent, None) => f.write_str(", exit")?,
            (Exit::NotSent(why), _) => write!(f, ", exit not sent ({why})")?,
        }
        if let Some(at) = self.exited {
            write!(f, ", exited {}", Ms(at))?;
        }
        write!(f, ": {}", self.ended_by)?;
        if self.dropped + self.refused > 0 {
            write!(
                f,
                "; {} message(s) dropped, {} request(s) refused",
                self.dropped, self.refused
            )?;
        }
        if self.skipped_bytes + self.garbled > 0 {
            write!(
                f,
                "; {} byte(s) not LSP skipped, {} body(ies) not JSON",
                self.skipped_bytes, self.garbled
            )?;
        }
        if self.partial_bytes > 0 {
            write!(
                f,
                "; {} byte(s) read made no whole message",
                self.partial_bytes
            )?;
        }
        for note in &self.notes {
            write!(f, "; {note}")?;
        }
        write!(
            f,
            "; total {:.1}ms; close: {}",
            self.total.as_secs_f64() * 1e3,
            self.close
        )
    }
}

/// The handle's close failed (see [`childguard::Error`]); the LSP steps' report goes with it
/// when the close's error carries its own report.
#[derive(Debug)]
pub struct Error {
    /// The close's error.
    pub source: childguard::Error,
    /// The LSP close's report, with the failed close's report in it.
    pub report: Option<Box<LspCloseReport>>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the close after the LSP steps failed: {}", self.source)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}
