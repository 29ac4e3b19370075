//! [`Events`]: everything `run` waits for, on one channel — signals childguard receives, CMD
//! changing state (`SIGCHLD`), and stdin closing — so that waiting for "CMD exited, or a
//! trigger, or a deadline" is one blocking `poll`, never a sleep-polling loop.
//!
//! Each event also rings a doorbell (one byte on a socket pair). The main thread's wait
//! ([`Events::next`]) is a `poll` of that doorbell, with a timeout for the deadline, and of the
//! host's lifeline with `--stdio-server` (fd 0's hangup and the parent's pidfd: see
//! [`HostWatch`]). On Linux the doorbell polled is an epoll set of the bell and the signals'
//! own fds ([`crate::signal_source::Pump::fds`]), so a signal wakes the wait itself, which
//! reads it into the channel ([`crate::signal_source::Pump::pump`]) — no thread relays it.
//! The library's close, which waits in `poll` on the child's pidfd, watches the channel the
//! same way ([`Events::doorbell`], [`Events::signals_arrived`]).

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use childguard::{ChildHandle, Signal};
use rustix::event::{PollFd, PollFlags};

use crate::host::{HostEvent, HostWatch};
use crate::messages::say;
use crate::received::Received;
use crate::signal_source::Pump;

/// Every signal whose default action would end childguard and that can be caught, so that
/// none of them can leave CMD unsupervised: each either is forwarded or starts the ladder
/// (see `trigger::plan`).
///
/// Not here: `KILL` and `STOP` (cannot be caught: `PR_SET_PDEATHSIG` covers `KILL`); the fault
/// signals `ILL`, `FPE`, `SEGV`, `BUS` and `TRAP` (a real fault must still end childguard;
/// signal-hook refuses the first three); `PIPE`, which Rust's runtime ignores so that a closed
/// stderr is an `EPIPE` error instead; `TSTP`, `TTIN`, `TTOU` (they stop, not end, childguard);
/// and the signals ignored by default (`CHLD` is caught separately, `CONT`, `URG`, `WINCH`).
pub fn caught() -> Vec<i32> {
    use libc::*;
    let mut signals = vec![
        SIGHUP, SIGINT, SIGQUIT, SIGABRT, SIGUSR1, SIGUSR2, SIGALRM, SIGTERM, SIGXCPU, SIGXFSZ,
        SIGVTALRM, SIGPROF, SIGIO, SIGSYS,
    ];
    #[cfg(target_os = "linux")]
    {
        signals.extend([SIGSTKFLT, SIGPWR]);
        signals.extend(SIGRTMIN()..=SIGRTMAX());
    }
    signals.sort_unstable();
    signals.dedup();
    signals
}

/// Something that happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// childguard received this signal (one of [`caught`]), from this sender.
    Signal(Received),
    /// A child of ours changed state (`SIGCHLD`): worth a `try_wait`.
    ChildChanged,
    /// childguard's stdin reached EOF (`--stop-on-stdin-eof`) or hung up (`--stdio-server`).
    StdinClosed,
    /// childguard's parent, this pid, exited (`--stdio-server`).
    ParentExited(u32),
}

/// What a [`Events::wait`] ended on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// CMD exited (`try_wait` has its status).
    Exited,
    /// The deadline passed.
    Deadline,
    /// childguard received a signal.
    Signal(Received),
    /// stdin closed.
    StdinClosed,
    /// childguard's parent (this pid) exited.
    ParentExited(u32),
}

