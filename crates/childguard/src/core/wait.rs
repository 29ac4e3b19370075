//! The one wait primitive: every blocking wait of the library goes through [`Wait::run`].
//!
//! # Why one
//!
//! A blocking wait of this library waits for some of: fds turning readable (pidfds, captured
//! pipes, a notify socket, a listening socket, `cgroup.events`), the child's exit (its pidfd
//! on Linux; a `SIGCHLD` after a known generation of the notifier on the portable path), a
//! deadline, and a caller who wants to break in (Ctrl-C in Python, a cancel flag in C). Each
//! wait used to do this itself, each handling `EINTR` its own way (some retried it, hiding a
//! signal from the caller; some returned early and made their caller loop) and none letting a
//! caller interrupt. Here it is done once:
//!
//! - `EINTR` is handled in exactly one place ([`Wait::run`]'s poll): the [`Interrupt`] check
//!   is called at once, then the wait goes on with what is left of its deadline.
//! - The interrupt check is called at least every [`INTERRUPT_CHECK_EVERY`] while waiting (and
//!   on each `EINTR`); an `Err` from it ends the wait with that error, marked so that
//!   [`is_interrupt`] recognises it.
//! - The deadline is met as `poll(2)` can: the kernel lets a poll timeout fire late by 0.1% of
//!   its length (0.5% when niced; at least the 50 µs timer slack) — 1 ms late on a 1 s rung.
//!   Each poll aims that much early instead, and polls again for the short remainder until the
//!   deadline has really passed, so [`Woke::Deadline`] means the deadline is behind us and at
//!   most the slack late.
//! - No allocation for up to three fds (one pidfd; a pidfd and a cgroup watch; two pipes).
//!
//! # What happens when
//!
//! 1. [`Wait::run`] first calls the interrupt check if one is due (never more often than every
//!    [`INTERRUPT_CHECK_EVERY`] for one [`Interrupt`], however short the waits are: the
//!    readiness loops wait 0.1 ms at a time, and a Python check takes the GIL).
//! 2. It polls the fds for readability, for what is left of the deadline (aimed early, see
//!    above), cut to the next interrupt check and, when it also waits for a `SIGCHLD`
//!    generation while polling fds, to [`SIGCHLD_SLICE`]. Without fds, the `SIGCHLD` wait
//!    sleeps on the notifier's condition variable instead (a `SIGCHLD` wakes it at once).
//! 3. An fd readable → [`Woke::Readable`], saying which. A `SIGCHLD` after the generation →
//!    [`Woke::Sigchld`]. `EINTR` → the interrupt check, then back to 2. A slice ended →
//!    the check if due, then back to 2. The deadline passed → [`Woke::Deadline`].
//!
//! Race avoided (*exit between the look and the wait*): the caller reads the `SIGCHLD`
//! generation (or holds the pidfd) *before* it looks at the child, and passes it here; a
//! `SIGCHLD` in between has already moved the generation, so the wait ends at once.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

/// On the portable mechanism (no pidfd) the child's exit wakes no fd: look at least this often.
pub(crate) const EXIT_CHECK: Duration = Duration::from_millis(5);

