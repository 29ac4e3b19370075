//! Where [`crate::events::Events`] gets its signals from: a thread ("childguard-signals") that
//! turns each signal childguard receives into an event, and each `SIGCHLD` into
//! [`Event::ChildChanged`].
//!
//! Linux: the listened signals are blocked (before any other thread exists, so in every thread
//! the library starts later) and read from a `signalfd`, with each one's `si_code`; `SIGCHLD`
//! alone goes through signal-hook, whose handler the library's portable mechanism shares (and
//! which replaces an inherited `SIG_IGN`, under which the kernel would reap our children).
//! Why not signal-hook for all: its registry copies its whole table at each registration, and
//! `init` listens for some fifty signals (every catchable one), `run` for some forty (the
//! real-time ones): 1.5 million instructions at each start (callgrind), 78% of what
//! `childguard init -- true` ran, against one `pthread_sigmask` and one `signalfd` here.
//! A blocked signal is queued even when its disposition is `SIG_IGN`; the ignored ones are set
//! to their default anyway ([`crate::sys::default_if_ignored`]), so a program we spawn starts
//! with them at their default, as it did when a handler of ours replaced the `SIG_IGN`.
//!
//! Elsewhere: signal-hook's iterator for every signal, with each one's siginfo.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;

use crate::events::{Event, Feed};
use crate::messages::say;
use crate::received::Received;

/// Starts the thread; events go to `feed`. While `announce` is set each signal is also said on
/// stderr, after its event is queued (see [`crate::events::Events::announce_signals`]). The
/// thread ends when the channel is gone.
#[cfg(target_os = "linux")]
pub fn start(signals: &[i32], feed: Feed, announce: Arc<AtomicBool>) -> io::Result<()> {
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    use rustix::event::{poll, PollFd, PollFlags};

    let listened: Vec<i32> = signals
        .iter()
        .copied()
        .filter(|&s| s != libc::SIGCHLD)
        .collect();
    // Race avoided (a thread that does not block them): a process-directed signal goes to any
    // thread that does not block it, where its default action (end the process) would run.
    // The mask is inherited, so blocking before the first thread covers every later one.
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
    // A full socket drops the byte, which is fine: one pending byte wakes the thread.
    signal_hook::low_level::pipe::register(libc::SIGCHLD, chld_tx)?;
    thread::Builder::new()
        .name("childguard-signals".into())
        .spawn(move || loop {
            let mut fds = [
                PollFd::new(&signalfd, PollFlags::IN),
                PollFd::new(&chld_rx, PollFlags::IN),
            ];
            match poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                // ENOMEM: nothing to do but try again, a little later.
                Err(_) => {
                    thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
            }
            if !fds[1].revents().is_empty() {
                let mut sink = [0u8; 64];
                while matches!(rustix::io::read(&chld_rx, &mut sink), Ok(n) if n > 0) {}
                if !feed.send(Event::ChildChanged) {
                    return;
                }
            }
            if !fds[0].revents().is_empty() {
                let Ok(arrived) = crate::sys::read_signalfd(signalfd.as_fd()) else {
                    continue;
                };
                for (signo, code) in arrived {
                    let Some(received) = Received::from_parts(signo, code) else {
                        continue;
                    };
                    if !deliver(&feed, received, &announce) {
                        return;
                    }
                }
            }
        })?;
    Ok(())
}

/// This process's threads, from `/proc/self/stat` (its 20th field).
#[cfg(target_os = "linux")]
fn own_threads() -> io::Result<usize> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(17)?.parse().ok())
        .ok_or_else(|| io::Error::other(format!("/proc/self/stat: unexpected contents {stat:?}")))
}

#[cfg(not(target_os = "linux"))]
pub fn start(signals: &[i32], feed: Feed, announce: Arc<AtomicBool>) -> io::Result<()> {
    use signal_hook::iterator::exfiltrator::WithRawSiginfo;
    use signal_hook::iterator::SignalsInfo;

    // With each signal's siginfo, whose `si_code` says who sent it (see `received`): one per
    // delivery (signal-hook queues up to 5 of each signal unread; past that the kernel's own
    // merging of a pending signal applies, as for the plain iterator).
    let mut signals = SignalsInfo::<WithRawSiginfo>::new(signals.iter().chain(&[libc::SIGCHLD]))?;
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
    Ok(())
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
