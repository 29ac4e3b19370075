//! A bell: an fd that turns readable when rung, so that a thread can wait for a change made on
//! another thread (the event loop's) with the one wait primitive ([`super::wait`]), beside its
//! other fds (a child's pidfd), interruptibly — where a condition variable would wait alone.
//!
//! An eventfd on Linux (one fd); a non-blocking socket pair elsewhere (two).
//!
//! Race avoided (lost wake-up): a waiter [`clear`](Bell::clear)s the bell *before* it looks at
//! the state the ringer changes, and the ringer changes the state *before* it rings. A change
//! after the look rings after the clearing, so the wait that follows wakes at once; a change
//! before the look is seen by the look.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Bell {
    read: OwnedFd,
    #[cfg(not(target_os = "linux"))]
    write: OwnedFd,
}

impl Bell {
    /// A bell not rung yet (close-on-exec, non-blocking).
    #[cfg(target_os = "linux")]
    pub(crate) fn new() -> io::Result<Bell> {
        use rustix::event::{eventfd, EventfdFlags};
        let read = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Bell { read })
    }

    /// A bell not rung yet (close-on-exec, non-blocking).
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn new() -> io::Result<Bell> {
        let (read, write) = std::os::unix::net::UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        Ok(Bell {
            read: read.into(),
            write: write.into(),
        })
    }

    /// Rings: the fd is readable until the next [`Bell::clear`]. Never blocks (a bell rung
    /// many times and not cleared stays readable: one ring is as good as many).
    pub(crate) fn ring(&self) {
        #[cfg(target_os = "linux")]
        let _ = rustix::io::write(&self.read, &1u64.to_ne_bytes());
        #[cfg(not(target_os = "linux"))]
        let _ = rustix::io::write(&self.write, &[1u8]);
    }

    /// The fd to wait on.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// Unrings: call it *before* looking at what the ringer changes (see the module docs).
    pub(crate) fn clear(&self) -> io::Result<()> {
        let mut buf = [0u8; 64];
        loop {
            match rustix::io::read(&self.read, &mut buf) {
                // An eventfd reads empty in one read; a socket may hold more bytes.
                Ok(n) if n > 0 && cfg!(not(target_os = "linux")) => continue,
                Ok(_) | Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_rung_bell_is_readable_until_cleared() {
        let bell = Bell::new().unwrap();
        let soon = || {
            let woke = super::super::wait::Wait::until(Instant::now() + Duration::from_millis(1))
                .fds(&[bell.fd()])
                .run()
                .unwrap();
            matches!(woke, super::super::wait::Woke::Readable(_))
        };
        assert!(!soon());
        bell.ring();
        bell.ring();
        assert!(soon());
        bell.clear().unwrap();
        assert!(!soon());
    }
}
