//! Output capture: the server's stdout/stderr drained continuously by the event loop, kept
//! as a bounded [`Tail`], optionally passed on line by line by the callback thread.
//!
//! Why drained continuously: a pipe holds 64 KiB on Linux; a server whose log nobody reads
//! blocks in `write` once it is full, and a test harness that reads it only on failure hangs
//! the very server it tests. Every captured pipe of every handle in the program is an io
//! source of the one event loop ([`drain`]), so the cost is no thread per child; the user's
//! callbacks run on one thread of their own ([`dispatch`]), never on the loop.

mod dispatch;
mod drain;
mod lines;
mod listen;
mod tail;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dispatch::Sink;
pub use dispatch::{CALLBACK_QUEUE_BYTES, CALLBACK_QUEUE_LINES, PASS_ON_MAX};
pub use lines::MAX_LINE_BYTES;
use lines::{Assembler, Out, Watch};
pub(crate) use tail::Tail;

use crate::close::report::CloseReport;
use crate::core::bell::Bell;
use crate::spawn::stdio::Pipes;

/// One of the child's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum OutputStream {
    /// fd 1.
    Stdout,
    /// fd 2.
    Stderr,
}

impl OutputStream {
    fn index(self) -> usize {
        match self {
            OutputStream::Stdout => 0,
            OutputStream::Stderr => 1,
        }
    }
}

/// The default of [`Capture::tail_bytes`]: 64 KiB.
pub const DEFAULT_TAIL_BYTES: usize = 64 << 10;
/// The default of [`Capture::tail_lines`].
pub const DEFAULT_TAIL_LINES: usize = 1000;

pub(crate) type LineFn = dyn Fn(OutputStream, &[u8]) + Send + Sync;

/// Which of the server's output to capture, how much to keep, and where lines go. Given to
/// [`Builder::capture`](crate::Builder::capture).
///
/// What happens: `spawn()` makes each captured stream a pipe (overriding the `Command`'s
/// setting for it), and from the fork on the library's event loop (one thread shared by all
/// handles and everything else the library watches) reads it as data arrives. The server therefore never blocks on its log, whoever reads what. Complete lines
/// from both streams go, in the order read, into a tail kept within [`tail_bytes`] and
/// [`tail_lines`] (the oldest go first); the tail is in
/// [`ChildHandle::output_tail`](crate::ChildHandle::output_tail), in every error that happens
/// after the fork, and in [`CloseReport::output_tail`](crate::CloseReport::output_tail). The
/// pipes are read until EOF — past the close, while a descendant still holds them — then
/// closed.
///
/// A captured stream is not in [`ChildHandle::stdout`](crate::ChildHandle::stdout) /
/// [`stderr`](crate::ChildHandle::stderr): it is ours.
///
/// [`tail_bytes`]: Capture::tail_bytes
/// [`tail_lines`]: Capture::tail_lines
#[derive(Clone)]
#[must_use = "a Capture does nothing until passed to Builder::capture"]
pub struct Capture {
    stdout: bool,
    stderr: bool,
    tail_bytes: usize,
    tail_lines: usize,
    on_line: Option<Arc<LineFn>>,
    passthrough: bool,
}

impl fmt::Debug for Capture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capture")
            .field("stdout", &self.stdout)
            .field("stderr", &self.stderr)
            .field("tail_bytes", &self.tail_bytes)
            .field("tail_lines", &self.tail_lines)
            .field("on_line", &self.on_line.is_some())
            .field("passthrough", &self.passthrough)
            .finish()
    }
}

impl Capture {
    fn streams(stdout: bool, stderr: bool) -> Capture {
        Capture {
            stdout,
            stderr,
            tail_bytes: DEFAULT_TAIL_BYTES,
            tail_lines: DEFAULT_TAIL_LINES,
            on_line: None,
            passthrough: false,
        }
    }

    /// Capture stderr only (works with every [`SocketMode`](crate::SocketMode)).
    pub fn stderr() -> Capture {
        Capture::streams(false, true)
    }

    /// Capture stdout only.
    pub fn stdout() -> Capture {
        Capture::streams(true, false)
    }

    /// Capture stdout and stderr. With [`SocketMode::Stdio`](crate::SocketMode::Stdio) stdout
    /// is the socket, and `spawn()` fails with an [`ErrorKind::Config`](crate::ErrorKind)
    /// error.
    pub fn both() -> Capture {
        Capture::streams(true, true)
    }

