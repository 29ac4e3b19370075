//! [`Climb`]: one run up a [`Ladder`], as a state machine that any driver can step — the
//! blocking close path, the background reaper, the tokio face, or the event loop on a
//! watchdog miss — towards any [`Target`] (our own child, or a process pinned by a pidfd).

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use crate::base::signal::Signal;
use crate::close::ladder::{Ladder, Rung};
use crate::close::release::{self, Release};
use crate::close::report::{CloseReport, Ending, NotifyReport, SentSignal, SkippedRung};
use crate::close::target::Target;
use crate::core::wait::later;
use crate::process::disposition::Disposition;
use crate::process::Process;

mod main_exit;

/// Where a close stands on its ladder.
#[derive(Debug)]
pub(crate) struct Climb {
    ladder: Ladder,
    /// Index of the next rung to send.
    next_rung: usize,
    /// End of the current wait (EOF grace or the last sent rung's grace), as extended.
    deadline: Instant,
    /// How far the server may extend a wait beyond its grace (`EXTEND_TIMEOUT_USEC=`, see
    /// [`Climb::extend`]); zero: not at all.
    extend_max: Duration,
    /// The current wait's deadline before any extension, plus `extend_max`.
    hard_deadline: Instant,
    /// When the close began; report offsets are measured from here.
    started: Instant,
    /// Signals sent; each was sent at `started + at`.
    sent: Vec<SentSignal>,
    /// Skip a catchable rung whose signal the child ignores ([`Ladder::skip_ignored`], and
    /// [`Builder::skip_ignored_rungs`](crate::Builder::skip_ignored_rungs): both must allow it).
    skip_ignored: bool,
    /// Rungs skipped so far (see [`Climb::skip_if_ignored`]).
    skipped: Vec<SkippedRung>,
    /// A signal sent by `ChildHandle::kill` before the close, and when.
    earlier_kill: Option<(Signal, Instant)>,
    /// Ask for `process_mrelease` after a `SIGKILL` rung.
    release_memory: bool,
    /// The `process_mrelease` asked for after the `SIGKILL` rung, if any (`release.rs`).
    release: Option<Release>,
    /// Whether the thread stepping this climb may start a release (a blocking close, the
    /// reaper thread): it waits up to `release::HANDOFF` for the helper thread to be ready.
    /// An async task or a background close, which must return at once, starts none.
    release_inline: bool,
    /// A signal the kernel refused (`EPERM`/`EACCES` from an LSM or a child that changed its
    /// uid, …): the rung it belonged to and the error. The climb then sends nothing more.
    signal_error: Option<(usize, Signal, io::Error)>,
    /// The child's `NOTIFY_SOCKET` ([`Ready::Notify`](crate::Ready::Notify)), read before every
    /// step ([`Climb::hear`]) by whichever driver climbs — blocking close, reaper, tokio — so
    /// `STOPPING=1` is recorded and `EXTEND_TIMEOUT_USEC=` extends the wait on every path. It
    /// travels with the climb: a climb handed to the reaper takes it along, and it is removed
    /// (with its directory) when the climb is dropped.
    notify: Option<Box<dyn Listener>>,
    /// The main process's exit was seen and the rung that ended it passed on to the others
    /// (`main_exit.rs`).
    main_exit_passed: bool,
}

