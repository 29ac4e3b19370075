//! The callback thread: one per process, running every handle's
//! [`on_line`](super::Capture::on_line) and passthrough writes, off the event loop's path.
//!
//! The loop only reads pipes; the complete lines a user looks at are queued per handle, and
//! this thread passes them on, handle after handle (a turn takes at most [`TURN_LINES`] lines,
//! so one busy handle does not keep the others' lines waiting long). So a slow or blocking
//! callback, or a passthrough into a stderr nobody drains, never stops the reading of any
//! pipe: the servers never block on a full pipe, readiness lines are seen, closes get their
//! tails. It delays the callbacks of the other handles, which share this thread.
//!
//! Bounded memory: a handle's queue holds at most [`CALLBACK_QUEUE_BYTES`] bytes and [`CALLBACK_QUEUE_LINES`]
//! lines, counting those being passed on. A line that finds it full is dropped (the tail still
//! has it) and counted; the close report's notes give the count per stream.
//!
//! A close waits for its handle's queue (issue 34 item 2): once the loop has read the pipes to
//! their end (`Captured::sync`), every line read is queued here, and the close returns only
//! after this thread has passed them all on ([`Sink::wait_passed_on`]) — as Go's `Cmd.Wait`
//! returns after its output copiers finished — so a harness that looks at the lines it
//! collected after `close()` sees every one, in order. Bounded by [`PASS_ON_MAX`]: a callback
//! that blocks longer does not hold the close; the close returns and its report says how
//! many lines were still waiting (they are passed on later).
//!
//! Re-entrance: a callback may close or spawn handles, its own among them. A close made on
//! this thread (from inside a callback) does not wait for the queue — it would wait for
//! itself — so there the lines still queued are passed on after it returns (the report says
//! how many).

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{LineFn, OutputStream};
use crate::core::per_process::PerProcess;

/// The most bytes of lines waiting per handle for its callback or passthrough (1 MiB).
pub const CALLBACK_QUEUE_BYTES: usize = 1 << 20;
/// The most lines waiting per handle for its callback or passthrough.
pub const CALLBACK_QUEUE_LINES: usize = 10_000;
/// The most lines passed on per turn of a handle.
const TURN_LINES: usize = 256;

/// The longest a close waits for the callback thread to pass on the lines it read (1 s).
pub const PASS_ON_MAX: Duration = Duration::from_secs(1);

thread_local! {
    /// Set on the callback thread: a close made from a callback does not wait for the queue.
    static ON_CALLBACK_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// How [`Sink::wait_passed_on`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PassedOn {
    /// Every line queued was passed on.
    All,
    /// Not waited for: the close runs on the callback thread; this many lines still queued.
    FromCallback(usize),
    /// The bound ran out with this many lines not yet passed on (a slow callback).
    TimedOut(usize),
}

/// The name of the callback thread (`/proc/self/task/*/comm` shows its first 15 bytes).
pub(crate) const THREAD_NAME: &str = "childguard-callbacks";

/// Where a handle's lines go besides the tail, and its queue.
pub(crate) struct Sink {
    on_line: Option<Arc<LineFn>>,
    /// `[program pid] `: pass lines on to our stderr with this prefix.
    prefix: Option<String>,
    queue: Mutex<Queue>,
    /// Per stream: lines dropped because the queue was full.
    dropped: [AtomicU64; 2],
    /// The callback panicked: no more lines are passed on.
    dead: AtomicBool,
    /// Rung after each turn: a close waiting for the queue to empty looks again.
    passed: Condvar,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<(OutputStream, Vec<u8>)>,
    /// Bytes of `lines` and of the turn being passed on.
    bytes: usize,
    /// Lines of the turn being passed on.
    in_turn: usize,
    /// In the callback thread's round (queued there, or being passed on).
    scheduled: bool,
}

struct Dispatcher {
    ready: Mutex<VecDeque<Arc<Sink>>>,
    changed: Condvar,
}

/// This process's callback thread (see [`crate::core::per_process`] for `fork()`).
static DISPATCHER: PerProcess<Dispatcher> = PerProcess::new();

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The callback thread, started on first use; a failed start is tried again on the next use.
pub(super) fn start() -> io::Result<()> {
    dispatcher().map(drop)
}

fn dispatcher() -> io::Result<&'static Dispatcher> {
    DISPATCHER.get_or_start(
        THREAD_NAME,
        || {
            let fresh = Dispatcher {
                ready: Mutex::new(VecDeque::new()),
                changed: Condvar::new(),
            };
            Ok((fresh, ()))
        },
        |d, ()| serve(d),
    )
}

