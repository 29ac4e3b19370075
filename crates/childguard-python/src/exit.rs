//! The atexit drain: servers still open when the interpreter exits are closed, bounded.
//!
//! Race avoided, *a close killed by the exit*: a process that exits ends every thread in it,
//! mid-ladder — the background reaper's, a spawn's, any closing thread's — and leaves the
//! child to init with its remaining rungs never sent (a `TERM`-ignoring server runs on). So
//! `childguard` registers an `atexit` handler (`_server.py`) that calls [`drain_at_exit`]:
//! every `Server` still open is closed in the background (shut down, first due rung sent),
//! and then the background reaper is drained — which also covers the spawns and closes
//! interrupted by Ctrl-C (the library hands their servers to the reaper) and the `Server`s
//! collected without a close. The bound: the longest ladder (total grace) among the servers
//! this process spawned or tried to, plus [`MARGIN`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::handle::Handle;

/// After the longest ladder's last grace: time for the reaper to reap and remove cgroups.
pub const MARGIN: Duration = Duration::from_secs(2);

/// The longest total grace of the ladders of this process's servers, in milliseconds (an
/// atomic, not a lock: nothing a thread of the parent held at a `fork()` can block the exit).
static LONGEST_LADDER_MS: AtomicU64 = AtomicU64::new(0);

/// Notes a spawned server's ladder (its total grace) for the drain's bound.
pub fn note_ladder(total_grace: Duration) {
    let ms = u64::try_from(total_grace.as_millis()).unwrap_or(u64::MAX);
    LONGEST_LADDER_MS.fetch_max(ms, Ordering::Relaxed);
}

/// `childguard._native.drain_at_exit(handles)`: closes the still-open `handles` in the
/// background, then drains the background reaper; returns whether
/// everything ended within the bound (see the module's doc). Handles inherited through
/// `fork()` are left alone: their servers are the parent's.
#[pyfunction]
pub fn drain_at_exit(py: Python<'_>, handles: Vec<PyRef<'_, Handle>>) -> bool {
    for handle in &handles {
        handle.close_at_exit(py);
    }
    drop(handles);
    py.allow_threads(|| {
        let longest = Duration::from_millis(LONGEST_LADDER_MS.load(Ordering::Relaxed));
        let deadline = Instant::now()
            .checked_add(longest.saturating_add(MARGIN))
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 24 * 3600));
        childguard::reaper::drain(deadline)
    })
}
