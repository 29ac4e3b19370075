//! The background reaper: finishes what a close could not wait for — children that outlived
//! the last rung, handles closed with [`Reap::Background`](crate::Reap::Background) — and
//! reaps them, so no zombie is left behind.
//!
//! A client of the event loop (`core/event_loop.rs`), not a thread of its own: every
//! job's pidfds (and its climb's notify socket) are io sources of the loop's one epoll set,
//! each rung deadline a timer of its heap, so thousands of children in flight cost no thread
//! and no more per exit than one: a wake-up steps only the jobs it concerns (the fds that
//! fired, the deadlines that came). Children on the portable mechanism (the only kind off
//! Linux) have nothing to poll: they are stepped on every wake-up of the loop, which each
//! `SIGCHLD` causes once a job needs it (`Loop::hook_sigchld`).
//!
//! The job table lives on the loop thread (a thread-local of it): only the loop's handlers
//! touch it, and a child made by `fork()` starts a loop of its own with an empty table.

use std::cell::RefCell;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::close::climb::Climb;
use crate::core::event_loop::{self, IoId, Loop, Ops};
use crate::core::per_process::PerProcess;
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

/// What other threads see of the reaper: how many jobs it owns.
struct Counts {
    in_flight: AtomicUsize,
    idle: (Mutex<()>, Condvar),
}

/// This process's counts. Per process ([`crate::core::per_process`]): a child made by `fork()`
/// without `exec` inherits the parent's, whose jobs (the parent's children) are not its own;
/// its `drain` waits only for its own jobs.
static COUNTS: PerProcess<Counts> = PerProcess::new();

fn counts() -> &'static Counts {
    match COUNTS.get() {
        Some(c) => c,
        None => match COUNTS.publish(Counts {
            in_flight: AtomicUsize::new(0),
            idle: (Mutex::new(()), Condvar::new()),
        }) {
            Ok(c) | Err((_, c)) => c,
        },
    }
}

/// Jobs whose hand-off found no event loop and could not start one (no thread or fd left:
/// `pids.max`, `RLIMIT_NPROC`, `EMFILE`). Never dropped — that would leave a zombie — and never
/// waited for in place — that would unbound the close: handed to the loop by the next
/// hand-off or [`drain`] that can start it.
///
/// Per process, as [`COUNTS`] is: a child made by `fork()` must not take the parent's parked
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

/// Hands a job to the reaper (the event loop, started if need be), with any jobs parked
/// before.
///
/// `Err`: no loop thread could be started. The job is then parked — still owned, not
/// dropped, not waited for — and handed over by the next call (or [`drain`]) that can start
/// the loop; until then its child is left unreaped and its remaining rungs wait.
pub(crate) fn hand_off(job: Job) -> io::Result<()> {
    try_hand_off(job).map_err(|failed| {
        let (job, e) = *failed;
        lock(parked()).push(job);
        e
    })
}

/// [`hand_off`] that gives the job back if no loop thread can be started (for a caller that
/// can still do something else with it: `detach` hands the handle back).
pub(crate) fn try_hand_off(job: Job) -> Result<(), Box<(Job, io::Error)>> {
    let lp = match event_loop::get() {
        Ok(lp) => lp,
        Err(e) => return Err(Box::new((job, e))),
    };
    let mut jobs = std::mem::take(&mut *lock(parked()));
    jobs.push(job);
    crate::base::trace::handed_off(jobs[jobs.len() - 1].process.pid(), jobs.len());
    if jobs.iter().any(|j| !j.process.uses_pidfd()) {
        // Before the job is queued: a SIGCHLD from now on wakes the loop.
        let _ = lp.hook_sigchld();
    }
    counts().in_flight.fetch_add(jobs.len(), Ordering::SeqCst);
    lp.post(move |ops| {
        for job in jobs {
            let key = with_table(|t| t.insert(job));
            step_job(key, false, ops);
        }
    });
    Ok(())
}

