//! Becoming ready: `--ready-after`, `--ready-stamp`, `--stderr-flood`, `--listen`, and the
//! `--notify` messages on `$NOTIFY_SOCKET` (`sd_notify(3)`'s protocol, written here by hand).

use std::io::{self, Write};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

/// The `CLOCK_MONOTONIC` reading in nanoseconds (the clock Rust's `Instant` uses on Linux, so
/// a reader can compare it with its own).
pub fn monotonic_ns() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

/// Writes `bytes` of numbered lines (`slowserver log line N ...`, 100 bytes each) to stderr,
/// in 64 KiB writes.
pub fn flood_stderr(bytes: u64) -> io::Result<()> {
    let mut err = io::BufWriter::with_capacity(64 << 10, io::stderr().lock());
    let mut left = bytes;
    let mut n = 0u64;
    let mut line = Vec::with_capacity(128);
    while left > 0 {
        line.clear();
        write!(line, "slowserver log line {n:>12} ")?;
        line.resize(99, b'.');
        line.push(b'\n');
        let take = usize::try_from(left).map_or(line.len(), |l| l.min(line.len()));
        err.write_all(&line[..take])?;
        left -= take as u64;
        n += 1;
    }
    err.flush()
}

/// Binds and listens on `path`; a thread accepts connections and closes them at once.
pub fn listen(path: &Path) -> io::Result<()> {
    let listener = UnixListener::bind(path)?;
    thread::Builder::new()
        .name("listen".into())
        .spawn(move || {
            for conn in listener.incoming() {
                drop(conn);
            }
        })?;
    Ok(())
}

/// `$NOTIFY_SOCKET`, if set to a path (abstract `@` names are not supported: an error).
#[derive(Debug, Clone)]
pub struct Notifier {
    path: PathBuf,
    /// `--notify-extend`: sent with `STOPPING=1`.
    pub extend: Option<Duration>,
}

impl Notifier {
    /// From the environment; `--notify` without `NOTIFY_SOCKET` is an error.
    pub fn from_env(extend: Option<Duration>) -> io::Result<Notifier> {
        let path = std::env::var_os("NOTIFY_SOCKET")
            .ok_or_else(|| io::Error::other("--notify: NOTIFY_SOCKET is not set"))?;
        if path.to_string_lossy().starts_with('@') {
            return Err(io::Error::other(
                "--notify: abstract NOTIFY_SOCKET names are not supported",
            ));
        }
        Ok(Notifier {
            path: PathBuf::from(path),
            extend,
        })
    }

    /// Sends one datagram.
    pub fn send(&self, message: &str) -> io::Result<()> {
        UnixDatagram::unbound()?.send_to(message.as_bytes(), &self.path)?;
        Ok(())
    }

    /// `sd_notify_barrier(3)`: `BARRIER=1` with the write end of a fresh pipe, our copy
    /// closed; the supervisor answers by closing its copy, which we see as `POLLHUP` on the read
    /// end. `Err(TimedOut)` if that did not happen within `timeout`.
    pub fn barrier(&self, timeout: Duration) -> io::Result<()> {
        use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        use std::mem::MaybeUninit;
        use std::os::fd::AsFd;
        #[cfg(not(target_vendor = "apple"))]
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        // macOS has no pipe2: close-on-exec set right after (this fixture spawns nothing
        // meanwhile).
        #[cfg(target_vendor = "apple")]
        let (read, write) = {
            let (read, write) = rustix::pipe::pipe()?;
            for fd in [&read, &write] {
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
            }
            (read, write)
        };
        let sock = UnixDatagram::unbound()?;
        let addr = rustix::net::SocketAddrUnix::new(&self.path)?;
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds = [write.as_fd()];
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(io::Error::other("no room for the fd"));
        }
        rustix::net::sendmsg_addr(
            &sock,
            &addr,
            &[io::IoSlice::new(b"BARRIER=1\n")],
            &mut control,
            SendFlags::empty(),
        )?;
        drop(write);
        let end = std::time::Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("BARRIER=1 not answered within {timeout:?}"),
                ));
            }
            let mut fds = [rustix::event::PollFd::new(
                &read,
                rustix::event::PollFlags::IN,
            )];
            let wait = rustix::event::Timespec::try_from(left).map_err(io::Error::other)?;
            match rustix::event::poll(&mut fds, Some(&wait)) {
                Ok(0) => continue,
                Ok(_) if fds[0].revents().contains(rustix::event::PollFlags::HUP) => return Ok(()),
                Ok(_) => continue,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The start-up announcement.
    pub fn ready(&self) -> io::Result<()> {
        self.send("STATUS=ready\nREADY=1\n")
    }

    /// Sent on a terminating signal, before `--slow-exit`.
    pub fn stopping(&self) {
        let mut message = String::from("STOPPING=1\n");
        if let Some(extend) = self.extend {
            message.push_str(&format!("EXTEND_TIMEOUT_USEC={}\n", extend.as_micros()));
        }
        // Best effort: the supervisor may be gone.
        let _ = self.send(&message);
    }
}

/// `--watchdog-every`/`--watchdog-for`/`--watchdog-trigger`: a thread that sends `WATCHDOG=1`
/// every `every` (stopping after `until`, if given), and `WATCHDOG=trigger` after `trigger`.
pub fn watchdog(
    notifier: &Notifier,
    every: Option<Duration>,
    until: Option<Duration>,
    trigger: Option<Duration>,
) -> io::Result<()> {
    if every.is_none() && trigger.is_none() {
        return Ok(());
    }
    let notifier = notifier.clone();
    thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            let start = std::time::Instant::now();
            let mut triggered = false;
            loop {
                let now = start.elapsed();
                if trigger.is_some_and(|at| !triggered && now >= at) {
                    let _ = notifier.send("WATCHDOG=trigger\n");
                    triggered = true;
                }
                let pinging = every.is_some() && until.is_none_or(|u| now < u);
                if pinging {
                    let _ = notifier.send("WATCHDOG=1\n");
                }
                if !pinging && (triggered || trigger.is_none()) {
                    return; // nothing left to send: a hung server
                }
                let step = every.unwrap_or(Duration::from_millis(10)).min(
                    trigger
                        .filter(|_| !triggered)
                        .map_or(Duration::MAX, |t| t.saturating_sub(now)),
                );
                thread::sleep(step.max(Duration::from_millis(1)));
            }
        })?;
    Ok(())
}

/// `--reload`: the answer to a HUP (`Type=notify-reload`): `RELOADING=1` with
/// `MONOTONIC_USEC=`, then `READY=1` after the delay (or never, or exit 3).
pub fn reload(notifier: &Notifier, reload: crate::args::Reload) {
    let usec = monotonic_ns() / 1000;
    let _ = notifier.send(&format!(
        "RELOADING=1\nMONOTONIC_USEC={usec}\nSTATUS=reloading\n"
    ));
    match reload {
        crate::args::Reload::After(delay) => {
            thread::sleep(delay);
            let _ = notifier.send("READY=1\nSTATUS=reloaded\n");
        }
        crate::args::Reload::Never => {}
        crate::args::Reload::Exit => crate::exit::after(None, 3),
    }
}
