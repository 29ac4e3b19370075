//! Notes of what the sweeps did (stale cgroups removed or left), kept for the next contained
//! child's close report ([`CloseReport::notes`](crate::CloseReport::notes)).

use std::sync::Mutex;

/// What sweeps did, for the next contained child's close report.
static PENDING: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Takes the notes of sweeps not yet reported.
pub(crate) fn take_pending() -> Vec<String> {
    std::mem::take(&mut *PENDING.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Gives notes back (a cgroup dropped before its close reported them), or adds a sweep's.
pub(crate) fn put_back(notes: Vec<String>) {
    if !notes.is_empty() {
        PENDING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(notes);
    }
}
