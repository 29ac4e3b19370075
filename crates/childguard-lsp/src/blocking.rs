//! The blocking face: every wait a `poll(2)` bounded by the step's deadline, every write
//! non-blocking.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use childguard::ChildHandle;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;

use crate::report::{Error, LspCloseReport, Shutdown};
use crate::session::{exit_notification, shutdown_request, Next};
use crate::steps::{Steps, LOOK_EVERY};
use crate::LspClose;

/// What the close speaks over: our ends of the server's stdin and stdout (two pipes, or two
/// copies of one socket).
#[derive(Debug)]
pub(crate) struct Channel {
    to: Option<OwnedFd>,
    from: OwnedFd,
}

impl Channel {
    pub(crate) fn new(to: OwnedFd, from: OwnedFd) -> Channel {
        Channel { to: Some(to), from }
    }

    /// The handle's piped stdin and stdout (taken out of it), or copies of its stdio socket.
    pub(crate) fn from_handle(handle: &mut ChildHandle) -> Result<Channel, String> {
        if handle.stdin().is_some() && handle.stdout().is_some() {
            let to = handle.take_stdin().map(OwnedFd::from);
            let from = handle.take_stdout().map(OwnedFd::from);
            if let (Some(to), Some(from)) = (to, from) {
                return Ok(Channel::new(to, from));
            }
        }
        if let Some(socket) = handle.socket() {
            let copies = socket
                .try_clone()
                .and_then(|a| Ok((a, socket.try_clone()?)));
            return match copies {
                Ok((to, from)) => Ok(Channel::new(to.into(), from.into())),
                Err(e) => Err(format!("copying the handle's stdio socket failed: {e}")),
            };
        }
        Err(NO_CHANNEL.into())
    }

    /// The server's end of file on its input: our end closed (a socket shut down for writing
    /// first: another copy of it may be open).
    fn end_input(&mut self) {
        if let Some(to) = self.to.take() {
            let _not_a_socket = rustix::net::shutdown(&to, rustix::net::Shutdown::Write);
        }
    }
}

pub(crate) const NO_CHANNEL: &str = "the handle has neither its piped stdin and stdout \
    (Stdio::piped(), still in the handle) nor a stdio socket to speak over";

/// The whole close over `channel` (or, without one, straight to the handle's close).
pub(crate) fn run(
    mut handle: ChildHandle,
    channel: Result<Channel, String>,
    how: &LspClose,
) -> Result<LspCloseReport, Error> {
    let mut steps = Steps::new();
    let gone = steps.gone_before(&mut handle);
    let mut kept = None;
    match channel {
        Err(why) if !gone => steps.shutdown = Shutdown::NotSent(why),
        Err(_) => {}
        Ok(mut channel) => {
            if !gone {
                speak(&mut handle, &mut channel, how, &mut steps);
            }
            channel.end_input();
            kept = Some(channel);
        }
    }
    let closed = handle.close();
    // Our end of the server's stdout stays open through the ladder (no SIGPIPE for a server
    // that writes while it exits), as the handle keeps its own.
    drop(kept);
    steps.finish(closed)
}

/// `shutdown`, its answer, `exit`, the end of file, the exit grace.
fn speak(handle: &mut ChildHandle, channel: &mut Channel, how: &LspClose, steps: &mut Steps) {
    let deadline = later(steps.began, how.shutdown_timeout);
    let Some(to) = channel.to.as_ref() else {
        return;
    };
    let nonblocking = rustix::io::ioctl_fionbio(to, true)
        .and_then(|()| rustix::io::ioctl_fionbio(&channel.from, true));
    let outcome = match nonblocking.map_err(io::Error::from) {
        Err(e) => Shutdown::NotSent(format!("making our ends non-blocking failed: {e}")),
        Ok(()) => match write_all(to.as_fd(), &shutdown_request(), deadline) {
            Err(why) => Shutdown::NotSent(why),
            Ok(()) => listen(handle, to.as_fd(), channel.from.as_fd(), deadline, steps),
        },
    };
    steps.shutdown_over(outcome);
    if steps.exit_due(handle) {
        let written = write_all(
            to.as_fd(),
            &exit_notification(),
            later(Instant::now(), how.exit_grace),
        );
        steps.exit_written(written);
    }
    channel.end_input();
    if steps.exit_sent.is_some() {
        let exited = handle.wait_timeout(how.exit_grace).map(|s| s.is_some());
        steps.exit_grace_over(exited);
    }
}

/// Reads until `shutdown`'s answer, answering the server's requests and dropping the rest.
fn listen(
    handle: &mut ChildHandle,
    to: BorrowedFd<'_>,
    from: BorrowedFd<'_>,
    deadline: Instant,
    steps: &mut Steps,
) -> Shutdown {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match steps.listener.next() {
            Next::Done(outcome) => return outcome,
            Next::Reply(reply) => {
                if steps.input_broken.is_none() {
                    if let Err(why) = write_all(to, &reply, deadline) {
                        steps.reply_failed(why);
                    }
                }
                continue;
            }
            Next::Read => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return Shutdown::TimedOut;
        }
        match ready(from, PollFlags::IN, deadline.min(now + LOOK_EVERY)) {
            Err(e) => return Shutdown::Unreadable(format!("waiting on the server's stdout: {e}")),
            Ok(false) if steps.exited_now(handle) => return Shutdown::Exited,
            Ok(false) => continue,
            Ok(true) => {}
        }
        match rustix::io::read(from, &mut buf[..]) {
            Ok(0) => return Shutdown::StdoutClosed,
            Ok(n) => steps.listener.push(&buf[..n]),
            Err(Errno::AGAIN | Errno::INTR) => {}
            Err(e) => return Shutdown::Unreadable(format!("reading the server's stdout: {e}")),
        }
    }
}

/// Writes all of `bytes`, waiting for room in the pipe until `deadline` at most.
fn write_all(to: BorrowedFd<'_>, mut bytes: &[u8], deadline: Instant) -> Result<(), String> {
    while !bytes.is_empty() {
        match rustix::io::write(to, bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => match ready(to, PollFlags::OUT, deadline) {
                Ok(true) => {}
                Ok(false) => return Err("the server's stdin stayed full (it does not read)".into()),
                Err(e) => return Err(format!("waiting on the server's stdin: {e}")),
            },
            Err(e) => {
                return Err(format!(
                    "writing to the server's stdin failed: {}",
                    io::Error::from(e)
                ))
            }
        }
    }
    Ok(())
}

/// Whether `fd` turned ready for `flags` (or hung up, or failed) before `deadline`.
fn ready(fd: BorrowedFd<'_>, flags: PollFlags, deadline: Instant) -> io::Result<bool> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // Under a second per poll: any Duration fits a Timespec then.
        let slice = Timespec::try_from(left.min(std::time::Duration::from_secs(1)))
            .map_err(io::Error::other)?;
        let mut fds = [PollFd::from_borrowed_fd(fd, flags)];
        match poll(&mut fds, Some(&slice)) {
            Ok(0) if left.is_zero() => return Ok(false),
            Ok(0) => {}
            Ok(_) => return Ok(true),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// `at + wait`, saturating (a wait too long for the clock: a century).
pub(crate) fn later(at: Instant, wait: std::time::Duration) -> Instant {
    at.checked_add(wait)
        .or_else(|| at.checked_add(std::time::Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(at)
}
