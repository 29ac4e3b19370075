//! Process-wide values that belong to the process that made them: the event loop (reaper,
//! capture drain, cgroup watches), the callback thread, the spawner and the `SIGCHLD` notifier,
//! each served by a thread of its own.
//!
//! Race avoided (`fork()` without `exec`): a child made by `fork()` gets a copy of every
//! global, but only the thread that forked. A global that points at a thread of the parent
//! then points at nothing: requests sent to it are never answered (an `exit_with_parent`
//! spawn blocks forever, a hand-off is never climbed, `drain()` waits for jobs that are the
//! parent's). So each value here is stamped with the pid of the process that made it, as the
//! kept `/proc/self/fd` handle of `inheritable.rs` is, and a process that finds another pid's
//! stamp starts its own.
//!
//! The old value is abandoned, never touched again: none of its locks is taken (a thread of
//! the parent may have held one at the moment of the fork, and it would stay locked forever
//! here — which is also why the slot itself is an atomic pointer, not a lock), no thread is
//! joined (none exists here), and none of its fds is closed. Those fds are this child's
//! copies of the parent's: an `epoll` instance, sockets and pipes shared with the parent,
//! whose threads still use them. Closing our copies would be harmless to the parent but
//! would need the values' owners (a dead thread's stack holds some), and using them would not:
//! an `epoll_ctl` on the shared instance changes the parent's registrations. They stay open,
//! close-on-exec, for the life of the child: a few fds per generation of forks.
//!
//! Left open: a pid is only unique among live processes. A grandchild that gets, by pid
//! reuse, the pid of an ancestor that made a value and has died since, inherits that value and
//! takes it for its own — if no process in between replaced it. Only a fork generation
//! counter bumped in a `pthread_atfork` child handler would close that (and not for raw
//! `clone`); we accept it as the kernel makes it: about one chance in `pid_max` per such fork.

use std::io;
use std::sync::mpsc;

use crate::sys::Published;

/// A value owned by the process that published it.
#[derive(Debug)]
pub(crate) struct PerProcess<T: 'static> {
    slot: Published<Stamped<T>>,
}

#[derive(Debug)]
struct Stamped<T> {
    pid: u32,
    value: T,
}

impl<T: Send + Sync + 'static> PerProcess<T> {
    pub(crate) const fn new() -> PerProcess<T> {
        PerProcess {
            slot: Published::new(),
        }
    }

    /// This process's value, if it has published one (a value inherited through `fork()` is
    /// not this process's).
    pub(crate) fn get(&self) -> Option<&'static T> {
        let me = std::process::id();
        self.slot
            .load()
            .filter(|stamped| stamped.pid == me)
            .map(|stamped| &stamped.value)
    }

    /// This process's value, started if it has none: `make` builds it and what its thread
    /// needs (`state`), a thread named `name` is started, and, once the value is published,
    /// runs `serve(value, state)` — for the life of the process.
    ///
    /// Only a value whose thread runs is published: a start that fails (`make` fails, or no
    /// thread can be created: `RLIMIT_NPROC`, `pids.max`) leaves nothing behind, the caller
    /// gets the error, and the next use tries again.
    ///
    /// Race avoided (two first uses at once): both may start a thread; one value is
    /// published, and the other thread is told to end (its channel closes) before it serves
    /// anything, dropping its state (fds, signal registrations) as it goes. No lock is held
    /// across the start, so a `fork()` in the middle of one cannot leave the child a lock it
    /// waits on forever.
    pub(crate) fn get_or_start<S: Send + 'static>(
        &self,
        name: &str,
        make: impl FnOnce() -> io::Result<(T, S)>,
        serve: fn(&'static T, S),
    ) -> io::Result<&'static T> {
        if let Some(value) = self.get() {
            return Ok(value);
        }
        let (value, state) = make()?;
        // The thread waits to be told which value it serves (or that it lost the race).
        let (go, start) = mpsc::channel::<&'static T>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Ok(value) = start.recv() {
                    serve(value, state);
                }
            })?;
        match self.publish(value) {
            Ok(ours) => {
                // Whatever arrives for it before the thread reads this waits (in a channel, a
                // socket, signal-hook's pipe): nothing is lost.
                let _ = go.send(ours);
                Ok(ours)
            }
            // Dropping `go` ends our thread; `_ours` goes with it.
            Err((_ours, theirs)) => Ok(theirs),
        }
    }

    /// This process's value, published if it has none, with no thread: `make` builds it; a
    /// value that lost the race to another thread's first use is dropped, and the winner's
    /// returned. For a value whose thread starts later, on first need (the event loop: see
    /// `event_loop::Loop::ensure_running`). `Err`: `make` failed, nothing is published.
    pub(crate) fn get_or_publish(
        &self,
        make: impl FnOnce() -> io::Result<T>,
    ) -> io::Result<&'static T> {
        if let Some(value) = self.get() {
            return Ok(value);
        }
        match self.publish(make()?) {
            Ok(ours) => Ok(ours),
            Err((_ours, theirs)) => Ok(theirs),
        }
    }

    /// Publishes `value` as this process's, unless another thread of this process published
    /// one first: then `value` comes back with the winner, for the caller to undo what it
    /// started for it.
    pub(crate) fn publish(&self, value: T) -> Result<&'static T, (T, &'static T)> {
        let me = std::process::id();
        let mut new = Box::new(Stamped { pid: me, value });
        loop {
            let current = self.slot.load();
            if let Some(ours) = current.filter(|stamped| stamped.pid == me) {
                return Err((new.value, &ours.value));
            }
            match self.slot.replace(current, new) {
                Ok(published) => return Ok(&published.value),
                Err(back) => new = back,
            }
        }
    }
}
