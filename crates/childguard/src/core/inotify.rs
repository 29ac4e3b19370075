//! The loop's one inotify instance, shared by every watch of the process (Linux).
//!
//! Why one: `fs.inotify.max_user_instances` is 128 per user by default, shared with every other
//! program of that user (root is not exempt). An instance per contained child made spawn #129
//! fail with `EMFILE`. Watches (`max_user_watches`, ~1/25 of RAM worth) are cheap, so each
//! watch is a wd in this one instance.
//!
//! What a watch's owner waits on: an eventfd of its own (its *bell*), which the loop thread
//! writes when an event for the watch's wd is read. So the owner keeps a plainly readable fd,
//! as it had with an instance of its own: a blocking `poll`, the loop's epoll set and tokio's
//! `AsyncFd` wait on it unchanged. An eventfd costs one fd but no inotify instance.
//!
//! Race avoided (lost wake-up): the kernel queues the event after the file changed; the loop
//! rings the bell after it read the event; the owner empties its bell *before* it reads the
//! watched file ([`FileWatch::clear`]). A change after the owner's read rings the bell after
//! the emptying, so the next wait wakes; a change between emptying and read is seen by the
//! read itself (and rings once more, a harmless spurious wake-up).
//!
//! Race avoided (event before its wd is known): a watch is added and its wd entered in the
//! table under one lock, which the loop takes to look a wd up: an event read for a new wd
//! waits until the wd is entered.
//!
//! Race avoided (wd reuse): when the watched file goes away (its cgroup removed), the kernel
//! drops the wd and queues `IN_IGNORED`; the loop then forgets the wd, and a watch dropped
//! later does not call `inotify_rm_watch` on it — that number may belong to a newer watch.
//! (The kernel hands out wds cyclically, so reuse needs 2³¹ watches in between; the loop
//! forgetting on `IN_IGNORED` covers the rest.) A queue overflow (`IN_Q_OVERFLOW`) rings every
//! bell: each owner reads its file again.

use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustix::fs::inotify;

use super::bell::Bell;

/// The instance and, per wd, the bells of the watches on it (two watches of one file share
/// its wd: the kernel gives the same one).
pub(crate) struct Instance {
    fd: OwnedFd,
    watches: Mutex<HashMap<i32, Vec<Bells>>>,
    next: AtomicU64,
    /// The process that made it: the one whose loop owns it (see the `fork()` race at the
    /// watch's drop).
    owner: u32,
}

/// A watch's id (to tell two watches of one wd apart) and its bell.
type Bells = (u64, Arc<Bell>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance").field("fd", &self.fd).finish()
    }
}

impl Instance {
    pub(crate) fn new() -> io::Result<Instance> {
        // EMFILE here is the per-user fs.inotify.max_user_instances (or RLIMIT_NOFILE).
        let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
        Ok(Instance {
            fd,
            watches: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            owner: std::process::id(),
        })
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// On the loop thread, when the instance is readable: reads every queued event and rings
    /// the bells of their wds.
    pub(crate) fn dispatch(&self) {
        let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(&self.fd, &mut buf);
        let mut rung: Vec<Arc<Bell>> = Vec::new();
        let mut forget: Vec<i32> = Vec::new();
        let mut overflow = false;
        loop {
            match reader.next() {
                Ok(event) => {
                    let mask = event.events();
                    if mask.contains(inotify::ReadFlags::QUEUE_OVERFLOW) {
                        overflow = true;
                    } else {
                        let watches = lock(&self.watches);
                        if let Some(bells) = watches.get(&event.wd()) {
                            rung.extend(bells.iter().map(|(_, b)| Arc::clone(b)));
                        }
                        drop(watches);
                        if mask.contains(inotify::ReadFlags::IGNORED) {
                            forget.push(event.wd());
                        }
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                // EAGAIN: read empty (or an error we can do nothing about: we are woken again).
                Err(_) => break,
            }
        }
        let mut watches = lock(&self.watches);
        if overflow {
            rung.extend(watches.values().flatten().map(|(_, b)| Arc::clone(b)));
        }
        for wd in forget {
            watches.remove(&wd);
        }
        drop(watches);
        for bell in rung {
            bell.ring();
        }
    }
}

/// One watch: a wd in the loop's instance, and the bell its events ring.
#[derive(Debug)]
pub(crate) struct FileWatch {
    wd: i32,
    id: u64,
    bell: Arc<Bell>,
    /// The instance the wd is in: the loop's of the process that made the watch.
    instance: &'static Instance,
}

impl FileWatch {
    /// Watches `path` for `IN_MODIFY` in `instance`, the loop's
    /// ([`super::event_loop::watch_modify`] finds it, starting the loop if need be). The bell
    /// is close-on-exec and non-blocking.
    pub(crate) fn modify(instance: &'static Instance, path: &Path) -> io::Result<FileWatch> {
        let bell = Arc::new(Bell::new()?);
        let id = instance.next.fetch_add(1, Ordering::Relaxed);
        // Under the lock: see "event before its wd is known".
        let mut watches = lock(&instance.watches);
        let wd = inotify::add_watch(&instance.fd, path, inotify::WatchFlags::MODIFY)?;
        watches.entry(wd).or_default().push((id, Arc::clone(&bell)));
        Ok(FileWatch {
            wd,
            id,
            bell,
            instance,
        })
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
        // Race avoided (`fork()` without `exec`): a watch made before the fork and dropped in
        // the child names a wd of the parent's instance, whose fd the child shares; removing
        // it there would end the parent's watch. Only this process's own instance is touched:
        // an instance belongs to the loop of the process that made it.
        if self.instance.owner != std::process::id() {
            return;
        }
        let instance = self.instance;
        let mut watches = lock(&instance.watches);
        let Some(bells) = watches.get_mut(&self.wd) else {
            return; // the kernel dropped the wd already (IN_IGNORED)
        };
        bells.retain(|(id, _)| *id != self.id);
        if bells.is_empty() {
            watches.remove(&self.wd);
            // Under the lock: no new watch can get this wd back before we removed it.
            let _ = inotify::remove_watch(&instance.fd, self.wd);
        }
    }
}
