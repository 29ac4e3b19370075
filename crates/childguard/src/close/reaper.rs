//! The shared background reaper: one thread for the whole program that finishes what a close
//! could not wait for — children that outlived the last rung, handles closed with
//! [`Reap::Background`](crate::Reap::Background) — and reaps them, so no zombie is left behind.
//!
//! It waits in one `epoll` set holding every job's pidfds plus a wake socket, bounded by the
//! nearest rung deadline from a heap: no thread per child, no sleep-polling, and a wake-up
//! costs work only for the jobs it concerns (the fds that fired, the deadlines that came), so
//! thousands of children in flight cost no more per exit than one. The wake socket gets a byte
//! when a job arrives and, for children on the portable mechanism (stepped on every wake-up;
//! the only kind off Linux, where the reaper `poll`s the wake socket alone), on every
//! `SIGCHLD` (signal-hook writes it from the handler).

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::close::climb::Climb;
use crate::process::per_process::PerProcess;
use crate::process::Process;

/// Called once a job ends, with its final process (reaped, or given up after an error).
pub(crate) type OnDone = Box<dyn FnOnce(&Process) + Send>;

/// One child the reaper owns: its ladder, if any rungs are still to come.
pub(crate) struct Job {
    pub(crate) process: Process,
    pub(crate) climb: Option<Climb>,
    /// Run when the job ends (reaped, or given up after an error), with its final process.
    pub(crate) on_done: Option<OnDone>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("process", &self.process)
            .field("climb", &self.climb)
            .finish()
    }
}

struct Reaper {
    inbox: Mutex<Vec<Job>>,
    wake_tx: UnixStream,
    in_flight: AtomicUsize,
    idle: (Mutex<()>, Condvar),
    sigchld_hooked: OnceLock<()>,
}

/// This process's reaper, once its thread runs. Per process
/// ([`crate::process::per_process`]): a child made by `fork()` without `exec` inherits the
/// parent's, whose thread it does not have, and
/// whose jobs (the parent's children, counted in its `in_flight`) are not its own; it starts
/// its own reaper instead, and its `drain` waits only for its own jobs.
static REAPER: PerProcess<Reaper> = PerProcess::new();

/// Jobs whose hand-off found no reaper and could not start one (no thread or fd left:
/// `pids.max`, `RLIMIT_NPROC`, `EMFILE`). Never dropped — that would leave a zombie — and never
/// waited for in place — that would unbound the close: handed to the reaper by the next
/// hand-off or [`drain`] that can start it.
///
/// Per process, as [`REAPER`] is: a child made by `fork()` must not take the parent's parked
/// children for its own (it would signal them), nor a lock a parent's thread may have held at
/// the fork.
static PARKED: PerProcess<Mutex<Vec<Job>>> = PerProcess::new();

/// This process's parked jobs.
fn parked() -> &'static Mutex<Vec<Job>> {
    match PARKED.get() {
        Some(p) => p,
        None => match PARKED.publish(Mutex::new(Vec::new())) {
            Ok(p) | Err((_, p)) => p,
        },
    }
}

/// The reaper, started on first use. Starting can fail (no fd or thread left): the caller
/// then keeps its job, and the next hand-off tries again — only a reaper whose thread runs is
/// published, so no job is ever queued where no thread would take it (see
/// [`PerProcess::get_or_start`]; a reaper that lost a race of first hand-offs closes its epoll
/// fd and wake socket as its thread ends).
fn reaper() -> io::Result<&'static Reaper> {
    REAPER.get_or_start(
        "childguard-reaper",
        || {
            crate::failpoint::check(crate::failpoint::Point::ReaperStart)?;
            let (wake_tx, wake_rx) = UnixStream::pair()?;
            wake_tx.set_nonblocking(true)?;
            wake_rx.set_nonblocking(true)?;
            let poller = Poller::new(wake_rx)?;
            let fresh = Reaper {
                inbox: Mutex::new(Vec::new()),
                wake_tx,
                in_flight: AtomicUsize::new(0),
                idle: (Mutex::new(()), Condvar::new()),
                sigchld_hooked: OnceLock::new(),
            };
            Ok((fresh, poller))
        },
        run,
    )
}

