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
//! The fd is added when the watch is first waited on, not when it is made
//! ([`FileWatch::fd`]): most contained children are closed with their cgroup found empty at the
//! first read, and their watch then never costs an `epoll_ctl` or a wake-up of the loop.
//!
//! Race avoided (`fork()` without `exec`): a child inherits the parent's epoll fd — the same
//! epoll set — and copies of the watched fds. A watch dropped there must not delete the
//! parent's registration: only the process that made a watch touches the epoll set.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// One watch: the watched file's fd, entered in the loop's epoll set when first waited on,
/// and the bell its changes ring.
#[derive(Debug)]
pub(crate) struct FileWatch {
    file: OwnedFd,
    number: u64,
    bell: Arc<Bell>,
    watches: &'static Watches,
    /// Set once the file is in the epoll set ([`FileWatch::fd`]).
    registered: AtomicBool,
}

impl FileWatch {
    /// A watch of the kernfs file open at `file` for changes (`EPOLLPRI`) in `watches`, the
    /// loop's ([`super::event_loop::watch_file`] finds it, making the loop if need be). Not
    /// in the epoll set yet: the first [`FileWatch::fd`] enters it, so a file nobody waits on
    /// (a contained child's cgroup found empty at its first read) costs no `epoll_ctl` and no
    /// wake-up of the loop's thread — each change of a watched `cgroup.events` (the child's
    /// birth into the cgroup) wakes it. The bell is close-on-exec and non-blocking.
    pub(crate) fn new(watches: &'static Watches, file: OwnedFd) -> io::Result<FileWatch> {
        let bell = Arc::new(Bell::new()?);
        let number = watches.next.fetch_add(1, Ordering::Relaxed) & !WATCH_BIT;
        // Entered first: see "event before its key is known".
        lock(&watches.bells).insert(number, Arc::clone(&bell));
        Ok(FileWatch {
            file,
            number,
            bell,
            watches,
            registered: AtomicBool::new(false),
        })
    }

    /// The watched file, to read (`pread`) after [`FileWatch::clear`].
    pub(crate) fn file(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The fd that turns readable when the file changed (until [`FileWatch::clear`]), the
    /// file entered in the epoll set first if it is not yet. `Err` (`ENOMEM`, `ENOSPC`: the
    /// per-user `fs.epoll.max_user_watches`; or called in a `fork()`ed copy of the process
    /// that made the watch, which must not touch its epoll set): the caller waits another
    /// way; the next call tries again.
    ///
    /// Race avoided (a change before the registration): `epoll_ctl(ADD)` polls the file at
    /// once, and a kernfs file reports `EPOLLPRI` while its count of changes differs from
    /// the one this open file last read — so a change between the owner's last read and the
    /// registration is reported by the registration itself and rings the bell.
    pub(crate) fn fd(&self) -> io::Result<BorrowedFd<'_>> {
        if !self.registered.load(Ordering::Acquire) {
            if self.watches.owner != std::process::id() {
                return Err(io::Error::other(
                    "a watch made by the parent process, before fork(): not entered in its epoll set",
                ));
            }
            let flags = epoll::EventFlags::PRI | epoll::EventFlags::ET;
            let data = epoll::EventData::new_u64(WATCH_BIT | self.number);
            match epoll::add(&*self.watches.epoll, &self.file, data, flags) {
                // EEXIST: another thread entered it first.
                Ok(()) | Err(rustix::io::Errno::EXIST) => {
                    self.registered.store(true, Ordering::Release)
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(self.bell.fd())
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
        if *self.registered.get_mut() {
            let _ = epoll::delete(&*self.watches.epoll, &self.file);
        }
        lock(&self.watches.bells).remove(&self.number);
    }
}
