//! The event loop: one thread per process that carries every watch the library keeps in the
//! background — children's pidfds and their rung deadlines (the [reaper](crate::reaper)),
//! captured pipes (the capture drain), every `cgroup.events` watch ([`super::file_watch`]),
//! notify sockets while a close in the
//! background listens to them, and `SIGCHLD` for children on the portable mechanism.
//!
//! Model: systemd's sd-event. One `epoll` set (Linux; `poll(2)` over the same sources
//! elsewhere) holds every source; one deadline heap ([`super::timers`]) bounds the wait; a
//! wake socket carries tasks posted from other threads ([`Loop::post`]) and, once a client
//! asks for it ([`Loop::hook_sigchld`]), one byte per `SIGCHLD`. Sources:
//!
//! - *io*: a readable fd runs its handler ([`Ops::add_io`]); the loop owns the fd and closes
//!   it when the source is removed. Children's pidfds are io sources of the reaper.
//! - *time*: a one-shot timer ([`Ops::add_timer`]).
//! - *file*: a kernfs file's fd for `EPOLLPRI`, edge-triggered, whose changes ring an eventfd
//!   of its owner ([`super::file_watch`]).
//! - *wake*: handlers run on every wake-up ([`Ops::on_wake`]): a capture sync, the portable
//!   mechanism's `SIGCHLD`.
//!
//! Handlers run on the loop thread and must not block: they read non-blocking fds, signal,
//! and hand slow work (a user's `on_line`, a passthrough write) to other threads. Everything
//! a handler owns lives on the loop thread (`Ops` is not `Send`); other threads reach it only
//! through [`Loop::post`].
//!
//! Per process ([`crate::core::per_process`]): a child made by `fork()` without `exec` inherits
//! the parent's loop but not its thread, and starts its own; the sources of the parent (its
//! jobs, its pipes) live on the parent's loop thread only, so the child never touches them.
//! Made by the first client and its thread started by the first that needs it to run
//! ([`get`]): a `cgroup.events` watch only registers in the epoll set ([`watch_file`]), and the
//! thread starts when someone waits on a watch's bell ([`ensure_running`]), posts a task, or
//! needs any other source. So a contained child that exits and is closed with its cgroup
//! already empty (`childguard init -- true`) costs no thread at all. Events that come before
//! the thread runs wait in the epoll set (`EPOLLET` queues the readiness change) and are
//! delivered at its first wait. A start that fails (no fd or thread left) is tried again by the
//! next use (the reaper parks its jobs meanwhile); a loop made but not started keeps its epoll
//! set and wake socket.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub(crate) use super::timers::TimerId;
use super::timers::Timers;
use crate::core::per_process::PerProcess;

/// Work posted to the loop thread from any thread.
pub(crate) type Task = Box<dyn FnOnce(&mut Ops) + Send>;
/// Runs on the loop thread each time its fd is readable (level-triggered: again on the next
/// round while it stays readable).
pub(crate) type IoHandler = Box<dyn FnMut(&mut Ops, IoId)>;
type TimerFn = Box<dyn FnOnce(&mut Ops)>;
type WakeHandler = Box<dyn FnMut(&mut Ops)>;

/// The name of the loop's thread (as `/proc/self/task/*/comm` shows it: 15 bytes at most).
pub(crate) const THREAD_NAME: &str = "childguard-loop";

/// The part of the loop other threads share.
pub(crate) struct Loop {
    inbox: Mutex<Vec<Task>>,
    wake_tx: UnixStream,
    sigchld_hooked: OnceLock<()>,
    #[cfg(target_os = "linux")]
    watches: super::file_watch::Watches,
    /// What the thread runs on, until it is started (taken then; put back if no thread could
    /// be made).
    dormant: Mutex<Option<(UnixStream, Poller)>>,
    /// Set once the thread runs (never unset).
    started: AtomicBool,
}

/// Watches the kernfs file open at `file` (`cgroup.events`) for changes in the loop's epoll
/// set, making the loop if need be — without starting its thread: a watch costs an epoll
/// registration and a bell, and whoever waits on the bell starts the thread first
/// ([`ensure_running`]).
#[cfg(target_os = "linux")]
pub(crate) fn watch_file(file: OwnedFd) -> io::Result<super::file_watch::FileWatch> {
    super::file_watch::FileWatch::new(&made()?.watches, file)
}

