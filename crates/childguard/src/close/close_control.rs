//! [`CloseControl`]: what the caller of [`ChildHandle::close_with`](crate::ChildHandle::close_with)
//! can tell a blocking close while it climbs — which ladder to climb, "go to the next rung
//! now", a word before each rung's signal goes out, and "stop waiting: hand the rest to the
//! background reaper".
//!
//! The climb itself stays [`Climb`](crate::close::climb::Climb)'s: this only changes what the wait
//! between its steps watches, so a supervisor (the `childguard` CLI) that must react to the
//! signals it receives drives the library's one climb instead of climbing on its own.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use crate::close::climb::Climb;
use crate::close::ladder::{Ladder, Rung};
use crate::core::wait::{self, Interrupt, Woke};
use crate::process::Process;

/// A wait of the climb done another way than [`Process::wait_with`] (the `output()` drain
/// reads the child's pipes meanwhile): given the process, the notify socket's fd, the deadline
/// and the interrupt; it must return by the deadline and may return earlier.
pub(crate) type Waiter<'a> =
    dyn FnMut(&Process, Option<BorrowedFd<'_>>, Instant, Option<&Interrupt>) -> io::Result<()> + 'a;

/// What a blocking close is told while it climbs ([`ChildHandle::close_with`]).
///
/// ```no_run
/// # use childguard::{ChildHandle, CloseControl};
/// # fn demo(handle: ChildHandle, signals: std::os::unix::net::UnixStream) -> childguard::Result<()> {
/// use std::os::fd::AsFd;
/// let report = handle.close_with(
///     CloseControl::new()
///         .ladder("INT:1s,TERM:2s,KILL:5s".parse().unwrap())
///         // readable: a signal arrived; drain it and go to the next rung now
///         .skip_when_readable(signals.as_fd(), || true)
///         .on_rung(|index, rung| eprintln!("rung {index}: sending {}", rung.signal)),
/// )?;
/// # Ok(()) }
/// ```
///
/// [`ChildHandle::close_with`]: crate::ChildHandle::close_with
#[derive(Default)]
#[must_use = "a CloseControl does nothing until passed to ChildHandle::close_with"]
pub struct CloseControl<'a> {
    pub(crate) ladder: Option<Ladder>,
    skip: Option<(BorrowedFd<'a>, Box<dyn FnMut() -> bool + 'a>)>,
    on_rung: Option<Box<dyn FnMut(usize, Rung) + 'a>>,
    hand_off: Option<(Duration, Box<dyn FnMut() -> bool + 'a>)>,
    interrupt: Option<Interrupt>,
    /// The interrupt check's error, once it ended a wait of the climb.
    interrupted: Option<io::Error>,
    waiter: Option<Box<Waiter<'a>>>,
}

impl<'a> CloseControl<'a> {
    /// A control that changes nothing: `close_with(CloseControl::new())` is `close()`.
    pub fn new() -> CloseControl<'a> {
        CloseControl::default()
    }

    /// Climb `ladder` (its EOF wait included) instead of the handle's. For a supervisor whose
    /// ladder depends on why it closes — e.g. a received signal forwarded as the first rung.
    pub fn ladder(mut self, ladder: Ladder) -> CloseControl<'a> {
        self.ladder = Some(ladder);
        self
    }

    /// Watch `fd` during every wait of the climb (the EOF wait and each rung's grace), in the
    /// same `poll` as the child's pidfd. When it turns readable, `woke` is called: it must
    /// drain what made `fd` readable (or the next wait wakes at once) without blocking, and
    /// returns whether to cut the current wait short — the next rung's signal then goes out at
    /// once. Once the last rung has been sent there is no next rung: its grace is the bound the
    /// close waits for, whatever `woke` says (so a skip can never make a close give up early).
    ///
    /// Typical `fd`: the read end of a self-pipe written by a signal handler
    /// (`signal_hook::low_level::pipe`), so a second Ctrl-C escalates at once. Only a blocking
    /// close ([`Reap::Blocking`](crate::Reap::Blocking)) waits; with `Reap::Background` the
    /// climb is the reaper's and `fd` is never watched.
    pub fn skip_when_readable(
        mut self,
        fd: BorrowedFd<'a>,
        woke: impl FnMut() -> bool + 'a,
    ) -> CloseControl<'a> {
        self.skip = Some((fd, Box::new(woke)));
        self
    }

    /// Called with each rung's index and rung just before its signal is sent (as
    /// `timeout -v` says "sending signal …" before it sends). It runs on the closing thread
    /// between the rungs: keep it short, it delays the signal.
    pub fn on_rung(mut self, f: impl FnMut(usize, Rung) + 'a) -> CloseControl<'a> {
        self.on_rung = Some(Box::new(f));
        self
    }

    /// Asks `stop` at least every `every` while the close waits (before each wait of the
    /// climb, and whenever a wait has run for `every`): when it returns `true`, the closing
    /// thread stops waiting, and what is left of the close — the rungs still to come, on their
    /// schedule, and the reap — goes to the background [`reaper`](crate::reaper), as with
    /// [`Reap::Background`](crate::Reap::Background). `close_with` then returns at once with
    /// the report so far ([`Ending::InBackground`](crate::Ending::InBackground),
    /// `handed_to_reaper`); call [`reaper::drain`](crate::reaper::drain) before exiting if the
    /// rest must happen in this process.
    ///
    /// For a caller that must react to something no fd shows: the Python binding calls
    /// `PyErr_CheckSignals` here, so Ctrl-C interrupts a `close()` within `every` and the
    /// child is still closed (by the reaper). `every` is bounded below by 1 ms; `stop` runs on
    /// the closing thread between the waits: keep it short. `stop` returning `true` at its
    /// first call makes the close a background one: shut down, the first due rung sent, done.
    pub fn hand_off_when(
        mut self,
        every: Duration,
        stop: impl FnMut() -> bool + 'a,
    ) -> CloseControl<'a> {
        self.hand_off = Some((every.max(Duration::from_millis(1)), Box::new(stop)));
        self
    }

    /// Calls `interrupt`'s check while the close waits — at least every
    /// [`INTERRUPT_CHECK_EVERY`](crate::INTERRUPT_CHECK_EVERY), and at once when a signal
    /// interrupts the wait (`EINTR`). When the check returns an error, the closing thread
    /// stops waiting and what is left of the close — the rungs still to come, on their
    /// schedule, and the reap — goes to the background [`reaper`](crate::reaper), as with
    /// [`hand_off_when`](CloseControl::hand_off_when). `close_with` then returns at once with
    /// [`ErrorKind::Interrupted`](crate::ErrorKind::Interrupted), the check's error as its
    /// source and the report so far ([`Error::close_report`](crate::Error::close_report):
    /// `handed_to_reaper`). Nothing is left unreaped: call
    /// [`reaper::drain`](crate::reaper::drain) before exiting if the rest must happen in this
    /// process.
    ///
    /// The Python binding passes `PyErr_CheckSignals` here: Ctrl-C during `close()` raises
    /// `KeyboardInterrupt` within 0.1 s.
    pub fn interrupt(mut self, interrupt: Interrupt) -> CloseControl<'a> {
        self.interrupt = Some(interrupt);
        self
    }

    /// Every wait of the climb done by `waiter` instead (see [`Waiter`]).
    pub(crate) fn waiter(
        mut self,
        waiter: impl FnMut(&Process, Option<BorrowedFd<'_>>, Instant, Option<&Interrupt>) -> io::Result<()>
            + 'a,
    ) -> CloseControl<'a> {
        self.waiter = Some(Box::new(waiter));
        self
    }

    /// The interrupt check's error, if it ended the climb's waiting.
    pub(crate) fn take_interrupted(&mut self) -> Option<io::Error> {
        self.interrupted.take()
    }

    /// Whether [`hand_off_when`](CloseControl::hand_off_when)'s `stop` says to stop waiting
    /// now (`false` without one).
    pub(crate) fn hands_off(&mut self) -> bool {
        self.hand_off.as_mut().is_some_and(|(_, stop)| stop())
    }

    /// `deadline`, or sooner, so that `stop` is asked every `every`.
    fn wake_by(&self, deadline: Instant) -> Instant {
        match &self.hand_off {
            Some((every, _)) => deadline.min(crate::core::wait::later(Instant::now(), *every)),
            None => deadline,
        }
    }

    /// The callback for [`Climb::run_blocking`].
    pub(crate) fn announce(&mut self, index: usize, rung: Rung) {
        if let Some(f) = self.on_rung.as_mut() {
            f(index, rung);
        }
    }

    /// One wait of the blocking climb: until `deadline`, the child's exit, a datagram on the
    /// `NOTIFY_SOCKET` (read by the climb's next step), or `fd` readable (a skip goes to
    /// `climb`) — and no longer than `hand_off_when`'s period — in one [`Process::wait_with`].
    /// Returns early on any of them; the climb loop re-checks. `Ok(false)`: the interrupt
    /// check ended the wait (its error is kept for [`CloseControl::take_interrupted`]): stop
    /// waiting, hand the rest to the reaper.
    pub(crate) fn wait(
        &mut self,
        climb: &mut Climb,
        process: &Process,
        deadline: Instant,
    ) -> io::Result<bool> {
        let deadline = self.wake_by(deadline);
        let interrupt = self.interrupt.as_ref();
        let waited = match self.waiter.as_mut() {
            Some(waiter) => waiter(process, climb.notify_fd(), deadline, interrupt).map(|()| None),
            None => {
                let skip_fd = self.skip.as_ref().map(|(fd, _)| *fd);
                let (pair, one);
                // The caller's fd first (index 0), then the notify socket: no allocation.
                let extra: &[BorrowedFd<'_>] = match (skip_fd, climb.notify_fd()) {
                    (Some(a), Some(b)) => {
                        pair = [a, b];
                        &pair
                    }
                    (Some(a), None) | (None, Some(a)) => {
                        one = [a];
                        &one
                    }
                    (None, None) => &[],
                };
                process.wait_with(extra, deadline, interrupt).map(Some)
            }
        };
        let woke = match waited {
            Ok(woke) => woke,
            Err(e) if wait::is_interrupt(&e) => {
                self.interrupted = Some(e);
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        if let (Some(Woke::Readable(readable)), Some((_, woke))) = (woke, self.skip.as_mut()) {
            if readable.contains(0) && woke() {
                climb.skip(Instant::now());
            }
        }
        Ok(true)
    }
}

impl fmt::Debug for CloseControl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloseControl")
            .field("ladder", &self.ladder)
            .field("skip_fd", &self.skip.as_ref().map(|(fd, _)| *fd))
            .field("on_rung", &self.on_rung.is_some())
            .field(
                "hand_off_every",
                &self.hand_off.as_ref().map(|(every, _)| *every),
            )
            .field("interrupt", &self.interrupt.is_some())
            .finish()
    }
}