/// What the climb hears from the child while it climbs: its `NOTIFY_SOCKET`
/// (`spawn/readiness/notify.rs` makes it, for [`Ready::Notify`](crate::Ready::Notify)). The
/// socket belongs to the spawn layer, above the close: the climb knows it only through this
/// trait, so `close/` imports nothing of `spawn/` (issue 21 item 5).
pub(crate) trait Listener: std::fmt::Debug + Send {
    /// The longest extension the child may ask for (`EXTEND_TIMEOUT_USEC=`).
    fn extend_max(&self) -> Duration;
    /// The fd a wait watches to hear the child.
    fn fd(&self) -> BorrowedFd<'_>;
    /// Reads what came; the extended deadline if the child asked for one.
    fn receive(&mut self) -> Option<Instant>;
    /// What the child said so far, for a report.
    fn report(&self, close_started: Instant) -> NotifyReport;
    /// What the child said, the socket closed and removed.
    fn finish(self: Box<Self>, close_started: Instant) -> NotifyReport;
    /// `MAINPID=`: sends `signal` (and `SIGCONT` after a catchable one) to the server's main
    /// process if the child named one that still runs: `Some(Ok(pid))`. `None`: there is none
    /// (or it exited), the child is the target.
    fn signal_main(&mut self, signal: Signal) -> Option<io::Result<u32>>;
}

impl Climb {
    /// Starts a climb at `started`.
    ///
    /// Without an earlier kill, the first rung is due after the EOF grace (at once if there is
    /// none). After `kill(sig, …)`, the climb resumes behind the *first* rung that sends `sig`
    /// (so a later repeat of `sig` never lets it skip a stronger rung in between),
    /// and first waits out that rung's grace counted from the kill: the caller already took
    /// that step, so the child gets no second, weaker signal while it is dying.
    ///
    /// `skip_ignored`: the handle's [`Builder::skip_ignored_rungs`](crate::Builder::skip_ignored_rungs);
    /// rungs are skipped only if the ladder allows it too.
    pub(crate) fn begin(
        ladder: &Ladder,
        started: Instant,
        earlier_kill: Option<(Signal, Instant)>,
        release_memory: bool,
        skip_ignored: bool,
    ) -> Climb {
        let resumed = earlier_kill.and_then(|(signal, at)| {
            let index = ladder.rungs().iter().position(|r| r.signal == signal)?;
            Some((index + 1, later(at, ladder.rungs()[index].grace)))
        });
        let (next_rung, deadline) =
            resumed.unwrap_or((0, later(started, ladder.eof_grace().unwrap_or_default())));
        Climb {
            ladder: ladder.clone(),
            next_rung,
            deadline,
            extend_max: Duration::ZERO,
            hard_deadline: deadline,
            started,
            sent: Vec::new(),
            skip_ignored: skip_ignored && ladder.skips_ignored(),
            skipped: Vec::new(),
            earlier_kill,
            release_memory,
            release: None,
            release_inline: false,
            signal_error: None,
            notify: None,
            main_exit_passed: false,
        }
    }

    /// Reads `notify` during this climb: every wait may be extended by up to its
    /// [`notify_extend_max`](crate::Builder::notify_extend_max) beyond its grace.
    pub(crate) fn listen_to(&mut self, notify: impl Listener + 'static) {
        self.allow_extension(notify.extend_max());
        self.notify = Some(Box::new(notify));
    }