/// `at + wait`, saturating: a grace too long for the clock (`Duration::MAX`) means "a century",
/// never an overflow panic. Every deadline of the library is made with it.
pub(crate) fn later(at: Instant, wait: Duration) -> Instant {
    at.checked_add(wait)
        .or_else(|| at.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(at)
}

/// How often a wait calls its [`Interrupt`] check, at most this long apart (plus the time the
/// check itself takes). Under the 50 ms the library promises, with room for a loaded machine.
pub const INTERRUPT_CHECK_EVERY: Duration = Duration::from_millis(20);

/// How long one poll lasts when the wait also watches a `SIGCHLD` generation (the portable
/// path with fds: a `SIGCHLD` wakes no poll of ours, so the generation is read between polls).
pub(crate) const SIGCHLD_SLICE: Duration = Duration::from_millis(5);

/// A caller's interrupt check: called by every blocking wait of the library at least every
/// [`INTERRUPT_CHECK_EVERY`] and whenever a signal interrupts the wait (`EINTR`). An `Err`
/// ends the wait with that error (as [`ErrorKind::Interrupted`](crate::ErrorKind::Interrupted)
/// in the library's [`Error`](crate::Error)); `Ok` lets it go on.
///
/// Why: the waits of this library retry `EINTR` (a signal must not turn into a failed close),
/// so without a check nothing lets a caller break in. Python passes `PyErr_CheckSignals`
/// (Ctrl-C raises `KeyboardInterrupt` within 0.1 s), C a callback or a flag, Rust whatever it
/// likes ([`Interrupt::new`], [`Interrupt::flag`]).
///
/// The check runs on the waiting thread, never concurrently with itself for one wait; a clone
/// shares the rate limit (one check per [`INTERRUPT_CHECK_EVERY`]) with the original.
///
/// ```
/// use std::sync::{atomic::AtomicBool, Arc};
/// let stop = Arc::new(AtomicBool::new(false));
/// let interrupt = childguard::Interrupt::flag(stop.clone());
/// // … pass `interrupt` to Builder::interrupt, ChildHandle::wait_timeout_interruptible,
/// // CloseControl::interrupt; later, from any thread or a signal handler:
/// stop.store(true, std::sync::atomic::Ordering::Relaxed);
/// # drop(interrupt);
/// ```
#[derive(Clone)]
pub struct Interrupt {
    inner: Arc<Inner>,
}

struct Inner {
    check: Box<dyn Fn() -> io::Result<()> + Send + Sync>,
    /// Nanoseconds since [`base`] of the last check (0: never checked).
    last: AtomicU64,
}

impl Interrupt {
    /// An interrupt whose `check` says whether to break off the wait (`Err`, returned by the
    /// waiting call) or go on (`Ok`).
    pub fn new(check: impl Fn() -> io::Result<()> + Send + Sync + 'static) -> Interrupt {
        Interrupt {
            inner: Arc::new(Inner {
                check: Box::new(check),
                last: AtomicU64::new(0),
            }),
        }
    }

    /// An interrupt that breaks off the wait once `flag` is `true` (set it from any thread, or
    /// from a signal handler: a store to an atomic is async-signal-safe). The wait notices it
    /// within [`INTERRUPT_CHECK_EVERY`]; a signal whose `EINTR` lands in the wait, at once.
    pub fn flag(flag: Arc<AtomicBool>) -> Interrupt {
        Interrupt::new(move || {
            if flag.load(Ordering::SeqCst) {
                Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    "interrupted by the caller's flag",
                ))
            } else {
                Ok(())
            }
        })
    }

    /// Calls the check now (`force`), or if [`INTERRUPT_CHECK_EVERY`] passed since the last
    /// call. An `Err` comes back marked (see [`is_interrupt`]).
    pub(crate) fn check(&self, force: bool) -> io::Result<()> {
        let now = nanos_since_base(Instant::now());
        let last = self.inner.last.load(Ordering::Relaxed);
        if !force && last != 0 && now.saturating_sub(last) < INTERRUPT_CHECK_EVERY.as_nanos() as u64
        {
            return Ok(());
        }
        self.inner.last.store(now.max(1), Ordering::Relaxed);
        (self.inner.check)()
            .map_err(|source| io::Error::new(io::ErrorKind::Interrupted, Interrupted { source }))
    }

    /// When the next check is due (never later than [`INTERRUPT_CHECK_EVERY`] from now).
    fn next_due(&self, now: Instant) -> Instant {
        let last = self.inner.last.load(Ordering::Relaxed);
        let due = base() + Duration::from_nanos(last) + INTERRUPT_CHECK_EVERY;
        due.clamp(now, now + INTERRUPT_CHECK_EVERY)
    }
}