/// Hands a job to the reaper thread, starting it if need be, with any jobs parked before.
///
/// `Err`: no reaper thread could be started. The job is then parked — still owned, not
/// dropped, not waited for — and handed over by the next call (or [`drain`]) that can start
/// the thread; until then its child is left unreaped and its remaining rungs wait.
pub(crate) fn hand_off(job: Job) -> io::Result<()> {
    try_hand_off(job).map_err(|failed| {
        let (job, e) = *failed;
        lock(parked()).push(job);
        e
    })
}

/// [`hand_off`] that gives the job back if no reaper thread can be started (for a caller that
/// can still do something else with it: `detach` hands the handle back).
pub(crate) fn try_hand_off(job: Job) -> Result<(), Box<(Job, io::Error)>> {
    let r = match reaper() {
        Ok(r) => r,
        Err(e) => return Err(Box::new((job, e))),
    };
    let waiting = std::mem::take(&mut *lock(parked()));
    let jobs = waiting.len() + 1;
    crate::base::trace::handed_off(job.process.pid(), jobs);
    if !job.process.uses_pidfd() || waiting.iter().any(|j| !j.process.uses_pidfd()) {
        // Before the job is queued: a SIGCHLD from now on wakes the reaper.
        let _ = hook_sigchld(r);
    }
    r.in_flight.fetch_add(jobs, Ordering::SeqCst);
    let mut inbox = lock(&r.inbox);
    inbox.extend(waiting);
    inbox.push(job);
    drop(inbox);
    let _ = (&r.wake_tx).write(&[1]);
    Ok(())
}