    /// The notify socket's fd, for a driver to wait on along with the child's fds: readable
    /// means a datagram came, which [`Climb::hear`] (run by every step) reads. Not the child's
    /// state: a driver must not take it for the pidfd.
    pub(crate) fn notify_fd(&self) -> Option<BorrowedFd<'_>> {
        self.notify.as_ref().map(|n| n.fd())
    }

    /// Reads every datagram waiting on the notify socket, never blocking: `STOPPING=1` is
    /// recorded, an `EXTEND_TIMEOUT_USEC=` [extends](Climb::extend) the current wait. Called
    /// at the start of every step, before any due rung is sent — so an extension asked for
    /// before the deadline is honoured even by a driver that did not wake for it (the
    /// `output` drain, which watches only the pipes and the pidfd): race avoided, *extension
    /// read after its deadline*.
    pub(crate) fn hear(&mut self) {
        if let Some(until) = self.notify.as_mut().and_then(|n| n.receive()) {
            self.extend(until);
        }
    }

    /// What the notify socket heard so far (for a report made while the climb goes on in the
    /// reaper); the socket stays open. Hears it first. Race avoided: *last words unheard* — a
    /// child that sends `STOPPING=1` and exits wakes the wait by its exit, and the climb ends
    /// on `is_gone` before any step hears; what it sent before it exited is queued on our
    /// socket by then (a Unix datagram is delivered by the `send` itself), so reading here
    /// gets it.
    pub(crate) fn notify_report(&mut self, close_started: Instant) -> Option<NotifyReport> {
        self.hear();
        self.notify.as_ref().map(|n| n.report(close_started))
    }

    /// Takes the notify socket out (the climb is over): its report (heard to the end, as in
    /// [`Climb::notify_report`]), and the socket removed.
    pub(crate) fn finish_notify(&mut self, close_started: Instant) -> Option<NotifyReport> {
        self.hear();
        self.notify.take().map(|n| n.finish(close_started))
    }

    /// When the current wait ends.
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether every rung was sent and the last grace has run out.
    pub(crate) fn is_exhausted(&self, now: Instant) -> bool {
        self.next_rung >= self.ladder.rungs().len() && now >= self.deadline
    }

    /// Sends the next rung's signal (and `SIGCONT` after a catchable one, so a stopped child
    /// sees it) and starts its grace. Returns `false` when no rung is left.
    ///
    /// A `SIGKILL` rung on a big child first starts a memory release (`release.rs`): its
    /// helper thread sends `SIGKILL` and calls `process_mrelease` at once (the `exit_mm`
    /// race); the rung's own signal follows, to the group too, as for any rung. The wait that
    /// follows is bounded by the rung's deadline whatever the release takes.
    ///
    /// `disposition`: what the child did with the rung's signal just before (for the report).
    fn send_next<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        disposition: Option<Disposition>,
    ) -> io::Result<bool> {
        let Some(rung) = self.ladder.rungs().get(self.next_rung).copied() else {
            return Ok(false);
        };
        if rung.signal == Signal::KILL && self.release_inline && self.release.is_none() {
            if let Some(owned) = target.owned() {
                self.start_release(owned);
            }
        }
        let now = Instant::now();
        // MAINPID=: a catchable rung goes to the server's main process instead of the child
        // (`KILL` to both); once it exited, to the child again (`readiness/main_pid.rs`).
        let main = self
            .notify
            .as_mut()
            .and_then(|n| n.signal_main(rung.signal));
        let to_main = matches!(main, Some(Ok(_))) && rung.signal.is_catchable();
        let (_, reached) = if to_main {
            (true, Some(1))
        } else {
            match target.signal_counting(rung.signal) {
                Ok(counted) => counted,
                Err(e) => {
                    if let Some(release) = &mut self.release {
                        release.kill_refused();
                    }
                    return Ok(self.give_up(rung.signal, e, now));
                }
            }
        };
        if rung.signal.is_catchable() && !to_main {
            if let Err(e) = target.signal_counting(Signal::CONT) {
                return Ok(self.give_up(Signal::CONT, e, now));
            }
        }
        crate::base::trace::rung(target.pid(), self.next_rung, rung.signal, reached);
        self.sent.push(SentSignal {
            signal: rung.signal,
            at: now.saturating_duration_since(self.started),
            rung: self.next_rung,
            to_group: target.leads_group() && !to_main,
            to_cgroup: target.reaches_cgroup(rung.signal) && !to_main,
            reached,
            disposition,
            to_rest: false,
        });
        self.next_rung += 1;
        // The grace counts from when the signal went out: microseconds after `now`, but a
        // container's rung is an engine call (~0.1 s, more under load) — its grace must not be
        // spent on the engine.
        self.deadline = later(Instant::now().max(now), rung.grace);
        self.hard_deadline = later(self.deadline, self.extend_max);
        Ok(true)
    }

    /// Lets the server extend each wait by up to `max` beyond its grace (see
    /// [`Climb::extend`]).
    pub(crate) fn allow_extension(&mut self, max: Duration) {
        self.extend_max = max;
        self.hard_deadline = later(self.deadline, max);
    }

    /// The server asked for its current wait to last until `until` (`EXTEND_TIMEOUT_USEC=`,
    /// systemd's semantics: a later message may extend it again): the deadline moves there, but
    /// never earlier than the grace and never beyond it plus [`Climb::allow_extension`]'s
    /// maximum — a flushing database gets its time, a hung one that keeps asking does not.
    pub(crate) fn extend(&mut self, until: Instant) {
        if until > self.deadline {
            self.deadline = until.min(self.hard_deadline);
        }
    }

    /// After a signal the kernel refused: no rung is left to send (a retry would be refused
    /// alike, and a later, stronger rung too — EPERM is about who we are, not which signal),
    /// and the climb is over now. Whoever drives it still watches the child and reaps it when
    /// it exits; the error goes to the report ([`Climb::take_signal_error`]). Returns `false`,
    /// as [`Climb::send_next`] does when no rung is left.
    fn give_up(&mut self, signal: Signal, e: io::Error, now: Instant) -> bool {
        self.signal_error = Some((self.next_rung, signal, e));
        self.next_rung = self.ladder.rungs().len();
        self.deadline = now;
        false
    }

    /// The signal the kernel refused, if one was: rung index, signal, error.
    pub(crate) fn take_signal_error(&mut self) -> Option<(usize, Signal, io::Error)> {
        self.signal_error.take()
    }

    /// Lets the thread that steps this climb start memory releases (it may wait up to
    /// `release::HANDOFF` for one's helper thread).
    pub(crate) fn release_inline(&mut self) {
        self.release_inline = true;
    }

    /// Advances without blocking: sends every rung whose time has come. Returns `false` once
    /// the ladder is used up and its last grace has passed.
    pub(crate) fn advance<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        now: Instant,
    ) -> io::Result<bool> {
        self.advance_announcing(target, now, &mut |_, _| {})
    }

    /// [`advance`](Climb::advance), calling `announce` with each rung just before its signal
    /// goes out. First [hears](Climb::hear) the notify socket: an extension moves the deadline
    /// before it is compared with `now`.
    pub(crate) fn advance_announcing<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        now: Instant,
        announce: &mut dyn FnMut(usize, Rung),
    ) -> io::Result<bool> {
        self.hear();
        self.pass_on_main_exit(target, now)?;
        while now >= self.deadline {
            let disposition = self.next_disposition(target);
            if self.skip_if_ignored(disposition, now) {
                let skipped = self.skipped.last().map(|s| (s.rung, s.signal));
                if let Some((index, signal)) = skipped {
                    crate::base::trace::rung_skipped(target.pid(), index, signal);
                }
                continue;
            }
            if let Some(rung) = self.ladder.rungs().get(self.next_rung) {
                announce(self.next_rung, *rung);
            }
            if !self.send_next(target, disposition)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// What the child does with the next rung's signal now (`process/disposition.rs`: the
    /// leader's, while it runs; `None` for `KILL`/`STOP`, off Linux, or when unknown).
    fn next_disposition<T: Target + ?Sized>(&self, target: &T) -> Option<Disposition> {
        let rung = self.ladder.rungs().get(self.next_rung)?;
        target.disposition(rung.signal)
    }

    /// Before a `SIGKILL` rung to a child we own: sizes it (before the kill: afterwards it
    /// drops its memory within microseconds) and starts its memory release if it is worth one.
    fn start_release(&mut self, process: &mut Process) {
        match release::plan(self.release_memory, process) {
            release::Plan::Nothing => {}
            release::Plan::Skip(reason) => self.release = Some(Release::skipped(reason)),
            release::Plan::Release => {
                if let Some(pidfd) = process.pidfd() {
                    self.release = Some(Release::kill_and_release(pidfd, process.pid()));
                }
            }
        }
    }

    /// The signals sent so far, and when (after [`Climb::record`]: none, they moved into the
    /// report).
    #[cfg(target_os = "linux")]
    pub(crate) fn sent(&self) -> &[SentSignal] {
        &self.sent
    }

    /// The rungs skipped so far.
    #[cfg(target_os = "linux")]
    pub(crate) fn skipped(&self) -> &[SkippedRung] {
        &self.skipped
    }

    /// When the climb began (the signals' `at` counts from here).
    #[cfg(target_os = "linux")]
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Skips the next rung at once if the child ignores its signal and skipping is on: nothing
    /// is sent, its grace is not spent (the deadline is now, so the next rung is due at once),
    /// the report lists it. Never the last rung: its grace is the bound the close promised to
    /// wait (and a ladder ending in `KILL` ends in a rung no process can ignore). The race
    /// between this read and the signal is bounded in `process/disposition.rs`: a server that
    /// stopped ignoring meanwhile gets the next, stronger rung at once; one that started
    /// ignoring costs that rung's grace, as without the read.
    fn skip_if_ignored(&mut self, disposition: Option<Disposition>, now: Instant) -> bool {
        let last = self.next_rung + 1 >= self.ladder.rungs().len();
        if !self.skip_ignored || last || disposition != Some(Disposition::Ignored) {
            return false;
        }
        let signal = self.ladder.rungs()[self.next_rung].signal;
        self.skipped.push(SkippedRung {
            rung: self.next_rung,
            signal,
            at: now.saturating_duration_since(self.started),
        });
        self.next_rung += 1;
        self.deadline = now;
        self.hard_deadline = later(now, self.extend_max);
        true
    }

    /// Cuts the current wait short at `now`: the EOF wait or the grace of a rung that has a
    /// next one ([`CloseControl::skip_when_readable`](crate::CloseControl::skip_when_readable)).
    /// The last rung's grace is never cut: it is the bound the close promised to wait.
    pub(crate) fn skip(&mut self, now: Instant) {
        if self.next_rung < self.ladder.rungs().len() && now < self.deadline {
            self.deadline = now;
            self.hard_deadline = later(now, self.extend_max);
        }
    }

    /// Fills the signal, exit and ending parts of `report`. The signals move into the report:
    /// a climb handed to the reaper afterwards reports nothing more.
    pub(crate) fn record(&mut self, process: &Process, report: &mut CloseReport) {
        // Inside the remaining grace only: a release still running then is `Unfinished`.
        let deadline = self.deadline;
        report.memory_release = self.release.as_mut().map(|r| r.outcome(deadline));
        report.status = process.status();
        report.signals = std::mem::take(&mut self.sent);
        report.skipped.append(&mut self.skipped);
        let Some(exited_at) = process.exited_at() else {
            report.ended_by = Ending::Outlived;
            return;
        };
        report.exited = Some(exited_at.saturating_duration_since(self.started));
        let sent_by_exit = |s: &&SentSignal| self.started + s.at <= exited_at;
        let last_before_exit = report.signals.iter().rev().find(sent_by_exit);
        report.default_action = last_before_exit.is_some_and(|s| {
            s.disposition == Some(Disposition::Default) && died_of(report.status, s.signal)
        });
        report.ended_by = match (last_before_exit, self.earlier_kill) {
            (Some(s), _) => Ending::Rung {
                index: s.rung,
                signal: s.signal,
            },
            (None, Some((signal, at))) if at <= exited_at => Ending::Kill { signal },
            (None, _) if exited_at < self.started => Ending::BeforeClose,
            (None, _) => Ending::Eof,
        };
    }
}

/// Whether `status` says the child was killed by `signal`.
fn died_of(status: Option<std::process::ExitStatus>, signal: Signal) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.and_then(|s| s.signal()) == Some(signal.as_raw())
}
