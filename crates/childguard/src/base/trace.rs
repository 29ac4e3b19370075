//! The `tracing` feature's calls (see the crate docs, "Tracing", for what a user sees).
//!
//! Without the feature every function here is an empty `#[inline]` one: no code, no
//! dependency. The calls sit where each step happens, once for every driver (blocking close,
//! reaper, tokio, CLI), so a step cannot be logged by one face and missed by another.

#[cfg(target_os = "linux")]
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use crate::base::signal::Signal;

/// An entered span; leaves it on drop. Zero-sized without the feature.
#[must_use = "the span is left when the guard drops"]
pub(crate) struct SpanGuard {
    #[cfg(feature = "tracing")]
    _span: tracing::span::EnteredSpan,
}

/// Enters the `spawn` span.
#[inline]
pub(crate) fn spawn_span(_program: &str) -> SpanGuard {
    SpanGuard {
        #[cfg(feature = "tracing")]
        _span: tracing::info_span!(target: "childguard", "spawn", program = _program).entered(),
    }
}

/// Enters the `close` span.
#[inline]
pub(crate) fn close_span(_program: Option<&str>, _pid: Option<u32>) -> SpanGuard {
    SpanGuard {
        #[cfg(feature = "tracing")]
        _span: tracing::info_span!(target: "childguard", "close", program = _program, pid = _pid)
            .entered(),
    }
}

/// A `close` span for a future (not entered: [`instrument`] enters it at each poll).
#[cfg(feature = "tokio")]
#[inline]
pub(crate) fn close_span_for_future(_program: Option<&str>, _pid: Option<u32>) -> FutureSpan {
    FutureSpan {
        #[cfg(feature = "tracing")]
        span: tracing::info_span!(target: "childguard", "close", program = _program, pid = _pid),
    }
}

/// A span to enter at each poll of one future. Zero-sized without the feature.
#[cfg(feature = "tokio")]
pub(crate) struct FutureSpan {
    #[cfg(feature = "tracing")]
    span: tracing::Span,
}

/// `future`, inside `span` whenever it is polled (an entered span must not be held across an
/// `.await`: the task may resume on another thread).
#[cfg(feature = "tokio")]
#[inline]
pub(crate) fn instrument<F: std::future::Future>(
    _span: FutureSpan,
    future: F,
) -> impl std::future::Future<Output = F::Output> {
    #[cfg(feature = "tracing")]
    return tracing::Instrument::instrument(future, _span.span);
    #[cfg(not(feature = "tracing"))]
    future
}

/// The child exists (its pid is ours to supervise).
#[inline]
pub(crate) fn spawned(_pid: u32) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "childguard", pid = _pid, "spawned");
}

/// The child's tree is held by `_backend` (`cgroup`, `pid-namespace`, `subreaper`; `None`: a
/// process group only), the better backends passed over and why.
#[inline]
pub(crate) fn contained(_pid: u32, _backend: Option<&str>, _passed_over: &[String]) {
    #[cfg(feature = "tracing")]
    tracing::info!(
        target: "childguard",
        pid = _pid,
        backend = _backend.unwrap_or("process-group"),
        passed_over = %_passed_over.join("; "),
        "contained"
    );
}

/// A readiness wait ended: `Ok` ready, `Err` why not. `_awaited` describes the condition; it is
/// called only with the feature, so a spawn without it builds no description.
#[inline]
pub(crate) fn readiness(
    _pid: Option<u32>,
    _awaited: impl FnOnce() -> String,
    _elapsed: Duration,
    _outcome: Result<(), &str>,
) {
    #[cfg(feature = "tracing")]
    {
        let elapsed_ms = _elapsed.as_secs_f64() * 1e3;
        let awaited = _awaited();
        let _awaited = awaited.as_str();
        match _outcome {
            Ok(()) => tracing::info!(target: "childguard", pid = _pid, awaited = _awaited,
                elapsed_ms, "ready"),
            Err(error) => tracing::warn!(target: "childguard", pid = _pid, awaited = _awaited,
                elapsed_ms, error, "not ready"),
        }
    }
}

/// A rung's signal went out.
#[inline]
pub(crate) fn rung(_pid: u32, _index: usize, _signal: Signal, _reached: Option<usize>) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "childguard", pid = _pid, rung = _index, signal = %_signal,
        reached = _reached, "rung");
}

/// A rung was skipped: the child ignores its signal (`Ladder::skip_ignored`).
#[inline]
pub(crate) fn rung_skipped(_pid: u32, _index: usize, _signal: Signal) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "childguard", pid = _pid, rung = _index, signal = %_signal,
        reason = "ignored by the server", "rung skipped");
}

/// The child was seen exited (`None`: reaped by someone else, status unknown).
#[inline]
pub(crate) fn exited(_pid: u32, _status: Option<ExitStatus>) {
    #[cfg(feature = "tracing")]
    match _status {
        Some(status) => tracing::info!(target: "childguard", pid = _pid, %status, "exited"),
        None => tracing::info!(target: "childguard", pid = _pid, status = "lost", "exited"),
    }
}

/// The child's pid was freed by our `waitid`.
#[inline]
pub(crate) fn reaped(_pid: u32) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "childguard", pid = _pid, "reaped");
}

/// The child went to the background reaper.
#[inline]
pub(crate) fn handed_off(_pid: u32, _jobs: usize) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "childguard", pid = _pid, jobs = _jobs, "handed off");
}

/// Every member of a cgroup got `SIGKILL` (containment is Linux-only).
#[cfg(target_os = "linux")]
#[inline]
pub(crate) fn cgroup_killed(_path: &Path, _members: usize, _how: &str) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "childguard", path = %_path.display(), members = _members,
        how = _how, "cgroup killed");
}

/// This process's guardian started (pid), handed `_cgroups` registered cgroups.
#[cfg(target_os = "linux")]
#[inline]
pub(crate) fn guardian_started(_pid: u32, _cgroups: usize) {
    #[cfg(feature = "tracing")]
    tracing::info!(target: "childguard", guardian = _pid, cgroups = _cgroups, "guardian started");
}

/// This process's guardian is gone: the `_cgroups` registered ones are unguarded until the
/// next contained `exit_with_parent` spawn starts another.
#[cfg(target_os = "linux")]
#[inline]
pub(crate) fn guardian_lost(_pid: u32, _cgroups: usize, _why: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "childguard", guardian = _pid, cgroups = _cgroups, why = _why, "guardian lost");
}

/// `XDG_RUNTIME_DIR` was not used for a private socket directory (`/tmp` instead), and why:
/// a directory another user can change is never trusted (`base/trusted_dir.rs`).
#[inline]
pub(crate) fn runtime_dir_passed_over(_dir: &std::path::Path, _why: &std::io::Error) {
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "childguard", dir = %_dir.display(), why = %_why,
        "XDG_RUNTIME_DIR passed over for /tmp");
}
