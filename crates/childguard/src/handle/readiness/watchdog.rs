//! The watchdog ([`Builder::watchdog`](crate::Builder::watchdog)): systemd's `WatchdogSec=`
//! for a child of ours. The child gets `WATCHDOG_USEC` and must send `WATCHDOG=1` on its
//! `NOTIFY_SOCKET` at least that often once it is ready; a deadline without one is a miss.
//!
//! Where it runs: on the one event loop (`core/event_loop.rs`), never a thread of its own.
//! Once readiness was awaited, the loop takes a duplicate of the notify socket as an io source
//! and the deadline as a timer. From then on the loop is the socket's only reader: it reads each
//! datagram with its sender, judges the sender (as the handle would), acts on `WATCHDOG=1`,
//! `WATCHDOG=trigger` and `WATCHDOG_USEC=` at once (re-arming the timer), and queues the
//! datagram for the handle, whose [`NotifySocket`](super::notify::NotifySocket) then reads the
//! queue instead of the socket and waits on the [`Bell`] the loop rings after each queueing.
//!
//! Races avoided:
//! - *Lost wake-up between the loop and a waiter*: the handle clears the bell before it takes
//!   the queue (both under the queue's lock), the loop queues before it rings: a datagram
//!   queued after the take rings a bell the waiter has not cleared.
//! - *A miss after the child exited by itself*: at the deadline the child's pidfd is looked at
//!   first; an exited child is no miss (the watchdog just stops).
//! - *A miss during the close*: the close disarms the watchdog before its first rung
//!   ([`Shared::stop`]); a deadline that fires later finds it stopped.
//! - *Last words lost in the hand-back*: the close takes the socket back ([`Shared::stop`])
//!   and reads it itself from then on; the loop drops its duplicate unread. The loop reads and
//!   queues under the lock the hand-back takes: a datagram is queued before the close's first
//!   take or left on the socket for the close, never read by the loop after its last look.
//!
//! On a miss: [`OnMiss::Close`] climbs the handle's ladder (without its EOF wait: the socket
//! stays open) on the loop — the library's one [`Climb`], the same state machine a close
//! steps, so rungs the server ignores are skipped and a refused signal ends it as in a close.
//! Its target is the child pinned by a duplicate of its pidfd ([`Pinned`](crate::close::target::Pinned): the leader, or its
//! process group with `process_group`); the loop steps it at each deadline (one timer) until
//! the pidfd says the child exited. The handle's close, which the user still calls (or the
//! drop), does the rest — the cgroup's `cgroup.kill`, the reap, the report, which says
//! "watchdog missed at +X ms" and lists the climb's signals. A close that begins while the
//! climb goes on takes it over ([`Shared::stop`] hands back the last signal sent): it resumes
//! behind that rung, as after a `ChildHandle::kill`, so there is one climb at a time and the
//! child never gets a weaker signal again.
//! [`OnMiss::Call`] instead runs the user's callback on a thread started for that one call
//! (user code never runs on the loop; a miss happens at most once per handle).

use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(crate) use super::miss::{parse, Message, OnMiss, WatchdogMiss};
use super::notify_access::{Access, Sender, MAX_DATAGRAM};
use crate::base::signal::Signal;
use crate::close::climb::Climb;
use crate::core::bell::Bell;
use crate::core::event_loop::{self, IoId, Ops, TimerId};
use crate::sys::peer;

/// One datagram the loop read, for the handle to act on.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) at: Instant,
    /// The sender's pid if it may speak, else why not.
    pub(crate) verdict: Result<u32, String>,
    pub(crate) data: Vec<u8>,
    pub(crate) len: usize,
}

/// What the loop and the handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    bell: Bell,
    state: Mutex<State>,
}

/// At most this many datagrams wait for the handle; older ones are dropped (and counted).
const MAX_QUEUED: usize = 1024;

/// Whether a datagram is nothing but `WATCHDOG=1` lines.
fn only_pings(data: &[u8]) -> bool {
    std::str::from_utf8(data).is_ok_and(|text| {
        text.split('\n')
            .filter(|l| !l.is_empty())
            .all(|l| l == "WATCHDOG=1")
    })
}

