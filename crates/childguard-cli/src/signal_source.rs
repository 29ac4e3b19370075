//! Where [`crate::events::Events`] gets its signals from: a [`Pump`] that turns each signal
//! childguard receives into an event, and each `SIGCHLD` into [`Event::ChildChanged`].
//!
//! Linux: the listened signals are blocked (before any other thread exists, so in every thread
//! the library starts later) and read from a `signalfd`, with each one's `si_code`; `SIGCHLD`
//! alone goes through signal-hook, whose handler the library's portable mechanism shares (and
//! which replaces an inherited `SIG_IGN`, under which the kernel would reap our children), and
//! whose handler writes a byte to a socket. Both fds are read by whoever waits: the main
//! thread, when its wait finds them readable ([`Pump::fds`], [`Pump::pump`]) — no thread
//! stands between a signal and the wait, so `init -- true` runs with one thread fewer and
//! `SIGCHLD` wakes the wait directly. Only `with`, whose main thread sits in a readiness wait
//! while a signal must be announced at once, starts a thread that pumps
//! ([`Pump::pump_in_background`]).
//! Why not signal-hook for all: its registry copies its whole table at each registration, and
//! `init` listens for some fifty signals (every catchable one), `run` for some forty (the
//! real-time ones): 1.5 million instructions at each start (callgrind), 78% of what
//! `childguard init -- true` ran, against one `pthread_sigmask` and one `signalfd` here.
//! A blocked signal is queued even when its disposition is `SIG_IGN`; the ignored ones are set
//! to their default anyway ([`crate::sys::default_if_ignored`]), so a program we spawn starts
//! with them at their default, as it did when a handler of ours replaced the `SIG_IGN`.
//!
//! Elsewhere: signal-hook's iterator for every signal, with each one's siginfo, read by a
//! thread from the start (it has no fd to wait on).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use crate::events::{Event, Feed};
use crate::messages::say;
use crate::received::Received;

/// The signals' source and the channel they go to. `pump` is the one place they are read;
/// it runs on the waiting thread, or on the background thread once one is started.
pub struct Pump {
    #[cfg(target_os = "linux")]
    signalfd: std::os::fd::OwnedFd,
    #[cfg(target_os = "linux")]
    chld_rx: std::os::unix::net::UnixStream,
    #[cfg(target_os = "linux")]
    feed: Feed,
    /// While set, each signal pumped is also said on stderr, after its event is queued (see
    /// [`crate::events::Events::announce_signals`]).
    #[cfg(target_os = "linux")]
    announce: Arc<AtomicBool>,
    /// Held while pumping: the waiting thread and the background one never interleave their
    /// events, so signals stay in the order they were read.
    #[cfg(target_os = "linux")]
    reading: std::sync::Mutex<()>,
    /// Whether the background thread runs.
    #[cfg(target_os = "linux")]
    background: AtomicBool,
}

impl Pump {
    /// Blocks `signals` (and takes `SIGCHLD`) for the events sent to `feed`. Call before any
    /// thread starts.
    #[cfg(target_os = "linux")]
    pub fn start(signals: &[i32], feed: Feed, announce: Arc<AtomicBool>) -> io::Result<Pump> {
        use std::os::unix::net::UnixStream;

        let listened: Vec<i32> = signals
            .iter()
            .copied()
            .filter(|&s| s != libc::SIGCHLD)
            .collect();
        // Race avoided (a thread that does not block them): a process-directed signal goes to
        // any thread that does not block it, where its default action (end the process) would
        // run. The mask is inherited, so blocking before the first thread covers every later
        // one.
        let threads = own_threads()?;
        if threads != 1 {
            return Err(io::Error::other(format!(
                "signals must be set up before any thread starts ({threads} threads run)"
            )));
        }
        crate::sys::default_if_ignored(&listened);
        let signalfd = crate::sys::block_into_signalfd(&listened)?;
        let (chld_rx, chld_tx) = UnixStream::pair()?;
        chld_rx.set_nonblocking(true)?;
        chld_tx.set_nonblocking(true)?;
        // A full socket drops the byte, which is fine: one pending byte wakes the wait.
        signal_hook::low_level::pipe::register(libc::SIGCHLD, chld_tx)?;
        Ok(Pump {
            signalfd,
            chld_rx,
            feed,
            announce,
            reading: std::sync::Mutex::new(()),
            background: AtomicBool::new(false),
        })
    }