    /// The most bytes the tail keeps (default [`DEFAULT_TAIL_BYTES`], 64 KiB; 0 keeps no
    /// tail). It bounds the tail only: lines are assembled whole up to [`MAX_LINE_BYTES`]
    /// whatever this is, for [`on_line`](Capture::on_line), the passthrough and
    /// [`Ready::output`](crate::Ready::output). Memory per handle is about this, plus per
    /// captured stream the line not yet ended (at most [`MAX_LINE_BYTES`]).
    pub fn tail_bytes(mut self, bytes: usize) -> Capture {
        self.tail_bytes = bytes;
        self
    }

    /// The most lines the tail keeps (default [`DEFAULT_TAIL_LINES`]).
    pub fn tail_lines(mut self, lines: usize) -> Capture {
        self.tail_lines = lines;
        self
    }

    /// Calls `f` with every complete line, without its `\n`, once its `\n` is read (or the
    /// stream's EOF, for a last line without one) — however many reads it came in.
    ///
    /// A line longer than [`MAX_LINE_BYTES`] (64 KiB) is cut, so that memory stays bounded:
    /// `f` gets each [`MAX_LINE_BYTES`] of it as soon as they are read, then the rest once its
    /// `\n` comes. The mark of a cut is the length: a call with exactly [`MAX_LINE_BYTES`]
    /// bytes is a piece, and the line goes on in the next call for that stream — an empty one
    /// if the line's length was a multiple of the bound (a whole line is always shorter). The
    /// passthrough writes each piece as a line of its own; the tail keeps the line as written;
    /// [`Ready::output`](crate::Ready::output) finds its text across a cut; and the close
    /// report's [`notes`](crate::CloseReport::notes) count the cut lines per stream. A cut
    /// may fall inside a UTF-8 character.
    ///
    /// It runs on the library's callback thread, one for all handles, never on the thread that
    /// reads the pipes: a slow or blocking `f` never stops the reading of any pipe (no server
    /// blocks on a full pipe, [`Ready::output`](crate::Ready::output) and the tail go on), but
    /// it delays the callbacks of every handle. Lines wait for `f` in a queue per handle of at
    /// most [`CALLBACK_QUEUE_BYTES`] and [`CALLBACK_QUEUE_LINES`]; when `f` falls that far
    /// behind, further lines are not passed on (the tail still keeps them), and the close
    /// report's [`notes`](crate::CloseReport::notes) count them per stream. Lines may still
    /// come after the close returned (those queued before it).
    ///
    /// `f` may close or spawn handles, its own handle among them: nothing the library does
    /// waits for the callback thread. A panic in it is caught, and that handle's lines are no
    /// longer passed on.
    pub fn on_line(mut self, f: impl Fn(OutputStream, &[u8]) + Send + Sync + 'static) -> Capture {
        self.on_line = Some(Arc::new(f));
        self
    }

    /// Writes every line to our own stderr as `[program pid] line` (default off). The writes
    /// are made on the callback thread, as [`on_line`](Capture::on_line) is called: a stderr of
    /// ours that nobody drains (`… 2>&1 | less`, paused) blocks that thread only — the pipes are
    /// still read and the closes still return; the lines that find the queue full are not
    /// written, and counted in the close report's notes.
    pub fn passthrough(mut self, on: bool) -> Capture {
        self.passthrough = on;
        self
    }