impl fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Interrupt(..)")
    }
}

/// The error a wait ends with when the [`Interrupt`] check failed: the check's own error is
/// its `source` (and its `Display`).
#[derive(Debug)]
pub(crate) struct Interrupted {
    source: io::Error,
}

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "wait interrupted: {}", self.source)
    }
}

impl std::error::Error for Interrupted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Whether `e` is a wait ended by its [`Interrupt`] check (rather than a failing syscall).
pub(crate) fn is_interrupt(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Interrupted>())
}

/// The check's own error inside an interrupted wait's error, if `e` is one.
#[cfg(test)]
pub(crate) fn interrupt_source(e: &io::Error) -> Option<&io::Error> {
    e.get_ref()?
        .downcast_ref::<Interrupted>()
        .map(|i| &i.source)
}

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn nanos_since_base(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(base()).as_nanos()).unwrap_or(u64::MAX)
}

/// Which of the polled fds were readable (or hung up, or in error: a read tells which), by
/// index. Exact for the first 63 fds; index 63 stands for "63 or later".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Readable(u64);

impl Readable {
    /// Whether fd `index` (of the slice given to [`Wait::fds`]) was readable.
    pub(crate) fn contains(self, index: usize) -> bool {
        self.0 & (1 << index.min(63)) != 0
    }
}

/// What ended a [`Wait::run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// One or more fds are readable.
    Readable(Readable),
    /// A `SIGCHLD` came after the generation given to [`Wait::sigchld`].
    Sigchld,
    /// The deadline has passed (and nothing above happened first).
    Deadline,
}

/// One blocking wait: until any of the fds is readable, a `SIGCHLD` after a generation, the
/// deadline, or the interrupt check fails. Built, then [`run`](Wait::run).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait<'a> {
    fds: &'a [BorrowedFd<'a>],
    writable: &'a [BorrowedFd<'a>],
    sigchld: Option<u64>,
    deadline: Instant,
    interrupt: Option<&'a Interrupt>,
}