/// The controlled driver of a [`Climb`] lives beside [`CloseControl`], which it calls at every
/// step; the climb itself knows nothing of the control (issue 21 item 5: no circle between
/// `climb` and `close_control`).
impl Climb {
    /// The one driver of the blocking climb (`close()`, `close_with`, the drop, `output()`,
    /// the CLI and the C API all come here): blocks until `process` is gone (`Ok(true)`) or the
    /// ladder is used up (`Ok(false)`). No sleep-polling: each wait is one
    /// [`Wait`](crate::core::wait::Wait) on the child's pidfds (or the `SIGCHLD` generation),
    /// the notify socket and `control`'s fd, bounded by the current deadline; `control` hears
    /// of each rung before it is sent, and may stop the waiting before each wait
    /// ([`CloseControl::hand_off_when`]) or during one (its interrupt): `Ok(false)` then, the
    /// ladder not used up, which makes `Closing::finish` hand the climb to the reaper.
    pub(crate) fn run_blocking(
        &mut self,
        process: &mut Process,
        control: &mut CloseControl<'_>,
    ) -> io::Result<bool> {
        self.release_inline();
        // Race avoided (an exit between the caller's look and the wait, unseen): see
        // `wait_shows_exit` — the look before the first wait is left to the wait only when
        // the wait itself returns at once for an exited child.
        if !wait_shows_exit(self, process) && process.is_gone()? {
            return Ok(true);
        }
        loop {
            let mut announce = |index, rung| control.announce(index, rung);
            if !self.advance_announcing(process, Instant::now(), &mut announce)? {
                return Ok(false);
            }
            // Asked after the due rungs went out and before the wait.
            if control.hands_off() {
                return Ok(false);
            }
            let deadline = self.deadline();
            if !control.wait(self, process, deadline)? {
                return Ok(false);
            }
            if process.is_gone()? {
                return Ok(true);
            }
        }
    }
}

/// Whether the look (`waitid`) before the first wait can be left to that wait: the leader
/// runs — seen by the caller's look, which `begin_close` makes just before the shutdown — its
/// exit wakes the wait (its pidfd turns readable, and stays so: a child that exited between
/// that look and the wait makes the wait return at once, and the look after it sees the exit),
/// and no rung is due now (a due rung is sent only after a look, so a child gone meanwhile is
/// not signalled). Saves a `waitid` on every cooperative close: the EOF the shutdown sent has
/// not been read yet.
fn wait_shows_exit(climb: &Climb, process: &Process) -> bool {
    process.is_running() && !process.waits_on_sigchld() && climb.deadline() > Instant::now()
}