/// This process's loop, made (its thread perhaps not started yet).
static LOOP: PerProcess<Loop> = PerProcess::new();

/// The epoll user data of the wake socket.
const WAKE: u64 = u64::MAX;
/// The longest single wait: a bound, not a poll interval (every change wakes us before).
const MAX_WAIT: Duration = Duration::from_secs(3600);

/// This process's loop, its thread started. `Err`: no thread or fd for it (`EMFILE`,
/// `pids.max`, `RLIMIT_NPROC`); the next call tries again.
pub(crate) fn get() -> io::Result<&'static Loop> {
    let lp = made()?;
    lp.ensure_running()?;
    Ok(lp)
}

/// Starts this process's loop thread if it does not run yet (see the module docs). For the
/// `cgroup.events` watches, which are Linux-only.
#[cfg(target_os = "linux")]
pub(crate) fn ensure_running() -> io::Result<()> {
    get().map(drop)
}

/// This process's loop, made if need be, its thread not started.
fn made() -> io::Result<&'static Loop> {
    LOOP.get_or_publish(|| {
        crate::failpoint::check(crate::failpoint::Point::ReaperStart)?;
        let (wake_tx, wake_rx) = UnixStream::pair()?;
        wake_tx.set_nonblocking(true)?;
        wake_rx.set_nonblocking(true)?;
        let poller = Poller::new(&wake_rx)?;
        Ok(Loop {
            inbox: Mutex::new(Vec::new()),
            wake_tx,
            sigchld_hooked: OnceLock::new(),
            #[cfg(target_os = "linux")]
            watches: super::file_watch::Watches::new(std::sync::Arc::clone(&poller.epoll)),
            dormant: Mutex::new(Some((wake_rx, poller))),
            started: AtomicBool::new(false),
        })
    })
}

/// This process's loop if its thread runs already (never starts it).
pub(crate) fn running() -> Option<&'static Loop> {
    LOOP.get().filter(|lp| lp.started.load(Ordering::Acquire))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Loop {
    /// Starts the thread unless it runs.
    ///
    /// Race avoided (two first needs at once): the thread's state is taken under the lock,
    /// so one thread is started; the other finds the state gone and the flag set (both are
    /// changed under the lock). A start that fails puts the state back.
    fn ensure_running(&'static self) -> io::Result<()> {
        if self.started.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut dormant = lock(&self.dormant);
        let Some(state) = dormant.take() else {
            return Ok(());
        };
        let (go, start) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                if let Ok(state) = start.recv() {
                    run(self, state);
                }
            });
        match spawned {
            Ok(_) => {
                let _ = go.send(state);
                self.started.store(true, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                *dormant = Some(state);
                Err(e)
            }
        }
    }

    /// Runs `task` on the loop thread, soon. Tasks run in the order posted.
    ///
    /// Race avoided (lost wake-up): the task is queued before the wake byte is written, and
    /// the loop reads the wake socket empty before it takes the queue: a task queued after
    /// the loop took the queue comes with a byte the loop has not read yet.
    pub(crate) fn post(&self, task: impl FnOnce(&mut Ops) + Send + 'static) {
        lock(&self.inbox).push(Box::new(task));
        self.wake();
    }

    /// Wakes the loop: its [`Ops::on_wake`] handlers run. One pending byte is enough, so a
    /// full socket is fine.
    pub(crate) fn wake(&self) {
        let _ = (&self.wake_tx).write(&[1]);
    }

    /// From now on each `SIGCHLD` wakes the loop (signal-hook writes the wake socket from its
    /// handler, chained after the host's). Returns whether this call hooked it; a caller that
    /// did must look at its children once more, since a `SIGCHLD` before the hook was missed.
    pub(crate) fn hook_sigchld(&self) -> bool {
        let mut now = false;
        self.sigchld_hooked.get_or_init(|| {
            now = true;
            if let Ok(tx) = self.wake_tx.try_clone() {
                // A full socket drops a byte, which is fine: one pending byte wakes us.
                let _ = signal_hook::low_level::pipe::register(libc::SIGCHLD, tx);
            }
        });
        now
    }
}

/// Names an io source (slot index and generation: a stale event for a removed source never
/// reaches the source that reuses its slot). Also its epoll user data: the generation has 31
/// bits, so the key never has [`super::file_watch::WATCH_BIT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct IoId(u64);

struct IoSlot {
    fd: OwnedFd,
    generation: u32,
    /// Out while it runs.
    handler: Option<IoHandler>,
}