/// Hands parked jobs to the reaper, if the loop can be started now. Returns whether none is
/// left parked.
fn unpark() -> bool {
    let Some(job) = lock(parked()).pop() else {
        return true;
    };
    hand_off(job).is_ok()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How many children the reaper still owns (being signalled or waited for), counting those
/// parked until a loop thread can be started.
pub fn in_flight() -> usize {
    let owned = COUNTS
        .get()
        .map_or(0, |c| c.in_flight.load(Ordering::SeqCst));
    owned + lock(parked()).len()
}

/// Waits until the reaper owns no child, or `deadline` passes. Returns whether it is idle.
///
/// Call it before a program exits when children may still be on their way down: a process that
/// exits leaves its unreaped children to init, and their remaining rungs are never sent.
///
/// Children parked because no loop thread could be started are handed over first; while it
/// still cannot be started, this tries again every 100 ms until `deadline`.
pub fn drain(deadline: Instant) -> bool {
    while !unpark() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
    let Some(c) = COUNTS.get() else { return true };
    let (idle, cond) = &c.idle;
    let mut guard = lock(idle);
    while c.in_flight.load(Ordering::SeqCst) > 0 {
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

thread_local! {
    /// The jobs, on the loop thread.
    static TABLE: RefCell<Table> = RefCell::default();
}

fn with_table<R>(f: impl FnOnce(&mut Table) -> R) -> R {
    TABLE.with(|t| f(&mut t.borrow_mut()))
}

/// On the loop thread: steps the job `key` (`fired`: one of its pidfds turned readable), and
/// counts it out once finished.
fn step_job(key: Key, fired: bool, ops: &mut Ops) {
    let finished = with_table(|t| t.step(key, Instant::now(), fired, ops));
    if finished {
        let c = counts();
        c.in_flight.fetch_sub(1, Ordering::SeqCst);
        let _guard = lock(&c.idle.0);
        c.idle.1.notify_all();
    }
}

/// On the loop thread, on every wake-up once a portable job exists: steps each of them.
fn step_portable(ops: &mut Ops) {
    let keys: Vec<Key> = with_table(|t| t.portable.iter().copied().collect());
    for key in keys {
        step_job(key, false, ops);
    }
}

/// Names a job in the [`Table`] (slot index and generation, so a stale event or deadline for a
/// finished job never reaches the job that reuses its slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key(u64);

struct Slot {
    job: Job,
    generation: u32,
    /// The loop's io sources for our duplicates of the job's wait fds. Duplicates, so that we
    /// alone decide when they close: deregistering can never hit an fd number that the
    /// process closed and the kernel then reused.
    registered: Vec<IoId>,
    /// The raw numbers of the process's own wait fds when we registered them.
    registered_from: Vec<i32>,
    /// The source of our duplicate of the climb's notify socket, while the job has a climb
    /// listening to one ([`Climb::notify_fd`]): a datagram (`EXTEND_TIMEOUT_USEC=`) wakes the
    /// job, whose step reads it before sending a rung.
    notify_registered: Option<IoId>,
    /// The deadline this job has in the loop's heap, if any, and its timer.
    queued: Option<(Instant, event_loop::TimerId)>,
}

/// Every job the reaper owns.
#[derive(Default)]
struct Table {
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    next_generation: u32,
    /// Jobs with nothing to poll (portable mechanism): stepped on every wake-up.
    portable: std::collections::BTreeSet<Key>,
    /// The portable jobs' wake-up handler is in place.
    on_wake_set: bool,
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

    /// Steps one job (see [`step`]); registers its current wait fds and sets its next
    /// deadline, or removes it once finished. Returns whether it finished.
    fn step(&mut self, key: Key, now: Instant, fired: bool, ops: &mut Ops) -> bool {
        let Some(slot) = self.slot_mut(key) else {
            return false; // finished earlier in this round (or a stale event)
        };
        if fired {
            slot.job.process.note_readable();
        }
        let stepped = step(&mut slot.job, now);
        if matches!(stepped, Ok(true)) {
            for id in slot
                .registered
                .drain(..)
                .chain(slot.notify_registered.take())
            {
                ops.remove_io(id);
            }
            if let Some((_, timer)) = slot.queued.take() {
                ops.cancel_timer(timer);
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
            for id in slot.registered.drain(..) {
                ops.remove_io(id);
            }
            for fd in &wait_fds {
                if let Ok(dup) = fd.try_clone_to_owned() {
                    let on_ready = Box::new(move |ops: &mut Ops, _| step_job(key, true, ops));
                    if let Ok(id) = ops.add_io(dup, on_ready) {
                        slot.registered.push(id);
                    }
                }
            }
            slot.registered_from = from;
        }
        drop(wait_fds);
        // The notify socket: registered while a climb listens to it, removed once the climb is
        // over (the socket closes with it).
        let notify = slot.job.climb.as_ref().and_then(Climb::notify_fd);
        match (notify, slot.notify_registered) {
            (Some(fd), None) => {
                if let Ok(dup) = fd.try_clone_to_owned() {
                    // A datagram says nothing about the child: not `fired`.
                    let on_ready = Box::new(move |ops: &mut Ops, _| step_job(key, false, ops));
                    if let Ok(id) = ops.add_io(dup, on_ready) {
                        slot.notify_registered = Some(id);
                    }
                }
            }
            (None, Some(id)) => {
                ops.remove_io(id);
                slot.notify_registered = None;
            }
            _ => {}
        }
        let nothing_to_poll = slot.registered.is_empty();
        let mut next = slot.job.climb.as_ref().map(Climb::deadline);
        let mut sooner = |at: Instant| next = Some(next.map_or(at, |d| d.min(at)));
        let on_sigchld = slot.job.process.waits_on_sigchld();
        if on_sigchld && event_loop::running().is_some_and(Loop::hook_sigchld) {
            // Hooked only now: a SIGCHLD since the step's check may have been missed.
            sooner(now);
        }
        if stepped.is_err() || (nothing_to_poll && !on_sigchld) {
            // The step failed (the job is kept: it is dropped only once reaped), or its pidfds
            // could not be registered (no fd left for a duplicate): look again soon.
            sooner(now + Duration::from_millis(100));
        }
        // Group members without a pidfd are looked at in /proc now and then.
        let far = crate::core::wait::later(now, MAX_WAIT);
        let recheck = slot.job.process.wake_by(far);
        if recheck < far {
            sooner(recheck);
        }
        if slot.queued.map(|(at, _)| at) != next {
            if let Some((_, timer)) = slot.queued.take() {
                ops.cancel_timer(timer);
            }
            if let Some(at) = next {
                let timer = ops.add_timer(at, move |ops| {
                    // This timer ran: it is no longer the job's.
                    with_table(|t| {
                        if let Some(slot) = t.slot_mut(key) {
                            slot.queued = None;
                        }
                    });
                    step_job(key, false, ops);
                });
                slot.queued = Some((at, timer));
            }
        }
        if nothing_to_poll {
            self.portable.insert(key);
            if !self.on_wake_set {
                self.on_wake_set = true;
                ops.on_wake(step_portable);
            }
        } else {
            self.portable.remove(&key);
        }
        false
    }
}

/// The longest single wait: a bound, not a poll interval (every change wakes us before).
const MAX_WAIT: Duration = Duration::from_secs(3600);

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
