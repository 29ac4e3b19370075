//! `cgroup.events` (`populated 0|1`, `frozen 0|1`) and a watch on it.
//!
//! The kernel notifies `cgroup.events` (`kernfs_notify`: `POLLPRI` on every open copy, and
//! inotify `IN_MODIFY`) each time one of its values changes. We wait on a plainly *readable*
//! fd rather than on `POLLPRI`, so that every driver that waits for readable fds — `poll` in
//! the blocking close, the event loop's epoll set, tokio's `AsyncFd` — can wait on it
//! unchanged (a kernfs file is always `POLLIN`-ready, which would make them spin). That fd is
//! the watch's bell, rung by the event loop, which holds our open `cgroup.events` in its epoll
//! set for `EPOLLPRI` ([`crate::core::file_watch`]: why not inotify).
//!
//! Race avoided (lost wake-up): the bell is emptied *before* the file is read, so a change
//! after the read rings it again and wakes the next wait; a change between emptying and read
//! is seen by the read itself.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;

use rustix::fs::OFlags;

use crate::core::file_watch::FileWatch;

use super::explain::explain;

/// `cgroup.events`, opened and watched in the loop's epoll set.
#[derive(Debug)]
pub(crate) struct Watch {
    watch: FileWatch,
}

/// The values of `cgroup.events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Events {
    /// Some process lives in the cgroup (or in a descendant cgroup).
    pub populated: bool,
    /// The cgroup is frozen (every member stopped by `cgroup.freeze`).
    pub frozen: bool,
}

impl Watch {
    /// Opens `cgroup.events` of the cgroup open as `dir` (at `path`, for messages) and watches
    /// it (close-on-exec, non-blocking): a bell in the event loop's table; the file enters
    /// the loop's epoll set, and the loop's thread starts, only when someone waits
    /// ([`Watch::fd`]).
    pub(crate) fn open(dir: BorrowedFd<'_>, path: &Path) -> io::Result<Watch> {
        let path = path.join("cgroup.events");
        let events = super::at::open_file_at(dir, "cgroup.events", OFlags::RDONLY)
            .map_err(|e| explain(&path, "opening", e.into()))?;
        let watch = crate::core::event_loop::watch_file(events)
            .map_err(|e| explain(&path, "watching (epoll)", e))?;
        Ok(Watch { watch })
    }

    /// The fd that turns readable when `cgroup.events` changes: the watch's bell, which the
    /// event loop rings — so this starts the loop's thread if it does not run yet, and enters
    /// the file in the loop's epoll set if it is not yet. If no thread can be started
    /// (`pids.max`, `RLIMIT_NPROC`) or the file cannot be entered (`fs.epoll.max_user_watches`),
    /// the file itself, which is always readable: a waiter then reads the values at each
    /// round until its deadline, a busy wait instead of a hang.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match crate::core::event_loop::ensure_running().and_then(|()| self.watch.fd()) {
            Ok(bell) => bell,
            Err(_) => self.watch.file(),
        }
    }

    /// Waits until `cgroup.events` may have changed since the last [`Watch::read`], or
    /// `deadline` (the one wait primitive, on the watch's bell).
    pub(crate) fn wait(&self, deadline: std::time::Instant) -> io::Result<()> {
        crate::core::wait::Wait::until(deadline)
            .fds(&[self.fd()])
            .run()
            .map(drop)
    }

    /// Empties the bell without reading the file: for a waiter that does not need the values
    /// now (the leader still runs, so the cgroup is populated).
    pub(crate) fn clear(&self) -> io::Result<()> {
        self.watch.clear()
    }

    /// Empties the bell, then reads the current values (see the lost wake-up above).
    pub(crate) fn read(&self) -> io::Result<Events> {
        self.watch.clear()?;
        let mut text = [0u8; 128];
        let n = rustix::io::pread(self.watch.file(), &mut text[..], 0)?;
        parse(&text[..n]).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "cgroup.events: unexpected contents {:?}",
                    String::from_utf8_lossy(&text[..n])
                ),
            )
        })
    }
}

/// Parses `populated N\nfrozen N\n`.
fn parse(text: &[u8]) -> Option<Events> {
    let text = std::str::from_utf8(text).ok()?;
    let mut populated = None;
    let mut frozen = false;
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("populated", v)) => populated = Some(v == "1"),
            Some(("frozen", v)) => frozen = v == "1",
            _ => {}
        }
    }
    Some(Events {
        populated: populated?,
        frozen,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_events_file() {
        assert_eq!(
            parse(b"populated 1\nfrozen 0\n"),
            Some(Events {
                populated: true,
                frozen: false
            })
        );
        assert_eq!(
            parse(b"populated 0\nfrozen 1\n"),
            Some(Events {
                populated: false,
                frozen: true
            })
        );
        assert_eq!(parse(b"frozen 0\n"), None);
    }
}