/// The loop thread's side: every source, and what handlers may do.
pub(crate) struct Ops {
    poller: Poller,
    io: Vec<Option<IoSlot>>,
    free: Vec<usize>,
    generation: u32,
    timers: Timers<TimerFn>,
    on_wake: Vec<WakeHandler>,
}

impl Ops {
    /// Watches `fd`: `handler` runs each round while it is readable (or hung up). The loop
    /// owns `fd` from now on. `Err`: epoll refused it (`ENOMEM`, `ENOSPC`: the per-user
    /// `max_user_watches`), and `fd` comes back.
    pub(crate) fn add_io(
        &mut self,
        fd: OwnedFd,
        handler: IoHandler,
    ) -> Result<IoId, (OwnedFd, io::Error)> {
        self.generation = self.generation.wrapping_add(1) & 0x7fff_ffff;
        let index = self.free.pop().unwrap_or_else(|| {
            self.io.push(None);
            self.io.len() - 1
        });
        let id = IoId((u64::from(self.generation) << 32) | index as u64);
        if let Err(e) = self.poller.add(&fd, id.0) {
            self.free.push(index);
            return Err((fd, e));
        }
        self.io[index] = Some(IoSlot {
            fd,
            generation: self.generation,
            handler: Some(handler),
        });
        Ok(id)
    }

    /// Stops watching the source `id` and gives its fd back (`None`: removed before).
    pub(crate) fn remove_io(&mut self, id: IoId) -> Option<OwnedFd> {
        let index = (id.0 & 0xffff_ffff) as usize;
        let slot = self.io.get_mut(index)?;
        if slot.as_ref().map(|s| s.generation) != Some((id.0 >> 32) as u32) {
            return None;
        }
        let slot = slot.take()?;
        self.poller.remove(&slot.fd);
        self.free.push(index);
        Some(slot.fd)
    }

    /// The fd of the source `id`, while it is watched.
    pub(crate) fn fd(&self, id: IoId) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        let slot = self.io.get((id.0 & 0xffff_ffff) as usize)?.as_ref()?;
        (slot.generation == (id.0 >> 32) as u32).then(|| slot.fd.as_fd())
    }

    /// Runs `f` once `at` has come (on the loop thread).
    pub(crate) fn add_timer(&mut self, at: Instant, f: impl FnOnce(&mut Ops) + 'static) -> TimerId {
        self.timers.add(at, Box::new(f))
    }

    /// Forgets a timer that has not run yet.
    pub(crate) fn cancel_timer(&mut self, id: TimerId) {
        self.timers.cancel(id);
    }

    /// Runs `f` on every wake-up of the loop ([`Loop::wake`], [`Loop::post`], `SIGCHLD` once
    /// hooked), for the life of the loop.
    pub(crate) fn on_wake(&mut self, f: impl FnMut(&mut Ops) + 'static) {
        self.on_wake.push(Box::new(f));
    }

    fn fire(&mut self, key: u64) {
        let index = (key & 0xffff_ffff) as usize;
        let generation = (key >> 32) as u32;
        let Some(Some(slot)) = self.io.get_mut(index) else {
            return;
        };
        if slot.generation != generation {
            return; // removed earlier in this round
        }
        let Some(mut handler) = slot.handler.take() else {
            return;
        };
        handler(self, IoId(key));
        // Put back unless the handler removed its own source.
        if let Some(Some(slot)) = self.io.get_mut(index) {
            if slot.generation == generation {
                slot.handler = Some(handler);
            }
        }
    }

    fn run_wake_handlers(&mut self) {
        let mut handlers = std::mem::take(&mut self.on_wake);
        for handler in &mut handlers {
            handler(self);
        }
        // Handlers added by these handlers come after them.
        handlers.append(&mut self.on_wake);
        self.on_wake = handlers;
    }
}