/// The event channel and what feeds it (the signals' pump, the stdin thread).
pub struct Events {
    rx: Receiver<Event>,
    /// Kept so the channel never disconnects, even if a feeding thread ends.
    _tx: Sender<Event>,
    /// Readable once an event was sent (non-blocking; drained by [`Events::signals_arrived`]).
    bell: UnixStream,
    /// Reads the signals that arrived into the channel.
    pump: Arc<Pump>,
    /// Linux: the epoll set of `bell` and the pump's fds — the doorbell that is polled.
    #[cfg(target_os = "linux")]
    pollset: std::os::fd::OwnedFd,
    /// While set, each signal pumped is also said on stderr (see
    /// [`Events::announce_signals`]).
    announce: Arc<AtomicBool>,
    /// `--stdio-server`'s watch of the host, polled with the doorbell.
    host: Option<HostWatch>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("bell", &self.bell)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

/// The sending side of the channel: every event is sent, then the doorbell rung — in that
/// order, so a readable doorbell always finds its event in the channel.
pub(crate) struct Feed {
    tx: Sender<Event>,
    bell: UnixStream,
}

impl Feed {
    pub(crate) fn send(&self, event: Event) -> bool {
        let sent = self.tx.send(event).is_ok();
        // Non-blocking: a full doorbell (nobody drained it yet) is rung already.
        let _ = (&self.bell).write(&[1]);
        sent
    }
}

impl Events {
    /// Starts listening. Call before spawning CMD: signal-hook's handlers are then in place
    /// before the first `SIGCHLD` or Ctrl-C can arrive (and replace an inherited `SIG_IGN`
    /// for `SIGCHLD`, under which children would be reaped by the kernel).
    pub fn start(watch_stdin: bool) -> io::Result<Events> {
        Events::listen(&caught(), watch_stdin)
    }

    /// [`Events::start`] for another set of signals than [`caught`] (`init` forwards every
    /// catchable one). `SIGCHLD` is always listened for.
    pub fn listen(signals: &[i32], watch_stdin: bool) -> io::Result<Events> {
        let (tx, rx) = mpsc::channel();
        let (bell, ringer) = UnixStream::pair()?;
        bell.set_nonblocking(true)?;
        ringer.set_nonblocking(true)?;
        let feed = || -> io::Result<Feed> {
            Ok(Feed {
                tx: tx.clone(),
                bell: ringer.try_clone()?,
            })
        };
        let announce = Arc::new(AtomicBool::new(false));
        let pump = Arc::new(Pump::start(signals, feed()?, Arc::clone(&announce))?);
        #[cfg(target_os = "linux")]
        let pollset = {
            use rustix::event::epoll;
            let set = epoll::create(epoll::CreateFlags::CLOEXEC)?;
            for fd in std::iter::once(bell.as_fd()).chain(pump.fds()) {
                epoll::add(
                    &set,
                    fd,
                    epoll::EventData::new_u64(0),
                    epoll::EventFlags::IN,
                )?;
            }
            set
        };
        if watch_stdin {
            let to_main = feed()?;
            thread::Builder::new()
                .name("childguard-stdin".into())
                .spawn(move || {
                    // EOF or a read error (the other end vanished) both mean "closed".
                    let _ = io::copy(&mut io::stdin().lock(), &mut io::sink());
                    to_main.send(Event::StdinClosed);
                })?;
        }
        Ok(Events {
            rx,
            _tx: tx,
            bell,
            pump,
            #[cfg(target_os = "linux")]
            pollset,
            announce,
            host: None,
        })
    }

    /// While `on`, each signal received is also announced on stderr, at once: `with` starts
    /// its servers with the main thread blocked in a readiness wait, and acts on the signal
    /// only when that wait ends — so turning this on starts a thread that reads the signals
    /// as they come ([`Pump::pump_in_background`]). The line comes after the event is queued,
    /// so whoever reads it knows the next [`Events::signals_arrived`] will see the signal.
    pub fn announce_signals(&self, on: bool) -> io::Result<()> {
        self.announce.store(on, Ordering::SeqCst);
        if on {
            self.pump.pump_in_background()?;
        }
        Ok(())
    }

    /// Also waits for the host to close childguard's stdin or exit (`--stdio-server`): see
    /// [`HostWatch`]. Call before spawning CMD: the parent is read now.
    pub fn watch_host(&mut self) {
        self.host = Some(HostWatch::start());
    }