    /// Before the fork: makes each captured stream a pipe. `stdout_is_socket`: the socket
    /// mode put the socket on fd 1.
    pub(crate) fn prepare(&self, command: &mut Command, stdout_is_socket: bool) -> io::Result<()> {
        if self.stdout && stdout_is_socket {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "Capture::both/stdout: with SocketMode::Stdio the child's stdout is the socket \
                 (use Capture::stderr)",
            ));
        }
        if self.stdout {
            command.stdout(Stdio::piped());
        }
        if self.stderr {
            command.stderr(Stdio::piped());
        }
        // Started before the fork: failing to start is then a clean spawn error.
        if self.on_line.is_some() || self.passthrough {
            dispatch::start()?;
        }
        drain::start()
    }

    /// After the fork: moves the captured pipes out of `pipes` into the event loop.
    /// `watch`: the text a readiness condition waits for, watched from the first line on.
    ///
    /// Race avoided: the watch is in place before the event loop can read a byte. Set
    /// later (when the readiness wait starts), it could only look back through the tail, and a
    /// line the thread read before that and the tail no longer holds (a small or zero tail,
    /// or more output after it) was missed: the spawn waited until its readiness timeout for
    /// a line the server had already written.
    pub(crate) fn start(
        &self,
        pipes: &mut Pipes,
        program: &str,
        pid: u32,
        watch: Option<&str>,
    ) -> io::Result<Captured> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                tail: Tail::new(self.tail_bytes, self.tail_lines),
                lines: [Assembler::default(), Assembler::default()],
                cut: [0, 0],
                open: [false, false],
                synced: 0,
                watch: watch.map(Watch::new),
            }),
            bells: Mutex::new(Vec::new()),
            sync_asked: AtomicU64::new(0),
        });
        let sink = (self.on_line.is_some() || self.passthrough).then(|| {
            Arc::new(Sink::new(
                self.on_line.clone(),
                self.passthrough.then(|| format!("[{program} {pid}] ")),
            ))
        });
        let mut streams: Vec<(OutputStream, OwnedFd)> = Vec::new();
        if self.stdout {
            if let Some(out) = pipes.stdout.take() {
                streams.push((OutputStream::Stdout, out.into()));
            }
        }
        if self.stderr {
            if let Some(err) = pipes.stderr.take() {
                streams.push((OutputStream::Stderr, err.into()));
            }
        }
        {
            let mut state = shared.lock();
            for (stream, _) in &streams {
                state.open[stream.index()] = true;
            }
        }
        drain::register(streams, &shared, sink.clone())?;
        Ok(Captured { shared, sink })
    }
}

/// A handle's side of its capture.
pub(crate) struct Captured {
    shared: Arc<Shared>,
    /// Where its lines go besides the tail (for the count of those dropped).
    sink: Option<Arc<Sink>>,
}

impl fmt::Debug for Captured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Captured")
            .field("shared", &self.shared)
            .field("sink", &self.sink.is_some())
            .finish()
    }
}

impl Captured {
    /// The tail as it stands, then any line still being written (without its `\n`, which may
    /// never come): the last output, complete or not. Each stream's unended line continues
    /// that stream's piece the tail ends in, if it does, or starts a line of its own.
    pub(crate) fn tail_text(&self) -> String {
        let state = self.shared.lock();
        let mut text = state.tail.bytes();
        let mut open = state.tail.open();
        let order = match open {
            Some(OutputStream::Stderr) => [OutputStream::Stderr, OutputStream::Stdout],
            _ => [OutputStream::Stdout, OutputStream::Stderr],
        };
        for stream in order {
            let held = state.lines[stream.index()].held();
            if held.is_empty() {
                continue;
            }
            if open != Some(stream) && text.last().is_some_and(|&b| b != b'\n') {
                text.push(b'\n');
            }
            text.extend_from_slice(held);
            open = Some(stream);
        }
        String::from_utf8_lossy(&text).into_owned()
    }

    /// On the loop thread: reads what the pipes hold now into the tail ([`drain::read_now`]).
    pub(crate) fn read_now_on_loop(&self, ops: &mut crate::core::event_loop::Ops) {
        drain::read_now(ops, &self.shared);
    }

    /// Into the close report: the tail ([`Captured::tail_text`]) and, in its notes, the
    /// lines cut at [`MAX_LINE_BYTES`] and those not passed on because the callback fell
    /// behind.
    pub(crate) fn report_into(&self, report: &mut CloseReport) {
        report.output_tail = Some(self.tail_text());
        report.notes.extend(self.cut_notes());
        report.notes.extend(self.dropped_note());
    }

    fn dropped_note(&self) -> Option<String> {
        let [out, err] = self.sink.as_ref()?.dropped();
        (out + err > 0).then(|| {
            format!(
                "on_line/passthrough fell behind: {out} stdout and {err} stderr line(s) not \
                 passed on (the queue holds {} KiB, {} lines: CALLBACK_QUEUE_BYTES, \
                 CALLBACK_QUEUE_LINES)",
                CALLBACK_QUEUE_BYTES >> 10,
                CALLBACK_QUEUE_LINES
            )
        })
    }