#[derive(Debug, Default)]
struct State {
    queued: Vec<Queued>,
    /// Datagrams dropped because the queue was full.
    dropped: usize,
    /// The current interval; `None`: off (`WATCHDOG_USEC=0`).
    interval: Option<Duration>,
    timer: Option<TimerId>,
    io: Option<IoId>,
    missed: Option<WatchdogMiss>,
    /// The close began (no more misses) or the socket is gone (`gone`).
    stopped: bool,
    /// The close took the socket back ([`Shared::stop`]): the handle reads it, the loop no
    /// longer does.
    handed_back: bool,
    gone: bool,
    /// What the loop did: signals sent on a miss, a spawn failure of the callback's thread.
    notes: Vec<String>,
    /// The miss's climb ([`OnMiss::Close`]), from the miss until the close takes it over.
    climb: Option<Climb>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// The fd a waiter waits on instead of the socket.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.bell.fd()
    }

    /// Takes what the loop queued (the bell cleared first, under the lock).
    pub(crate) fn take(&self) -> Vec<Queued> {
        let mut state = lock(&self.state);
        let _ = self.bell.clear();
        std::mem::take(&mut state.queued)
    }

    pub(crate) fn missed(&self) -> Option<WatchdogMiss> {
        lock(&self.state).missed
    }

    pub(crate) fn notes(&self) -> Vec<String> {
        let state = lock(&self.state);
        let mut notes = state.notes.clone();
        if state.dropped > 0 {
            notes.push(format!(
                "{} datagrams dropped: more than {MAX_QUEUED} waited for the handle",
                state.dropped
            ));
        }
        notes
    }

    /// The close began: no miss from now on, a miss's climb under way stops here, and the
    /// socket is the handle's again (the loop drops its duplicate unread; what it queued
    /// before stays for [`take`](Shared::take)). Returns the last signal that climb sent and
    /// when, for the close to resume behind it. Races avoided: *two climbs* — the loop steps
    /// the climb under the same lock and finds it stopped, so no rung of it goes out after
    /// this returns; *last words lost in the hand-back* (module docs).
    pub(crate) fn stop(self: &Arc<Self>) -> Option<(Signal, Instant)> {
        let last = {
            let mut state = lock(&self.state);
            state.stopped = true;
            state.handed_back = true;
            state.climb.take().and_then(|climb| {
                let last = climb.sent().last()?;
                Some((last.signal, climb.started() + last.at))
            })
        };
        self.post_cleanup(true);
        last
    }

    /// Whether the loop reads the socket (and the handle its queue): until the close took it
    /// back ([`Shared::stop`]).
    pub(crate) fn loop_reads(&self) -> bool {
        !lock(&self.state).handed_back
    }

    /// The socket is gone: the loop drops its duplicate and the timer.
    pub(crate) fn drop_socket(self: &Arc<Self>) {
        {
            let mut state = lock(&self.state);
            state.stopped = true;
            state.gone = true;
        }
        self.post_cleanup(true);
    }

    fn post_cleanup(self: &Arc<Self>, io_too: bool) {
        let Some(lp) = event_loop::running() else {
            return;
        };
        let shared = Arc::clone(self);
        lp.post(move |ops| {
            let mut state = lock(&shared.state);
            if let Some(timer) = state.timer.take() {
                ops.cancel_timer(timer);
            }
            if io_too {
                if let Some(io) = state.io.take() {
                    drop(state);
                    drop(ops.remove_io(io));
                }
            }
        });
    }
}

/// Starts the watchdog on the loop: `socket` a duplicate of the notify socket (the loop owns
/// it from now on), `access` who may speak, `interval` the first deadline's distance from now
/// (`None`: off until a `WATCHDOG_USEC=` turns it on).
pub(crate) fn start(
    socket: OwnedFd,
    access: Access,
    interval: Option<Duration>,
    pid: u32,
    spawned: Instant,
    on_miss: OnMiss,
) -> io::Result<Arc<Shared>> {
    let shared = Arc::new(Shared {
        bell: Bell::new()?,
        state: Mutex::new(State {
            interval,
            ..State::default()
        }),
    });
    let lp = event_loop::get()?;
    let dog = Arc::new(Dog {
        shared: Arc::clone(&shared),
        access,
        pid,
        spawned,
        on_miss,
    });
    lp.post(move |ops| {
        let handler_dog = Arc::clone(&dog);
        let handler = Box::new(move |ops: &mut Ops, id: IoId| handler_dog.readable(ops, id));
        match ops.add_io(socket, handler) {
            Ok(id) => {
                let mut state = lock(&dog.shared.state);
                if state.gone {
                    drop(state);
                    drop(ops.remove_io(id));
                    return;
                }
                state.io = Some(id);
                drop(state);
                dog.rearm(ops, Instant::now());
            }
            Err((_, e)) => {
                let mut state = lock(&dog.shared.state);
                state.notes.push(format!(
                    "watchdog not started: the event loop refused the socket: {e}"
                ));
                drop(state);
                dog.shared.bell.ring();
            }
        }
    });
    Ok(shared)
}