fn serve(d: &'static Dispatcher) {
    ON_CALLBACK_THREAD.with(|on| on.set(true));
    loop {
        let sink = {
            let mut ready = lock(&d.ready);
            loop {
                if let Some(sink) = ready.pop_front() {
                    break sink;
                }
                ready = d.changed.wait(ready).unwrap_or_else(|p| p.into_inner());
            }
        };
        let turn: Vec<(OutputStream, Vec<u8>)> = {
            let mut q = lock(&sink.queue);
            let n = q.lines.len().min(TURN_LINES);
            q.in_turn = n;
            q.lines.drain(..n).collect()
        };
        let bytes: usize = turn.iter().map(|(_, l)| l.len()).sum();
        if !sink.dead.load(Ordering::Relaxed) && !sink.pass(&turn) {
            sink.dead.store(true, Ordering::Relaxed);
        }
        drop(turn);
        let mut q = lock(&sink.queue);
        q.bytes -= bytes;
        q.in_turn = 0;
        if sink.dead.load(Ordering::Relaxed) {
            q.lines.clear();
            q.bytes = 0;
        }
        sink.passed.notify_all();
        if q.lines.is_empty() {
            q.scheduled = false;
        } else {
            drop(q);
            // Round robin: the other handles' lines first.
            lock(&d.ready).push_back(sink);
        }
    }
}

impl Sink {
    pub(super) fn new(on_line: Option<Arc<LineFn>>, prefix: Option<String>) -> Sink {
        Sink {
            on_line,
            prefix,
            queue: Mutex::new(Queue::default()),
            dropped: [AtomicU64::new(0), AtomicU64::new(0)],
            dead: AtomicBool::new(false),
            passed: Condvar::new(),
        }
    }

    /// Blocks until every line queued so far has been passed on (none waiting, none in a
    /// turn), or `deadline`. Never on the callback thread itself (see the module docs).
    pub(super) fn wait_passed_on(&self, deadline: Instant) -> PassedOn {
        let mut q = lock(&self.queue);
        let pending = |q: &Queue| q.lines.len() + q.in_turn;
        if ON_CALLBACK_THREAD.with(Cell::get) {
            return match pending(&q) {
                0 => PassedOn::All,
                n => PassedOn::FromCallback(n),
            };
        }
        loop {
            if pending(&q) == 0 {
                return PassedOn::All;
            }
            let now = Instant::now();
            if now >= deadline {
                return PassedOn::TimedOut(pending(&q));
            }
            q = self
                .passed
                .wait_timeout(q, deadline - now)
                .map(|(q, _)| q)
                .unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Whether lines are still wanted (false once the callback panicked).
    pub(super) fn wants_lines(&self) -> bool {
        !self.dead.load(Ordering::Relaxed)
    }

    /// On the loop thread: queues `lines` of `stream`, dropping (and counting) what does not
    /// fit, and puts the handle in the callback thread's round. Never blocks but on the
    /// queue's lock, which the callback thread holds only to move lines.
    pub(super) fn enqueue(self: &Arc<Self>, stream: OutputStream, lines: Vec<Vec<u8>>) {
        if self.dead.load(Ordering::Relaxed) {
            return;
        }
        let mut q = lock(&self.queue);
        let mut dropped = 0;
        for line in lines {
            if q.lines.len() + q.in_turn >= CALLBACK_QUEUE_LINES
                || q.bytes + line.len() > CALLBACK_QUEUE_BYTES
            {
                dropped += 1;
                continue;
            }
            q.bytes += line.len();
            q.lines.push_back((stream, line));
        }
        if dropped > 0 {
            self.dropped[stream.index()].fetch_add(dropped, Ordering::Relaxed);
        }
        if q.scheduled || q.lines.is_empty() {
            return;
        }
        match dispatcher() {
            Ok(d) => {
                q.scheduled = true;
                drop(q);
                lock(&d.ready).push_back(Arc::clone(self));
                d.changed.notify_one();
            }
            Err(_) => {
                // No callback thread (a forked child out of threads): drop, counted.
                for (s, _) in q.lines.drain(..) {
                    self.dropped[s.index()].fetch_add(1, Ordering::Relaxed);
                }
                q.bytes = 0;
            }
        }
    }

    /// Lines dropped so far, per stream (stdout, stderr).
    pub(super) fn dropped(&self) -> [u64; 2] {
        [
            self.dropped[0].load(Ordering::Relaxed),
            self.dropped[1].load(Ordering::Relaxed),
        ]
    }

    /// On the callback thread: passes `lines` on; `false` if the callback panicked (then it
    /// gets no more lines).
    fn pass(&self, lines: &[(OutputStream, Vec<u8>)]) -> bool {
        if let Some(prefix) = &self.prefix {
            use io::Write;
            let mut err = io::stderr().lock();
            for (_, line) in lines {
                let _ = err.write_all(prefix.as_bytes());
                let _ = err.write_all(line);
                let _ = err.write_all(b"\n");
            }
        }
        if let Some(f) = &self.on_line {
            let call = std::panic::AssertUnwindSafe(|| {
                for (stream, line) in lines {
                    f(*stream, line);
                }
            });
            return std::panic::catch_unwind(call).is_ok();
        }
        true
    }
}