    fn cut_notes(&self) -> Vec<String> {
        let state = self.shared.lock();
        [OutputStream::Stdout, OutputStream::Stderr]
            .into_iter()
            .filter(|s| state.cut[s.index()] > 0)
            .map(|s| {
                format!(
                    "{}: {} line(s) longer than {} KiB (MAX_LINE_BYTES) passed on in pieces",
                    match s {
                        OutputStream::Stdout => "stdout",
                        OutputStream::Stderr => "stderr",
                    },
                    state.cut[s.index()],
                    MAX_LINE_BYTES >> 10
                )
            })
            .collect()
    }
}

/// What the event loop (the capture drain) and the handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    /// The bells of the threads waiting ([`Captured::sync`], [`Captured::wait_for_line`]),
    /// rung on every change a waiter may care for: a sync done, a watched line, an EOF.
    bells: Mutex<Vec<Arc<Bell>>>,
    /// Syncs asked for by the handle (see [`Captured::sync`]).
    sync_asked: AtomicU64,
}

#[derive(Debug)]
struct State {
    tail: Tail,
    /// The line being assembled, per stream: bounded by [`MAX_LINE_BYTES`], not by the tail.
    lines: [Assembler; 2],
    /// Per stream: lines cut at [`MAX_LINE_BYTES`] that someone looked at line by line.
    cut: [u64; 2],
    /// Per stream: still being read (not at EOF).
    open: [bool; 2],
    /// The last sync the thread completed.
    synced: u64,
    /// A readiness condition watching the lines.
    watch: Option<Watch>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The drain's input (on the loop thread): `chunk` read from `stream`. Returns the complete lines (and
    /// pieces of cut ones), for the sink, when `collect` (copies are made only then).
    fn feed(&self, stream: OutputStream, chunk: &[u8], collect: bool) -> Vec<Vec<u8>> {
        self.assemble(stream, collect, |asm, out| {
            let mut rest = chunk;
            if !out.line_by_line {
                // Fast path, nobody looks at single lines: the first line completes the one
                // held, the complete lines after it go into the tail at once, the rest is held.
                if let Some(last) = rest.iter().rposition(|&b| b == b'\n') {
                    let first = rest.iter().position(|&b| b == b'\n').unwrap_or(last);
                    asm.split(&rest[..=first], &mut |b, e| out.emit(b, e));
                    if last > first {
                        out.tail.push_lines(stream, &rest[first + 1..=last]);
                    }
                    rest = &rest[last + 1..];
                }
            }
            asm.split(rest, &mut |b, e| out.emit(b, e));
        })
    }

    /// `stream` reached EOF: the line it holds is a line (returned for the sink). Call
    /// [`Shared::mark_eof`] once the sink has it.
    fn last_line(&self, stream: OutputStream, collect: bool) -> Vec<Vec<u8>> {
        self.assemble(stream, collect, |asm, out| {
            asm.finish(&mut |b, e| out.emit(b, e))
        })
    }

    /// Runs `f` with `stream`'s assembler and where its lines go; wakes waiters on a watched
    /// line.
    fn assemble(
        &self,
        stream: OutputStream,
        collect: bool,
        f: impl FnOnce(&mut Assembler, &mut Out<'_>),
    ) -> Vec<Vec<u8>> {
        let mut state = self.lock();
        let State {
            tail,
            lines,
            cut,
            watch,
            ..
        } = &mut *state;
        let line_by_line = collect || watch.is_some();
        let mut out = Out {
            stream,
            tail,
            watch: watch.as_mut(),
            cut: &mut cut[stream.index()],
            line_by_line,
            collect,
            lines: Vec::new(),
            seen: false,
        };
        f(&mut lines[stream.index()], &mut out);
        let (lines, seen) = (out.lines, out.seen);
        drop(state);
        if seen {
            self.changed();
        }
        lines
    }

    /// `stream` is done: a sync or a line watch waiting on it returns.
    fn mark_eof(&self, stream: OutputStream) {
        self.lock().open[stream.index()] = false;
        self.changed();
    }

    fn mark_synced(&self, asked: u64) {
        let mut state = self.lock();
        state.synced = state.synced.max(asked);
        drop(state);
        self.changed();
    }

    fn sync_pending(&self) -> Option<u64> {
        let asked = self.sync_asked.load(Ordering::SeqCst);
        (asked > self.lock().synced).then_some(asked)
    }
}