/// The loop's side (lives on the loop thread through its handlers).
struct Dog {
    shared: Arc<Shared>,
    access: Access,
    pid: u32,
    spawned: Instant,
    on_miss: OnMiss,
}

// The fields are touched only on the loop thread; `Access` and the fds are plain data.
impl Dog {
    /// The socket is readable: every datagram read, judged, acted on and queued — unless the
    /// close took the socket back: then its source is removed unread.
    fn readable(self: &Arc<Self>, ops: &mut Ops, id: IoId) {
        crate::failpoint::before_watchdog_read(|| lock(&self.shared.state).gone);
        // Read and queued under the lock the hand-back takes (*last words lost in the
        // hand-back*, module docs).
        let mut state = lock(&self.shared.state);
        if state.handed_back {
            state.io = None;
            drop(state);
            drop(ops.remove_io(id));
            return;
        }
        let mut read = Vec::new();
        if let Some(fd) = ops.fd(id) {
            let mut buf = vec![0u8; MAX_DATAGRAM + 1];
            loop {
                let received = match peer::recv_with_sender(fd, &mut buf) {
                    Ok(received) => received,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                let sender = Sender {
                    pid: received.pid,
                    pidfd: received.pidfd,
                };
                let verdict = self.access.judge(&sender);
                drop(sender);
                let bytes = received.len.min(buf.len());
                read.push(Queued {
                    at: Instant::now(),
                    verdict,
                    data: buf[..bytes].to_vec(),
                    len: received.len,
                });
            }
        }
        if read.is_empty() {
            return;
        }
        let mut messages = Vec::new();
        for q in read.iter().filter(|q| q.verdict.is_ok()) {
            if q.len > MAX_DATAGRAM {
                continue;
            }
            let Ok(text) = std::str::from_utf8(&q.data) else {
                continue;
            };
            for line in text.split('\n') {
                if let Some((key, value)) = line.split_once('=') {
                    if let Some(Ok(m)) = parse(key, value) {
                        messages.push((q.at, m));
                    }
                }
            }
        }
        // A datagram that is only `WATCHDOG=1` has nothing for the handle: not queued, so a
        // server that pings for hours while nobody calls the handle costs no memory. The rest
        // is bounded too (the oldest dropped, counted).
        read.retain(|q| q.verdict.is_err() || !only_pings(&q.data));
        state.queued.extend(read);
        let excess = state.queued.len().saturating_sub(MAX_QUEUED);
        if excess > 0 {
            state.queued.drain(..excess);
            state.dropped += excess;
        }
        let active = !state.stopped && state.missed.is_none();
        drop(state);
        self.shared.bell.ring();
        if !active {
            return;
        }
        for (at, message) in messages {
            match message {
                Message::Ping => self.rearm(ops, at),
                Message::Interval(interval) => {
                    lock(&self.shared.state).interval = interval;
                    self.rearm(ops, at);
                }
                Message::Trigger => {
                    self.miss(ops, true);
                    return;
                }
            }
        }
    }

    /// The next deadline: `from` plus the interval (none while the interval is off).
    fn rearm(self: &Arc<Self>, ops: &mut Ops, from: Instant) {
        let mut state = lock(&self.shared.state);
        if let Some(timer) = state.timer.take() {
            ops.cancel_timer(timer);
        }
        if state.stopped || state.missed.is_some() {
            return;
        }
        let Some(interval) = state.interval else {
            return;
        };
        drop(state);
        let dog = Arc::clone(self);
        let at = crate::core::wait::later(from, interval);
        let timer = ops.add_timer(at, move |ops| {
            lock(&dog.shared.state).timer = None;
            dog.miss(ops, false);
        });
        lock(&self.shared.state).timer = Some(timer);
    }

    fn miss(self: &Arc<Self>, ops: &mut Ops, triggered: bool) {
        let mut state = lock(&self.shared.state);
        if state.stopped || state.missed.is_some() {
            return;
        }
        if let Some(timer) = state.timer.take() {
            ops.cancel_timer(timer);
        }
        if !triggered && self.exited() {
            // Not a miss: the child ended by itself; the handle's waits see its exit.
            state.stopped = true;
            return;
        }
        let miss = WatchdogMiss {
            pid: self.pid,
            at: Instant::now().saturating_duration_since(self.spawned),
            triggered,
            interval: state.interval.unwrap_or_default(),
        };
        state.missed = Some(miss);
        drop(state);

        match &self.on_miss {
            OnMiss::Close {
                ladder,
                skip_ignored,
                ..
            } => {
                let ladder = ladder.clone().without_eof_grace();
                let climb = Climb::begin(&ladder, Instant::now(), None, false, *skip_ignored);
                lock(&self.shared.state).climb = Some(climb);
                self.step(ops);
            }
            OnMiss::Record => self.note(
                "watchdog: no pidfd for the child (portable mechanism): nothing sent in the \
                 background; the handle's close closes it"
                    .into(),
            ),
            OnMiss::Call(f) => {
                let f = Arc::clone(f);
                let started = std::thread::Builder::new()
                    .name("childguard-wdog".into())
                    .spawn(move || f(miss));
                if let Err(e) = started {
                    self.note(format!("watchdog callback not run: no thread for it: {e}"));
                }
            }
        }
        self.shared.bell.ring();
    }

    fn note(&self, note: String) {
        lock(&self.shared.state).notes.push(note);
    }

    /// Whether the child exited (its pidfd readable); `false` without one.
    fn exited(&self) -> bool {
        match &self.on_miss {
            OnMiss::Close { target, .. } => lock(target).exited(),
            _ => false,
        }
    }

    /// Steps the miss's climb: every rung now due goes out (each noted just before its
    /// signal: a caller woken by the exit it causes reads the report at once, maybe before
    /// this thread runs again — flake-hunt caught that), then a timer for the next deadline.
    /// Ends when the child exited, the ladder is used up, or the close took the climb over.
    fn step(self: &Arc<Self>, ops: &mut Ops) {
        let OnMiss::Close { target, .. } = &self.on_miss else {
            return;
        };
        // The state's lock first, then the target's, as in `miss` (only this thread takes the
        // target's, but one order everywhere).
        let mut state = lock(&self.shared.state);
        let mut target = lock(target);
        if state.gone || state.stopped || target.exited() {
            return;
        }
        let State { climb, notes, .. } = &mut *state;
        let Some(climb) = climb.as_mut() else {
            return;
        };
        let spawned = self.spawned;
        let skipped_before = climb.skipped().len();
        let stepped = climb.advance_announcing(&mut *target, Instant::now(), &mut |_, rung| {
            if rung.signal != Signal::NONE {
                let at = Instant::now().saturating_duration_since(spawned);
                notes.push(format!(
                    "watchdog: sent {} at +{:.1}ms after spawn",
                    rung.signal,
                    at.as_secs_f64() * 1000.0
                ));
            }
        });
        for skipped in &climb.skipped()[skipped_before..] {
            notes.push(format!(
                "watchdog: {} skipped (the server ignores it)",
                skipped.signal
            ));
        }
        if let Some((_, signal, e)) = climb.take_signal_error() {
            notes.push(format!("watchdog: {signal} not sent: {e}"));
        }
        let deadline = climb.deadline();
        match stepped {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                notes.push(format!("watchdog: the climb stopped: {e}"));
                return;
            }
        }
        drop(target);
        let dog = Arc::clone(self);
        state.timer = Some(ops.add_timer(deadline, move |ops| {
            lock(&dog.shared.state).timer = None;
            dog.step(ops);
        }));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_pure_ping_datagrams_are_left_unqueued() {
        assert!(super::only_pings(b"WATCHDOG=1"));
        assert!(super::only_pings(b"WATCHDOG=1\nWATCHDOG=1\n"));
        assert!(!super::only_pings(b"WATCHDOG=1\nSTOPPING=1"));
        assert!(!super::only_pings(b"WATCHDOG=trigger"));
        assert!(!super::only_pings(b"\xffWATCHDOG=1"));
    }
}