impl<'a> Wait<'a> {
    /// A wait that ends at `deadline` (and nothing else, until told more).
    pub(crate) fn until(deadline: Instant) -> Wait<'a> {
        Wait {
            fds: &[],
            writable: &[],
            sigchld: None,
            deadline,
            interrupt: None,
        }
    }

    /// Also ends when one of `fds` is readable (pidfds: the process exited).
    pub(crate) fn fds(mut self, fds: &'a [BorrowedFd<'a>]) -> Wait<'a> {
        self.fds = fds;
        self
    }

    /// Also ends when one of `fds` is writable (a non-blocking `connect` done, room to send):
    /// in [`Woke::Readable`] they count after the [`fds`](Wait::fds) ones (index
    /// `fds.len() + i` is `fds[i]` of these), hang-ups and errors included.
    pub(crate) fn writable(mut self, fds: &'a [BorrowedFd<'a>]) -> Wait<'a> {
        self.writable = fds;
        self
    }

    /// Also ends when a `SIGCHLD` arrives after notifier generation `seen` (the portable path's
    /// child exit; read `seen` before looking at the child).
    pub(crate) fn sigchld(mut self, seen: Option<u64>) -> Wait<'a> {
        self.sigchld = seen;
        self
    }

    /// Calls `interrupt` while waiting (see [`Interrupt`]).
    pub(crate) fn interrupt(mut self, interrupt: Option<&'a Interrupt>) -> Wait<'a> {
        self.interrupt = interrupt;
        self
    }

    /// Blocks until something named above happens; see the module docs for each moment.
    ///
    /// # Errors
    ///
    /// The interrupt check's error (marked: [`is_interrupt`]), a failing `poll(2)` other than
    /// `EINTR`, or the `SIGCHLD` notifier failing to start.
    pub(crate) fn run(&self) -> io::Result<Woke> {
        let notifier = match self.sigchld {
            Some(_) => Some(crate::core::sigchld::notifier()?),
            None => None,
        };
        let mut interrupted = false;
        loop {
            if let Some(interrupt) = self.interrupt {
                interrupt.check(interrupted)?;
            }
            interrupted = false;
            if let (Some(n), Some(seen)) = (notifier, self.sigchld) {
                if n.generation() != seen {
                    return Ok(Woke::Sigchld);
                }
            }
            let now = Instant::now();
            let left = self.deadline.saturating_duration_since(now);
            // Aim early by the kernel's allowed lateness (see the module docs): the remainder
            // is polled again on the next turn.
            let mut slice = left - left / 200;
            if let Some(interrupt) = self.interrupt {
                slice = slice.min(interrupt.next_due(now) - now);
            }
            match (notifier, self.sigchld) {
                (Some(n), Some(seen)) if self.fds.is_empty() && self.writable.is_empty() => {
                    // The notifier's condition variable: a SIGCHLD wakes it at once; no EINTR.
                    n.wait_change_from(seen, now + slice);
                    if n.generation() != seen {
                        return Ok(Woke::Sigchld);
                    }
                }
                _ => {
                    if self.sigchld.is_some() {
                        slice = slice.min(SIGCHLD_SLICE);
                    }
                    match poll_readable(self.fds, self.writable, slice) {
                        Ok(Some(readable)) => return Ok(Woke::Readable(readable)),
                        Ok(None) => {}
                        // The one place EINTR is handled: the check runs now, then the wait
                        // goes on with what is left of the deadline.
                        Err(rustix::io::Errno::INTR) => {
                            interrupted = true;
                            continue;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            if Instant::now() >= self.deadline {
                return Ok(Woke::Deadline);
            }
        }
    }
}

/// One `poll(2)` of `fds` for readability (and of `writable` for room to write) for up to
/// `timeout`: which were ready, `None` if none (the timeout passed). Without `writable`, up to
/// three fds are polled from an array on the stack (the common cases: a pidfd; a pidfd and a
/// cgroup watch; a pidfd and two pipes).
fn poll_readable<'f>(
    fds: &[BorrowedFd<'f>],
    writable: &[BorrowedFd<'f>],
    timeout: Duration,
) -> rustix::io::Result<Option<Readable>> {
    let timeout = Timespec::try_from(timeout).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    });
    let on = |fd: &BorrowedFd<'f>| PollFd::from_borrowed_fd(*fd, PollFlags::IN);
    fn readable(polled: &[PollFd<'_>]) -> Option<Readable> {
        let mask = polled
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.revents().is_empty())
            .fold(0u64, |m, (i, _)| m | 1 << i.min(63));
        (mask != 0).then_some(Readable(mask))
    }
    if !writable.is_empty() {
        let mut polled: Vec<PollFd<'f>> = fds.iter().map(on).collect();
        polled.extend(
            writable
                .iter()
                .map(|fd| PollFd::from_borrowed_fd(*fd, PollFlags::OUT)),
        );
        poll(&mut polled, Some(&timeout))?;
        return Ok(readable(&polled));
    }
    match fds {
        [] => poll(&mut [], Some(&timeout)).map(|_| None),
        [a] => {
            let mut polled = [on(a)];
            poll(&mut polled, Some(&timeout))?;
            Ok(readable(&polled))
        }
        [a, b] => {
            let mut polled = [on(a), on(b)];
            poll(&mut polled, Some(&timeout))?;
            Ok(readable(&polled))
        }
        [a, b, c] => {
            let mut polled = [on(a), on(b), on(c)];
            poll(&mut polled, Some(&timeout))?;
            Ok(readable(&polled))
        }
        _ => {
            let mut polled: Vec<PollFd<'f>> = fds.iter().map(on).collect();
            poll(&mut polled, Some(&timeout))?;
            Ok(readable(&polled))
        }
    }
}

#[cfg(test)]
mod tests;