/// Hands parked jobs to the reaper, if it can be started now. Returns whether none is left
/// parked.
fn unpark() -> bool {
    let Some(job) = lock(parked()).pop() else {
        return true;
    };
    hand_off(job).is_ok()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The reaper's SIGCHLD pipe: the handler writes one byte per `SIGCHLD` to the wake socket.
/// Registered the first time a job needs it (the portable mechanism, or a zombie a tracer
/// holds). Returns whether this call registered it.
fn hook_sigchld(r: &Reaper) -> bool {
    let mut now = false;
    r.sigchld_hooked.get_or_init(|| {
        now = true;
        if let Ok(tx) = r.wake_tx.try_clone() {
            // A full pipe just drops a byte, which is fine: one pending byte is enough to wake us.
            let _ = signal_hook::low_level::pipe::register(libc::SIGCHLD, tx);
        }
    });
    now
}

/// How many children the reaper still owns (being signalled or waited for), counting those
/// parked until a reaper thread can be started.
pub fn in_flight() -> usize {
    let owned = REAPER
        .get()
        .map_or(0, |r| r.in_flight.load(Ordering::SeqCst));
    owned + lock(parked()).len()
}

/// Waits until the reaper owns no child, or `deadline` passes. Returns whether it is idle.
///
/// Call it before a program exits when children may still be on their way down: a process that
/// exits leaves its unreaped children to init, and their remaining rungs are never sent.
///
/// Children parked because no reaper thread could be started are handed over first; while it
/// still cannot be started, this tries again every 100 ms until `deadline`.
pub fn drain(deadline: Instant) -> bool {
    while !unpark() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
    let Some(r) = REAPER.get() else { return true };
    let (idle, cond) = &r.idle;
    let mut guard = lock(idle);
    while r.in_flight.load(Ordering::SeqCst) > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        guard = cond
            .wait_timeout(guard, left.min(Duration::from_millis(100)))
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    true
}

fn run(r: &'static Reaper, mut poller: Poller) {
    let mut table = Table::default();
    let mut events = Vec::new();
    loop {
        let now = Instant::now();
        // Who to step: jobs whose fds fired, every new job, every job on SIGCHLD (portable
        // mechanism) when the wake socket fired, and jobs whose rung deadline has come.
        let mut due: Vec<(Key, bool)> = Vec::new();
        let mut woken = false;
        for &key in &events {
            if key == WAKE {
                woken = true;
            } else if key & NOTIFY_BIT != 0 {
                // A datagram on a climb's notify socket: step the job (its climb hears it
                // first), but this says nothing about the child: not `fired`.
                due.push((Key(key & !NOTIFY_BIT), false));
            } else {
                due.push((Key(key), true));
            }
        }
        if woken || events.is_empty() {
            poller.drain_wake();
            let arrived = std::mem::take(&mut *r.inbox.lock().unwrap_or_else(|p| p.into_inner()));
            due.extend(table.portable.iter().map(|&k| (k, false)));
            due.extend(arrived.into_iter().map(|job| (table.insert(job), false)));
        }
        due.extend(table.pop_due(now).into_iter().map(|k| (k, false)));
        let mut finished = 0;
        for (key, fired) in due {
            if table.step(key, now, fired, &poller, r) {
                finished += 1;
            }
        }
        if finished > 0 {
            r.in_flight.fetch_sub(finished, Ordering::SeqCst);
            let _guard = r.idle.0.lock().unwrap_or_else(|p| p.into_inner());
            r.idle.1.notify_all();
        }
        let deadline = table.next_deadline();
        if poller.wait(deadline, &mut events).is_err() {
            // Should not happen (EBADF, ENOMEM): don't spin, and re-check every job.
            std::thread::sleep(Duration::from_millis(10));
            events.clear();
            table.requeue_all(Instant::now());
        }
    }
}

/// Names a job in the [`Table`] (slot index and generation, so a stale event or deadline for a
/// finished job never reaches the job that reuses its slot). Also the epoll user data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key(u64);

/// The epoll user data of the wake socket.
const WAKE: u64 = u64::MAX;

/// Set in the epoll user data of a job's notify socket (its climb's `NOTIFY_SOCKET`), over
/// the job's [`Key`]: slot indexes stay far below 2³¹.
const NOTIFY_BIT: u64 = 1 << 31;

struct Slot {
    job: Job,
    generation: u32,
    /// Our duplicates of the job's wait fds, as registered with epoll. Duplicates, so that we
    /// alone decide when they close: deregistering by number can never hit an fd number that
    /// the process closed and the kernel then reused.
    registered: Vec<std::os::fd::OwnedFd>,
    /// The raw numbers of the process's own wait fds when we registered them.
    registered_from: Vec<i32>,
    /// Our duplicate of the climb's notify socket, registered under `key | NOTIFY_BIT` while
    /// the job has a climb listening to one ([`Climb::notify_fd`]): a datagram
    /// (`EXTEND_TIMEOUT_USEC=`) wakes the job, whose step reads it before sending a rung.
    notify_registered: Option<std::os::fd::OwnedFd>,
    /// The deadline this job has in the heap, if any.
    queued: Option<Instant>,
}

/// Every job the reaper owns, and the deadline heap.
#[derive(Default)]
struct Table {
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    next_generation: u32,
    /// Nearest rung deadline first; entries whose job moved on are skipped when popped.
    heap: std::collections::BinaryHeap<std::cmp::Reverse<(Instant, Key)>>,
    /// Jobs with nothing to poll (portable mechanism): stepped on every wake-up.
    portable: std::collections::BTreeSet<Key>,
}

impl Table {
    fn insert(&mut self, job: Job) -> Key {
        self.next_generation = self.next_generation.wrapping_add(1);
        let generation = self.next_generation;
        let slot = Slot {
            job,
            generation,
            registered: Vec::new(),
            registered_from: Vec::new(),
            notify_registered: None,
            queued: None,
        };
        let index = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        Key((u64::from(generation) << 32) | index as u64)
    }

    fn slot_mut(&mut self, key: Key) -> Option<&mut Slot> {
        let index = (key.0 & 0xffff_ffff) as usize;
        let generation = (key.0 >> 32) as u32;
        self.slots
            .get_mut(index)?
            .as_mut()
            .filter(|s| s.generation == generation)
    }

    /// Steps one job (see [`step`]); registers its current wait fds and queues its next
    /// deadline, or removes it once finished. Returns whether it finished.
    fn step(&mut self, key: Key, now: Instant, fired: bool, poller: &Poller, r: &Reaper) -> bool {
        let Some(slot) = self.slot_mut(key) else {
            return false; // finished earlier in this round (or a stale event)
        };
        if fired {
            slot.job.process.note_readable();
        }
        let stepped = step(&mut slot.job, now);
        if matches!(stepped, Ok(true)) {
            for fd in slot
                .registered
                .drain(..)
                .chain(slot.notify_registered.take())
            {
                poller.remove(&fd);
            }
            let index = (key.0 & 0xffff_ffff) as usize;
            self.slots[index] = None;
            self.free.push(index);
            self.portable.remove(&key);
            return true;
        }
        // Re-register when the fd set may have changed: an fd fired (the leader or a group
        // member exited) or the process now waits on other fds.
        let wait_fds = slot.job.process.wait_fds();
        let from: Vec<i32> = wait_fds
            .iter()
            .map(std::os::fd::AsRawFd::as_raw_fd)
            .collect();
        if fired || from != slot.registered_from {
            for fd in slot.registered.drain(..) {
                poller.remove(&fd);
            }
            for fd in &wait_fds {
                if let Ok(dup) = fd.try_clone_to_owned() {
                    if poller.add(&dup, key).is_ok() {
                        slot.registered.push(dup);
                    }
                }
            }
            slot.registered_from = from;
        }
        // The notify socket: registered while a climb listens to it, removed once the climb is
        // over (the socket closes with it).
        let notify = slot.job.climb.as_ref().and_then(Climb::notify_fd);
        match (notify, slot.notify_registered.as_ref()) {
            (Some(fd), None) => {
                if let Ok(dup) = fd.try_clone_to_owned() {
                    if poller.add(&dup, Key(key.0 | NOTIFY_BIT)).is_ok() {
                        slot.notify_registered = Some(dup);
                    }
                }
            }
            (None, Some(dup)) => {
                poller.remove(dup);
                slot.notify_registered = None;
            }
            _ => {}
        }
        let nothing_to_poll = slot.registered.is_empty();
        let mut next = slot.job.climb.as_ref().map(Climb::deadline);
        let mut sooner = |at: Instant| next = Some(next.map_or(at, |d| d.min(at)));
        let on_sigchld = slot.job.process.waits_on_sigchld();
        if on_sigchld && hook_sigchld(r) {
            // Hooked only now: a SIGCHLD since the step's check may have been missed.
            sooner(now);
        }
        if stepped.is_err() || (nothing_to_poll && !on_sigchld) {
            // The step failed (the job is kept: it is dropped only once reaped), or its pidfds
            // could not be registered (no fd left for a duplicate): look again soon.
            sooner(now + Duration::from_millis(100));
        }
        // Group members without a pidfd are looked at in /proc now and then.
        let far = crate::core::poll::later(now, MAX_WAIT);
        let recheck = slot.job.process.wake_by(far);
        if recheck < far {
            sooner(recheck);
        }
        let requeue = next.filter(|&d| slot.queued != Some(d));
        if requeue.is_some() || next.is_none() {
            slot.queued = next;
        }
        if nothing_to_poll {
            self.portable.insert(key);
        } else {
            self.portable.remove(&key);
        }
        if let Some(deadline) = requeue {
            self.heap.push(std::cmp::Reverse((deadline, key)));
        }
        false
    }

    /// Keys whose queued deadline has come, dropping stale heap entries on the way.
    fn pop_due(&mut self, now: Instant) -> Vec<Key> {
        let mut due = Vec::new();
        while let Some(&std::cmp::Reverse((deadline, key))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            if self
                .slot_mut(key)
                .is_some_and(|s| s.queued == Some(deadline))
            {
                due.push(key);
            }
        }
        due
    }

    /// The nearest deadline still current.
    fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&std::cmp::Reverse((deadline, key))) = self.heap.peek() {
            if self
                .slot_mut(key)
                .is_some_and(|s| s.queued == Some(deadline))
            {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// After a failed wait: make every job due now.
    fn requeue_all(&mut self, now: Instant) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if let Some(slot) = slot {
                let key = Key((u64::from(slot.generation) << 32) | index as u64);
                slot.queued = Some(now);
                self.heap.push(std::cmp::Reverse((now, key)));
            }
        }
    }
}

