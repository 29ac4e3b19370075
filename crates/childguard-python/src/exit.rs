//! The atexit drain: servers still open when the interpreter exits are closed, bounded.
//!
//! Race avoided, *a close killed by the exit*: a process that exits ends every thread in it,
//! mid-ladder — the background reaper's, a spawn's, any closing thread's — and leaves the
//! child to init with its remaining rungs never sent (a `TERM`-ignoring server runs on). So
//! `childguard` registers an `atexit` handler (`_server.py`) that calls [`drain_at_exit`]:
//! every `Server` still open is closed in the background (shut down, first due rung sent),
//! spawns still waiting for readiness (their caller interrupted) are waited for, and then the
//! background reaper is drained — which also covers the closes interrupted by Ctrl-C and the
//! `Server`s collected without a close. The bound: the longest ladder (total grace) among the
//! servers this process spawned, plus [`MARGIN`]; a spawn still waiting for readiness adds
//! what is left of its `ready_timeout`, connect timeout and ladder.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, TryLockError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::handle::Handle;

/// After the longest ladder's last grace: time for the reaper to reap and remove cgroups.
pub const MARGIN: Duration = Duration::from_secs(2);

/// Spawns running on a thread of their own ([`crate::interrupt::spawn_ready`]).
struct Spawns {
    /// The process they run in: after `fork()` the count is the parent's, whose threads the
    /// child does not have.
    pid: u32,
    count: usize,
    /// The latest any of them can end.
    until: Option<Instant>,
}

static SPAWNS: Mutex<Spawns> = Mutex::new(Spawns {
    pid: 0,
    count: 0,
    until: None,
});
static SPAWN_ENDED: Condvar = Condvar::new();

/// The longest total grace of the ladders of this process's servers, in milliseconds (an
/// atomic, not a lock: nothing a thread of the parent held at a `fork()` can block the exit).
static LONGEST_LADDER_MS: AtomicU64 = AtomicU64::new(0);

/// Notes a spawned server's ladder (its total grace) for the drain's bound.
pub fn note_ladder(total_grace: Duration) {
    let ms = u64::try_from(total_grace.as_millis()).unwrap_or(u64::MAX);
    LONGEST_LADDER_MS.fetch_max(ms, Ordering::Relaxed);
}

fn spawns() -> std::sync::MutexGuard<'static, Spawns> {
    let mut spawns = SPAWNS.lock().unwrap_or_else(|p| p.into_inner());
    let me = std::process::id();
    if spawns.pid != me {
        *spawns = Spawns {
            pid: me,
            count: 0,
            until: None,
        };
    }
    spawns
}

/// A spawn in flight on its thread, counted until dropped.
pub struct SpawnInFlight(());

impl SpawnInFlight {
    /// Counts a spawn that ends within `bound` from now.
    pub fn begin(bound: Duration) -> SpawnInFlight {
        let mut spawns = spawns();
        spawns.count += 1;
        let end = Instant::now().checked_add(bound);
        spawns.until = spawns.until.max(end);
        SpawnInFlight(())
    }
}

impl Drop for SpawnInFlight {
    fn drop(&mut self) {
        let mut spawns = spawns();
        spawns.count = spawns.count.saturating_sub(1);
        if spawns.count == 0 {
            spawns.until = None;
        }
        SPAWN_ENDED.notify_all();
    }
}

/// Waits for the spawns in flight, up to the latest bound any of them has.
fn wait_for_spawns() {
    // After a fork the lock may be held by a thread of the parent, which this process does
    // not have: never wait on it here (the exit must go on).
    let mut spawns = match SPAWNS.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    if spawns.pid != std::process::id() {
        return;
    }
    while spawns.count > 0 {
        let Some(left) = spawns
            .until
            .map(|u| u.saturating_duration_since(Instant::now()))
            .filter(|l| !l.is_zero())
        else {
            return;
        };
        spawns = SPAWN_ENDED
            .wait_timeout(spawns, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// `childguard._native.drain_at_exit(handles)`: closes the still-open `handles` in the
/// background, waits for spawns in flight, then drains the background reaper; returns whether
/// everything ended within the bound (see the module's doc). Handles inherited through
/// `fork()` are left alone: their servers are the parent's.
#[pyfunction]
pub fn drain_at_exit(py: Python<'_>, handles: Vec<PyRef<'_, Handle>>) -> bool {
    for handle in &handles {
        handle.close_at_exit(py);
    }
    drop(handles);
    py.allow_threads(|| {
        wait_for_spawns();
        let longest = Duration::from_millis(LONGEST_LADDER_MS.load(Ordering::Relaxed));
        let deadline = Instant::now()
            .checked_add(longest.saturating_add(MARGIN))
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 24 * 3600));
        childguard::reaper::drain(deadline)
    })
}
