//! [`Events`]: everything `run` waits for, on one channel — signals childguard receives, CMD
//! changing state (`SIGCHLD`), and stdin closing — so that waiting for "CMD exited, or a
//! trigger, or a deadline" is one blocking `recv_timeout`, never a sleep-polling loop.

use std::io;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread;
use std::time::Instant;

use childguard::{ChildHandle, Signal};
use signal_hook::consts::SIGCHLD;
use signal_hook::iterator::Signals;

/// Every signal whose default action would end childguard and that can be caught, so that
/// none of them can leave CMD unsupervised: each either is forwarded or starts the ladder
/// (see `escalation::plan`).
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
    /// childguard received this signal (one of [`caught`]).
    Signal(Signal),
    /// A child of ours changed state (`SIGCHLD`): worth a `try_wait`.
    ChildChanged,
    /// childguard's stdin reached EOF (only with `--stop-on-stdin-eof`).
    StdinClosed,
}

/// What a [`Events::wait`] ended on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// CMD exited (`try_wait` has its status).
    Exited,
    /// The deadline passed.
    Deadline,
    /// childguard received a signal.
    Signal(Signal),
    /// stdin closed.
    StdinClosed,
}

/// The event channel and the threads feeding it (which live as long as the process).
#[derive(Debug)]
pub struct Events {
    rx: Receiver<Event>,
    /// Kept so the channel never disconnects, even if a feeding thread ends.
    _tx: Sender<Event>,
}

impl Events {
    /// Starts listening. Call before spawning CMD: signal-hook's handlers are then in place
    /// before the first `SIGCHLD` or Ctrl-C can arrive (and replace an inherited `SIG_IGN`
    /// for `SIGCHLD`, under which children would be reaped by the kernel).
    pub fn start(watch_stdin: bool) -> io::Result<Events> {
        let (tx, rx) = mpsc::channel();
        let mut signals = Signals::new(caught().iter().chain(&[SIGCHLD]))?;
        let to_main = tx.clone();
        thread::Builder::new()
            .name("childguard-signals".into())
            .spawn(move || {
                for signo in signals.forever() {
                    let event = match Signal::from_raw(signo) {
                        _ if signo == SIGCHLD => Event::ChildChanged,
                        Some(signal) => Event::Signal(signal),
                        None => continue,
                    };
                    if to_main.send(event).is_err() {
                        return;
                    }
                }
            })?;
        if watch_stdin {
            let to_main = tx.clone();
            thread::Builder::new()
                .name("childguard-stdin".into())
                .spawn(move || {
                    // EOF or a read error (the other end vanished) both mean "closed".
                    let _ = io::copy(&mut io::stdin().lock(), &mut io::sink());
                    let _ = to_main.send(Event::StdinClosed);
                })?;
        }
        Ok(Events { rx, _tx: tx })
    }

    /// The next event, or `None` once `deadline` has passed (never, without a deadline).
    pub fn next(&self, deadline: Option<Instant>) -> Option<Event> {
        match deadline {
            // `_tx` keeps the channel open, so `recv` cannot fail.
            None => self.rx.recv().ok(),
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                self.rx.recv_timeout(left).ok()
            }
        }
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
                Some(Event::Signal(signal)) => return Ok(Woke::Signal(signal)),
                Some(Event::StdinClosed) => return Ok(Woke::StdinClosed),
            }
        }
    }
}