/// Advances one job; `Ok(true)` when it is finished: reaped (by us, or by somebody else's
/// `waitpid(-1)`). Never finished on an error — a job dropped unreaped would leave a zombie for
/// the life of the program: the caller keeps it and steps it again soon. A signal the kernel
/// refuses ends the climb (see `Climb::give_up`), not the watch.
fn step(job: &mut Job, now: Instant) -> io::Result<bool> {
    let done = advance(job, now)?;
    if done {
        if let Some(on_done) = job.on_done.take() {
            on_done(&job.process);
        }
    }
    Ok(done)
}

fn advance(job: &mut Job, now: Instant) -> io::Result<bool> {
    if job.process.is_gone()? {
        job.process.reap()?;
        return Ok(!job.process.holds_pid());
    }
    if let Some(climb) = &mut job.climb {
        climb.release_inline();
        if !climb.advance(&mut job.process, now)? {
            // Ladder used up (or a signal refused): keep waiting for the exit, without signals.
            job.climb = None;
        }
    }
    // Leader exited but group members outlived every rung: release the leader now.
    // A contained child's cgroup must be empty first (members in D state): then the
    // leader is reaped and the cgroup removed.
    if job.climb.is_none() && !job.process.is_running() && !job.process.waits_for_cgroup() {
        job.process.reap()?;
        return Ok(!job.process.holds_pid());
    }
    Ok(false)
}

