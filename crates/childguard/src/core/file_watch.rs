//! Watches on kernfs files (`cgroup.events`) in the loop's epoll set (Linux).
//!
//! The kernel notifies a changed kernfs file (`kernfs_notify`) two ways: a poll wake-up with
//! `POLLPRI` on every open copy, at once, and an inotify `IN_MODIFY`, later, from a work item.
//! We take the first: the watched file's own fd goes into the loop's epoll set for `EPOLLPRI`,
//! edge-triggered, and each wake-up rings an eventfd of the watch's owner (its *bell*). So the
//! owner keeps a plainly readable fd: a blocking `poll`, the loop's epoll set and tokio's
//! `AsyncFd` wait on it unchanged (a kernfs file itself is always `POLLIN`-ready, which would
//! make them spin).
//!
//! Why not inotify, as before: an inotify instance whose watches were removed (every removed
//! cgroup drops its wd) makes its last `close` wait for the kernel's fsnotify mark reaper, an
//! SRCU grace period (`fsnotify_destroy_group` → `fsnotify_wait_marks_destroyed`). That close
//! comes at the process's exit, so a contained `childguard run` or `init` stayed unreapable
//! for milliseconds after its last thread ended (measured: its parent's `waitpid` took 2.7 to
//! 4.4 ms at the median on a loaded machine, 16 µs uncontained). An epoll registration costs
//! nothing at removal, uses no `fs.inotify.max_user_instances` (128 per user) and no
//! `max_user_watches` of inotify, and wakes us without the work item's hop.
//!
//! Edge-triggered because the file's readiness is a level: `EPOLLPRI` (with `EPOLLERR`) stays
//! reported from the change until someone reads the file through that fd (`kernfs` compares
//! the fd's last seen event count with the file's); level-triggered, the loop would spin
//! until the owner read. Each change wakes the wait queue, so each change is delivered once.
//!
//! Race avoided (lost wake-up): the kernel wakes the wait queue after the value changed; the
//! loop rings the bell after that; the owner empties its bell *before* it reads the file
//! ([`FileWatch::clear`]). A change after the owner's read rings the bell after the emptying,
//! so the next wait wakes; a change between emptying and read is seen by the read itself (and
//! rings once more, a harmless spurious wake-up). A change before the registration (the
//! child's birth made the cgroup populated) is reported at registration: one spurious ring.
//!
//! Race avoided (event before its key is known): the bell is entered in the table before the
//! fd is added to the epoll set, so the loop finds it for the first event.
//!
//! Race avoided (`fork()` without `exec`): a child inherits the parent's epoll fd — the same
//! epoll set — and copies of the watched fds. A watch dropped there must not delete the
//! parent's registration: only the process that made a watch touches the epoll set.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::event::epoll;

use super::bell::Bell;

/// The epoll keys of file watches: this bit set, a watch's number in the rest. The loop's
/// other keys keep it clear (io sources: a 31-bit generation in the high half), but for its
/// wake socket, which it matches first.
pub(crate) const WATCH_BIT: u64 = 1 << 63;

/// The loop's table of watches: their bells by number, and the epoll set they are in.
pub(crate) struct Watches {
    epoll: Arc<OwnedFd>,
    bells: Mutex<HashMap<u64, Arc<Bell>>>,
    next: AtomicU64,
    /// The process whose loop owns the epoll set (see the `fork()` race).
    owner: u32,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Watches {
    pub(crate) fn new(epoll: Arc<OwnedFd>) -> Watches {
        Watches {
            epoll,
            bells: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            owner: std::process::id(),
        }
    }

    /// On the loop thread, for an epoll event whose key has [`WATCH_BIT`]: rings the bell of
    /// that watch (none: dropped since the event was queued).
    pub(crate) fn dispatch(&self, key: u64) {
        let bell = lock(&self.bells).get(&(key & !WATCH_BIT)).cloned();
        if let Some(bell) = bell {
            bell.ring();
        }
    }
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watches")
            .field("epoll", &self.epoll)
            .finish()
    }
}

/// One watch: the watched file's fd, in the loop's epoll set, and the bell its changes ring.
#[derive(Debug)]
pub(crate) struct FileWatch {
    file: OwnedFd,
    number: u64,
    bell: Arc<Bell>,
    watches: &'static Watches,
}

impl FileWatch {
    /// Watches the kernfs file open at `file` for changes (`EPOLLPRI`) in `watches`, the
    /// loop's ([`super::event_loop::watch_file`] finds it, making the loop if need be; its
    /// thread, which rings the bell, is started by the first waiter). The
    /// bell is close-on-exec and non-blocking. `Err` (`ENOMEM`, `ENOSPC`: the per-user
    /// `fs.epoll.max_user_watches`): nothing is left registered, and `file` is closed.
    pub(crate) fn new(watches: &'static Watches, file: OwnedFd) -> io::Result<FileWatch> {
        let bell = Arc::new(Bell::new()?);
        let number = watches.next.fetch_add(1, Ordering::Relaxed) & !WATCH_BIT;
        // Entered first: see "event before its key is known".
        lock(&watches.bells).insert(number, Arc::clone(&bell));
        let flags = epoll::EventFlags::PRI | epoll::EventFlags::ET;
        let data = epoll::EventData::new_u64(WATCH_BIT | number);
        if let Err(e) = epoll::add(&*watches.epoll, &file, data, flags) {
            lock(&watches.bells).remove(&number);
            return Err(e.into());
        }
        Ok(FileWatch {
            file,
            number,
            bell,
            watches,
        })
    }

    /// The watched file, to read (`pread`) after [`FileWatch::clear`].
    pub(crate) fn file(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The fd that turns readable when the file changed (until [`FileWatch::clear`]).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.bell.fd()
    }

    /// Empties the bell: call it *before* reading the watched file (see the lost wake-up).
    pub(crate) fn clear(&self) -> io::Result<()> {
        self.bell.clear()
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        // See the `fork()` race: a copy in a forked child leaves the parent's set alone (its
        // fd copy closes; the parent's fd keeps the registration alive).
        if self.watches.owner != std::process::id() {
            return;
        }
        // Before `file` closes (after this body): the registration goes with the number.
        let _ = epoll::delete(&*self.watches.epoll, &self.file);
        lock(&self.watches.bells).remove(&self.number);
    }
}