fn run(lp: &'static Loop, (mut wake_rx, poller): (UnixStream, Poller)) {
    let mut ops = Ops {
        poller,
        io: Vec::new(),
        free: Vec::new(),
        generation: 0,
        timers: Timers::default(),
        on_wake: Vec::new(),
    };
    let mut events = Vec::new();
    loop {
        let deadline = ops.timers.next_deadline();
        if ops.wait(&wake_rx, deadline, &mut events).is_err() {
            // Should not happen (EBADF, ENOMEM): don't spin; the sources are looked at again.
            std::thread::sleep(Duration::from_millis(10));
            events.clear();
        }
        let mut woken = false;
        for &key in &events {
            match key {
                WAKE => woken = true,
                #[cfg(target_os = "linux")]
                key if key & super::file_watch::WATCH_BIT != 0 => lp.watches.dispatch(key),
                key => ops.fire(key),
            }
        }
        if woken {
            // Read empty *before* the queue is taken (see `Loop::post`).
            let mut sink = [0u8; 256];
            while matches!(wake_rx.read(&mut sink), Ok(n) if n > 0) {}
            let tasks = std::mem::take(&mut *lock(&lp.inbox));
            for task in tasks {
                task(&mut ops);
            }
            ops.run_wake_handlers();
        }
        for timer in ops.timers.take_due(Instant::now()) {
            timer(&mut ops);
        }
    }
}

fn timeout_until(deadline: Option<Instant>) -> rustix::event::Timespec {
    let left = deadline.map_or(MAX_WAIT, |d| {
        d.saturating_duration_since(Instant::now()).min(MAX_WAIT)
    });
    rustix::event::Timespec::try_from(left).unwrap_or(rustix::event::Timespec {
        tv_sec: MAX_WAIT.as_secs() as _,
        tv_nsec: 0,
    })
}

/// What the loop blocks in: an epoll set (Linux), or nothing kept (elsewhere: `poll(2)` over
/// the wake socket and every io source, listed anew each round).
struct Poller {
    /// Shared with the file watches, which add and delete their fds from any thread
    /// (`epoll_ctl` is thread-safe).
    #[cfg(target_os = "linux")]
    epoll: std::sync::Arc<OwnedFd>,
}

#[cfg(target_os = "linux")]
impl Poller {
    fn new(wake_rx: &UnixStream) -> io::Result<Poller> {
        use rustix::event::epoll;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &epoll,
            wake_rx,
            epoll::EventData::new_u64(WAKE),
            epoll::EventFlags::IN,
        )?;
        Ok(Poller {
            epoll: std::sync::Arc::new(epoll),
        })
    }

    fn add(&self, fd: &OwnedFd, key: u64) -> io::Result<()> {
        use rustix::event::epoll;
        let data = epoll::EventData::new_u64(key);
        Ok(epoll::add(&self.epoll, fd, data, epoll::EventFlags::IN)?)
    }

    fn remove(&self, fd: &OwnedFd) {
        let _ = rustix::event::epoll::delete(&self.epoll, fd);
    }
}

#[cfg(not(target_os = "linux"))]
impl Poller {
    fn new(_wake_rx: &UnixStream) -> io::Result<Poller> {
        Ok(Poller {})
    }

    fn add(&self, _fd: &OwnedFd, _key: u64) -> io::Result<()> {
        Ok(())
    }

    fn remove(&self, _fd: &OwnedFd) {}
}

impl Ops {
    /// Blocks until a source is readable or `deadline` passes; `events` gets the keys that
    /// fired.
    #[cfg(target_os = "linux")]
    fn wait(
        &mut self,
        _wake_rx: &UnixStream,
        deadline: Option<Instant>,
        events: &mut Vec<u64>,
    ) -> io::Result<()> {
        use rustix::event::epoll;
        events.clear();
        let timeout = timeout_until(deadline);
        let mut buf: Vec<epoll::Event> = Vec::with_capacity(256);
        match epoll::wait(
            &self.poller.epoll,
            rustix::buffer::spare_capacity(&mut buf),
            Some(&timeout),
        ) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        events.extend(buf.iter().map(|e| e.data.u64()));
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    fn wait(
        &mut self,
        wake_rx: &UnixStream,
        deadline: Option<Instant>,
        events: &mut Vec<u64>,
    ) -> io::Result<()> {
        use rustix::event::{poll, PollFd, PollFlags};
        events.clear();
        let timeout = timeout_until(deadline);
        let mut keys = vec![WAKE];
        let mut fds = vec![PollFd::new(wake_rx, PollFlags::IN)];
        for (index, slot) in self.io.iter().enumerate() {
            if let Some(slot) = slot {
                keys.push((u64::from(slot.generation) << 32) | index as u64);
                fds.push(PollFd::new(&slot.fd, PollFlags::IN));
            }
        }
        match poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        for (key, fd) in keys.iter().zip(&fds) {
            if !fd.revents().is_empty() {
                events.push(*key);
            }
        }
        Ok(())
    }
}
