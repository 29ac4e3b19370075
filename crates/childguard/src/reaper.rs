//! The shared background reaper: one thread for the whole program that finishes what a close
//! could not wait for — children that outlived the last rung, handles closed with
//! [`Reap::Background`](crate::Reap::Background) — and reaps them, so no zombie is left behind.
//!
//! It waits with one `poll` over every job's pidfds plus a wake pipe, bounded by the nearest
//! rung deadline: no thread per child, no sleep-polling. The wake pipe gets a byte when a job
//! arrives and, for children on the portable mechanism, on every `SIGCHLD` (signal-hook writes
//! it from the handler).

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::climb::Climb;
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

static REAPER: OnceLock<Reaper> = OnceLock::new();
static START: Mutex<()> = Mutex::new(());

/// The reaper, started on first use. Starting can fail (no fd or thread left): the caller
/// then keeps its job.
fn reaper() -> io::Result<&'static Reaper> {
    if let Some(r) = REAPER.get() {
        return Ok(r);
    }
    let _one_at_a_time = START.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(r) = REAPER.get() {
        return Ok(r);
    }
    let (wake_tx, wake_rx) = UnixStream::pair()?;
    wake_tx.set_nonblocking(true)?;
    wake_rx.set_nonblocking(true)?;
    let r = REAPER.get_or_init(|| Reaper {
        inbox: Mutex::new(Vec::new()),
        wake_tx,
        in_flight: AtomicUsize::new(0),
        idle: (Mutex::new(()), Condvar::new()),
        sigchld_hooked: OnceLock::new(),
    });
    std::thread::Builder::new()
        .name("childguard-reaper".into())
        .spawn(move || run(r, wake_rx))?;
    Ok(r)
}

/// Hands a job to the reaper thread; gives it back if the reaper cannot be started.
pub(crate) fn hand_off(job: Job) -> Result<(), Box<(Job, io::Error)>> {
    let r = match reaper() {
        Ok(r) => r,
        Err(e) => return Err(Box::new((job, e))),
    };
    if !job.process.uses_pidfd() {
        r.sigchld_hooked.get_or_init(|| {
            if let Ok(tx) = r.wake_tx.try_clone() {
                // The handler writes one byte per SIGCHLD; a full pipe just drops it, which is
                // fine: one pending byte is enough to wake us.
                let _ = signal_hook::low_level::pipe::register(libc::SIGCHLD, tx);
            }
        });
    }
    r.in_flight.fetch_add(1, Ordering::SeqCst);
    r.inbox.lock().unwrap_or_else(|p| p.into_inner()).push(job);
    let _ = (&r.wake_tx).write(&[1]);
    Ok(())
}

/// How many children the reaper still owns (being signalled or waited for).
pub fn in_flight() -> usize {
    REAPER
        .get()
        .map_or(0, |r| r.in_flight.load(Ordering::SeqCst))
}

/// Waits until the reaper owns no child, or `deadline` passes. Returns whether it is idle.
///
/// Call it before a program exits when children may still be on their way down: a process that
/// exits leaves its unreaped children to init, and their remaining rungs are never sent.
pub fn drain(deadline: Instant) -> bool {
    let Some(r) = REAPER.get() else { return true };
    let (lock, cond) = &r.idle;
    let mut guard = lock.lock().unwrap_or_else(|p| p.into_inner());
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

fn run(r: &'static Reaper, mut wake_rx: UnixStream) {
    let mut jobs: Vec<Job> = Vec::new();
    loop {
        let mut buf = [0u8; 256];
        while matches!(wake_rx.read(&mut buf), Ok(n) if n > 0) {}
        jobs.append(&mut r.inbox.lock().unwrap_or_else(|p| p.into_inner()));
        let before = jobs.len();
        let now = Instant::now();
        jobs.retain_mut(|job| !step(job, now));
        let finished = before - jobs.len();
        if finished > 0 {
            r.in_flight.fetch_sub(finished, Ordering::SeqCst);
            let _guard = r.idle.0.lock().unwrap_or_else(|p| p.into_inner());
            r.idle.1.notify_all();
        }
        let deadline = jobs
            .iter()
            .filter_map(|j| j.climb.as_ref().map(Climb::deadline))
            .min();
        let _ = wait(&jobs, &wake_rx, deadline);
    }
}

/// Advances one job; returns `true` when it is finished (reaped or abandoned after an error).
fn step(job: &mut Job, now: Instant) -> bool {
    let result = (|| -> io::Result<bool> {
        if job.process.is_gone()? {
            job.process.reap()?;
            return Ok(true);
        }
        if let Some(climb) = &mut job.climb {
            if !climb.advance(&mut job.process, now)? {
                // Ladder used up: keep waiting for the exit, without further signals.
                job.climb = None;
            }
        }
        // Leader exited but group members outlived every rung: release the leader now.
        if job.climb.is_none() && !job.process.is_running() {
            job.process.reap()?;
            return Ok(true);
        }
        Ok(false)
    })();
    let done = result.unwrap_or(true);
    if done {
        if let Some(on_done) = job.on_done.take() {
            on_done(&job.process);
        }
    }
    done
}

#[cfg(target_os = "linux")]
fn wait(jobs: &[Job], wake_rx: &UnixStream, deadline: Option<Instant>) -> io::Result<()> {
    let mut fds = vec![wake_rx.as_fd()];
    for job in jobs {
        fds.extend(job.process.wait_fds());
    }
    let deadline = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
    crate::process::pidfd::poll_until(&fds, deadline)
}

#[cfg(not(target_os = "linux"))]
fn wait(_jobs: &[Job], wake_rx: &UnixStream, deadline: Option<Instant>) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(wake_rx, PollFlags::IN)];
    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
    let timeout = left.and_then(|l| Timespec::try_from(l).ok());
    match poll(&mut fds, timeout.as_ref()) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