    /// The fds that are readable when [`Pump::pump`] has something to read.
    #[cfg(target_os = "linux")]
    pub fn fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        vec![self.signalfd.as_fd(), self.chld_rx.as_fd()]
    }

    /// Reads every signal and `SIGCHLD` that arrived, without blocking, into the channel.
    /// `false`: the channel is gone.
    #[cfg(target_os = "linux")]
    pub fn pump(&self) -> bool {
        use std::os::fd::AsFd;

        let _reading = self.reading.lock().unwrap_or_else(|p| p.into_inner());
        let mut sink = [0u8; 64];
        let mut child_changed = false;
        while matches!(rustix::io::read(&self.chld_rx, &mut sink), Ok(n) if n > 0) {
            child_changed = true;
        }
        if child_changed && !self.feed.send(Event::ChildChanged) {
            return false;
        }
        // Empty (EAGAIN) or failing: nothing more to read now.
        while let Ok(arrived) = crate::sys::read_signalfd(self.signalfd.as_fd()) {
            if arrived.is_empty() {
                break;
            }
            for (signo, code) in arrived {
                let Some(received) = Received::from_parts(signo, code) else {
                    continue;
                };
                if !deliver(&self.feed, received, &self.announce) {
                    return false;
                }
            }
        }
        true
    }

    /// Starts the thread ("childguard-signals") that pumps as soon as anything arrives, for a
    /// caller whose main thread waits elsewhere (`with`'s readiness wait). Once.
    #[cfg(target_os = "linux")]
    pub fn pump_in_background(self: &Arc<Self>) -> io::Result<()> {
        use rustix::event::{poll, PollFd, PollFlags};

        if self.background.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let pump = Arc::clone(self);
        thread::Builder::new()
            .name("childguard-signals".into())
            .spawn(move || loop {
                let fds = pump.fds();
                let mut polled: Vec<PollFd<'_>> = fds
                    .iter()
                    .map(|fd| PollFd::new(fd, PollFlags::IN))
                    .collect();
                match poll(&mut polled, None) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    // ENOMEM: nothing to do but try again, a little later.
                    Err(_) => thread::sleep(std::time::Duration::from_millis(10)),
                }
                if !pump.pump() {
                    return;
                }
            })?;
        Ok(())
    }
}

/// This process's threads, from `/proc/self/stat` (its 20th field).
#[cfg(target_os = "linux")]
fn own_threads() -> io::Result<usize> {
    let stat = childguard::read_kernel_text("/proc/self/stat")?;
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(17)?.parse().ok())
        .ok_or_else(|| io::Error::other(format!("/proc/self/stat: unexpected contents {stat:?}")))
}

#[cfg(not(target_os = "linux"))]
impl Pump {
    /// Listens for `signals` and `SIGCHLD` with signal-hook, read by a thread from now on.
    pub fn start(signals: &[i32], feed: Feed, announce: Arc<AtomicBool>) -> io::Result<Pump> {
        use signal_hook::iterator::exfiltrator::WithRawSiginfo;
        use signal_hook::iterator::SignalsInfo;

        // With each signal's siginfo, whose `si_code` says who sent it (see `received`): one
        // per delivery (signal-hook queues up to 5 of each signal unread; past that the
        // kernel's own merging of a pending signal applies, as for the plain iterator).
        let mut signals =
            SignalsInfo::<WithRawSiginfo>::new(signals.iter().chain(&[libc::SIGCHLD]))?;
        thread::Builder::new()
            .name("childguard-signals".into())
            .spawn(move || {
                for info in signals.forever() {
                    let sent = match Received::from_siginfo(&info) {
                        _ if info.si_signo == libc::SIGCHLD => feed.send(Event::ChildChanged),
                        Some(received) => deliver(&feed, received, &announce),
                        None => continue,
                    };
                    if !sent {
                        return;
                    }
                }
            })?;
        Ok(Pump {})
    }

    /// Nothing to do: the thread pumps.
    pub fn pump(&self) -> bool {
        true
    }

    /// The thread runs from the start.
    pub fn pump_in_background(self: &Arc<Self>) -> io::Result<()> {
        Ok(())
    }
}

/// Sends the signal's event, then (while announcing) says it came. `false`: the channel is
/// gone.
fn deliver(feed: &Feed, received: Received, announce: &AtomicBool) -> bool {
    let sent = feed.send(Event::Signal(received));
    // After the send: once the line is out, the event is in the channel.
    if announce.load(Ordering::SeqCst) {
        say!(
            "received SIG{} while starting the servers: CMD will not run; the servers are \
             closed once the one starting is up",
            received.signal
        );
    }
    sent
}