    /// The next event, or `None` once `deadline` has passed (never, without a deadline).
    ///
    /// One `poll` of the doorbell (and of the host's lifeline): the doorbell is drained
    /// *before* the channel is read, and every event is sent before its ring, so an event sent
    /// after the read rings after the drain and wakes the `poll`.
    pub fn next(&self, deadline: Option<Instant>) -> Option<Event> {
        if let Some(event) = self.host.as_ref().and_then(HostWatch::take_early) {
            return Some(event.into());
        }
        loop {
            self.pump.pump();
            self.drain_doorbell();
            if let Ok(event) = self.rx.try_recv() {
                return Some(event);
            }
            let timeout = match deadline {
                None => None,
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return None,
                },
            };
            let doorbell = self.doorbell();
            let mut fds = vec![PollFd::new(&doorbell, PollFlags::IN)];
            if let Some(host) = &self.host {
                host.poll_fds(&mut fds);
            }
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                // A signal's handler ran on this thread (SIGCHLD's: the pump reads its byte).
                Err(rustix::io::Errno::INTR) => continue,
                // Anything else (ENOMEM): wait on the channel alone a moment, then poll again.
                Err(e) => {
                    static SAID: AtomicBool = AtomicBool::new(false);
                    if !SAID.swap(true, Ordering::SeqCst) {
                        say!(
                            "poll failed ({e}); watching the signals alone, retrying every 100 ms"
                        );
                    }
                    let wait = timeout.map_or(RETRY, |t| t.min(RETRY));
                    if let Ok(event) = self.rx.recv_timeout(wait) {
                        return Some(event);
                    }
                    continue;
                }
            }
            if let Some(event) = self.host.as_ref().and_then(|h| h.fired(&fds[1..])) {
                return Some(event.into());
            }
        }
    }

    /// Reads the doorbell empty (non-blocking).
    fn drain_doorbell(&self) {
        let mut buf = [0u8; 64];
        while matches!((&self.bell).read(&mut buf), Ok(n) if n > 0) {}
    }

    /// Waits until CMD exits, a signal arrives, stdin closes, or `deadline` passes — whichever
    /// comes first. Woken by `SIGCHLD`: each wake-up is one `try_wait`.
    pub fn wait(
        &self,
        handle: &mut ChildHandle,
        deadline: Option<Instant>,
    ) -> childguard::Result<Woke> {
        loop {
            if handle.try_wait()?.is_some() {
                return Ok(Woke::Exited);
            }
            match self.next(deadline) {
                None => return Ok(Woke::Deadline),
                Some(Event::ChildChanged) => {}
                Some(Event::Signal(received)) => return Ok(Woke::Signal(received)),
                Some(Event::StdinClosed) => return Ok(Woke::StdinClosed),
                Some(Event::ParentExited(pid)) => return Ok(Woke::ParentExited(pid)),
            }
        }
    }

    /// Readable when an event may be waiting: for a `poll` that also waits on something
    /// else (the library's close, see `run`). Then [`Events::signals_arrived`] reads it.
    pub fn doorbell(&self) -> BorrowedFd<'_> {
        #[cfg(target_os = "linux")]
        return self.pollset.as_fd();
        #[cfg(not(target_os = "linux"))]
        return self.bell.as_fd();
    }

    /// Drains the doorbell and the events waiting, without blocking; returns the signals
    /// childguard received among them (`SIGCHLD` and stdin closing are dropped: the close
    /// watches the child itself, and stdin closing only ever triggers the ladder; the host's
    /// lifeline is not polled during a close).
    pub fn signals_arrived(&self) -> Vec<Signal> {
        self.pump.pump();
        self.drain_doorbell();
        self.rx
            .try_iter()
            .filter_map(|event| match event {
                Event::Signal(received) => Some(received.signal),
                Event::ChildChanged | Event::StdinClosed | Event::ParentExited(_) => None,
            })
            .collect()
    }
}

impl From<HostEvent> for Event {
    fn from(event: HostEvent) -> Event {
        match event {
            HostEvent::StdinClosed => Event::StdinClosed,
            HostEvent::ParentExited(pid) => Event::ParentExited(pid),
        }
    }
}

/// How soon a failed `poll` is tried again.
const RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// `poll(2)` with a timeout (none: forever). A timeout too long for a `timespec` waits
/// forever, as no deadline would.
fn poll(fds: &mut [PollFd<'_>], timeout: Option<std::time::Duration>) -> rustix::io::Result<usize> {
    let timeout = timeout.and_then(|t| rustix::event::Timespec::try_from(t).ok());
    rustix::event::poll(fds, timeout.as_ref())
}