/// What the reaper thread blocks in: epoll over the wake socket and every job's wait fds
/// (Linux), or `poll` on the wake socket alone (elsewhere, where every job is on the portable
/// mechanism and woken by `SIGCHLD`).
struct Poller {
    wake_rx: UnixStream,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    epoll: std::os::fd::OwnedFd,
}

/// The longest single wait: a bound, not a poll interval (every change wakes us before).
const MAX_WAIT: Duration = Duration::from_secs(3600);

impl Poller {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn new(wake_rx: UnixStream) -> io::Result<Poller> {
        use rustix::event::epoll;
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &epoll,
            &wake_rx,
            epoll::EventData::new_u64(WAKE),
            epoll::EventFlags::IN,
        )?;
        Ok(Poller { wake_rx, epoll })
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn new(wake_rx: UnixStream) -> io::Result<Poller> {
        Ok(Poller { wake_rx })
    }

    fn drain_wake(&mut self) {
        let mut buf = [0u8; 256];
        while matches!(self.wake_rx.read(&mut buf), Ok(n) if n > 0) {}
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn add(&self, fd: &std::os::fd::OwnedFd, key: Key) -> io::Result<()> {
        use rustix::event::epoll;
        let data = epoll::EventData::new_u64(key.0);
        Ok(epoll::add(&self.epoll, fd, data, epoll::EventFlags::IN)?)
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn add(&self, _fd: &std::os::fd::OwnedFd, _key: Key) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn remove(&self, fd: &std::os::fd::OwnedFd) {
        let _ = rustix::event::epoll::delete(&self.epoll, fd);
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn remove(&self, _fd: &std::os::fd::OwnedFd) {}

    /// Blocks until an fd is readable or `deadline` passes; `events` gets the keys that fired.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn wait(&self, deadline: Option<Instant>, events: &mut Vec<u64>) -> io::Result<()> {
        use rustix::event::epoll;
        events.clear();
        let timeout = timeout_until(deadline);
        let mut buf: Vec<epoll::Event> = Vec::with_capacity(256);
        match epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut buf),
            Some(&timeout),
        ) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        events.extend(buf.iter().map(|e| e.data.u64()));
        Ok(())
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn wait(&self, deadline: Option<Instant>, events: &mut Vec<u64>) -> io::Result<()> {
        use rustix::event::{poll, PollFd, PollFlags};
        events.clear();
        let timeout = timeout_until(deadline);
        let mut fds = [PollFd::new(&self.wake_rx, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(n) if n > 0 => events.push(WAKE),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
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

/// The last line of defence against a zombie: a process dropped before it was reaped (an error
/// path that returned early) is handed, without rungs, to the background reaper, which reaps
/// it when it exits. Never blocks: if no reaper thread can be started, the child is parked and
/// handed over at the next hand-off or [`drain`].
///
/// It lives here, not in `process/`: the policy is the reaper's, and `process/` sits below the
/// close (issue 21 item 5); [`Process::take_orphan`] is the mechanism.
impl Drop for Process {
    fn drop(&mut self) {
        if let Some(process) = self.take_orphan() {
            let _parked_if_err = hand_off(Job {
                process,
                climb: None,
                on_done: None,
            });
        }
    }
}
