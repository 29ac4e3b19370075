//! `cg_supervisor`: a server started again when it exits, as a restart policy says (the
//! library's `Supervisor`): each start from a copy of one builder, the delays on the event
//! loop's timers, a crash-loop limit, and a close that wins over a delay or a start.

use std::os::fd::{AsRawFd, IntoRawFd};
use std::time::Duration;

use childguard::{Restart, RestartPolicy, Supervisor};

use crate::builder::cg_builder;
use crate::error::{guard, guard_status, Failure};
use crate::ptr;
use crate::report::{cg_report, Owned};

/// Restart never: an exit ends the supervision.
pub const CG_RESTART_NEVER: i32 = 0;
/// Restart after a non-zero exit or a signal.
pub const CG_RESTART_ON_FAILURE: i32 = 1;
/// Restart after any exit.
pub const CG_RESTART_ALWAYS: i32 = 2;

/// A supervised server, made by `cg_supervisor_start()`.
///
/// Opaque. Ownership: the caller's until `cg_supervisor_close()`, which consumes it.
/// Thread-safety: its calls may run from any thread, concurrently (`cg_supervisor_close()`
/// excepted: no other call on it may run then or after).
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct cg_supervisor {
    inner: Supervisor,
}

/// Starts the server `builder` describes (readiness included, in this thread) and supervises
/// it: when it exits it is started again from a copy of `builder` if `policy`
/// (`CG_RESTART_*`) says so, after `delay_first_ms`, doubled after each start that did not
/// hold for 1 s, up to `delay_max_ms`; a start that would be the `burst + 1`-th within
/// `interval_ms` gives up instead (`cg_supervisor_wait_start` then fails with
/// `CG_ERR_CRASH_LOOP`). Consumes `builder` in every case.
///
/// Returns NULL on failure (the first start's, as `cg_spawn`; an unknown policy is
/// `CG_ERR_INVALID_ARGUMENT`). Thread-safety: safe from any thread.
#[no_mangle]
pub extern "C" fn cg_supervisor_start(
    builder: *mut cg_builder,
    policy: i32,
    delay_first_ms: u64,
    delay_max_ms: u64,
    burst: u32,
    interval_ms: u64,
) -> *mut cg_supervisor {
    guard(
        "cg_supervisor_start",
        |_| std::ptr::null_mut(),
        || {
            let b = *ptr::take(builder, "builder")?;
            let policy = match policy {
                CG_RESTART_NEVER => RestartPolicy::Never,
                CG_RESTART_ON_FAILURE => RestartPolicy::OnFailure,
                CG_RESTART_ALWAYS => RestartPolicy::Always,
                other => {
                    return Err(Failure::invalid(format!(
                        "policy {other} is not CG_RESTART_NEVER, _ON_FAILURE or _ALWAYS"
                    )))
                }
            };
            let restart = Restart::new(policy)
                .delay(
                    Duration::from_millis(delay_first_ms),
                    Duration::from_millis(delay_max_ms),
                )
                .limit(burst, Duration::from_millis(interval_ms));
            let inner = Supervisor::start(move || b.clone().into_builder(), restart)?;
            Ok(ptr::give(cg_supervisor { inner }))
        },
    )
}

/// The running generation: 1 for the first start, one more per restart (0: NULL).
#[no_mangle]
pub extern "C" fn cg_supervisor_generation(supervisor: *const cg_supervisor) -> u64 {
    guard(
        "cg_supervisor_generation",
        |_| 0,
        || Ok(ptr::borrow(supervisor, "supervisor")?.inner.generation()),
    )
}

/// Restarts so far (0: NULL).
#[no_mangle]
pub extern "C" fn cg_supervisor_restarts(supervisor: *const cg_supervisor) -> u64 {
    guard(
        "cg_supervisor_restarts",
        |_| 0,
        || Ok(ptr::borrow(supervisor, "supervisor")?.inner.restarts()),
    )
}

/// The running generation's pid, or -1 (none runs: a delay, a start, the end; or NULL).
#[no_mangle]
pub extern "C" fn cg_supervisor_pid(supervisor: *const cg_supervisor) -> i32 {
    guard(
        "cg_supervisor_pid",
        |_| -1,
        || {
            let s = ptr::borrow(supervisor, "supervisor")?;
            Ok(s.inner
                .with_current(|h| h.id())
                .flatten()
                .and_then(|p| i32::try_from(p).ok())
                .unwrap_or(-1))
        },
    )
}

/// A duplicate of the running generation's socket (`CG_SOCKET_STDIO`, close-on-exec), for the
/// caller to close; -1 when none runs or it has no socket (see `cg_last_error_message()`).
/// Each start has a socket of its own: take it again after a restart.
#[no_mangle]
pub extern "C" fn cg_supervisor_socket_dup(supervisor: *const cg_supervisor) -> i32 {
    guard(
        "cg_supervisor_socket_dup",
        |_| -1,
        || {
            let s = ptr::borrow(supervisor, "supervisor")?;
            let dup = s
                .inner
                .with_current(|h| h.socket().map(|sock| sock.try_clone()))
                .flatten()
                .ok_or_else(|| Failure::invalid("no generation with a socket runs now"))?;
            let dup = dup.map_err(|e| Failure::invalid(format!("dup of the socket: {e}")))?;
            debug_assert!(dup.as_raw_fd() >= 0);
            Ok(dup.into_raw_fd())
        },
    )
}

/// Waits until a generation newer than `after` runs, at most `timeout_ms`; writes it to
/// `*generation` (if not NULL). Fails with `CG_ERR_CRASH_LOOP` once the supervisor gave up
/// (the message names the last exits), `CG_ERR_WAIT` when the supervision ended without a
/// restart or the timeout passed.
#[no_mangle]
pub extern "C" fn cg_supervisor_wait_start(
    supervisor: *const cg_supervisor,
    after: u64,
    timeout_ms: u64,
    generation: *mut u64,
) -> crate::error::cg_status {
    guard_status("cg_supervisor_wait_start", || {
        let s = ptr::borrow(supervisor, "supervisor")?;
        let g = s
            .inner
            .wait_for_start(after, Duration::from_millis(timeout_ms))?;
        if !generation.is_null() {
            ptr::put(generation, g);
        }
        Ok(())
    })
}

/// Ends the supervision — no more restarts, a delay or a start broken off — and closes every
/// generation with its ladder; returns once nothing is left. Consumes `supervisor`. With
/// `last` not NULL: the close report of the generation that was running (NULL in `*last` if
/// none was), for `cg_report_free()`.
#[no_mangle]
pub extern "C" fn cg_supervisor_close(
    supervisor: *mut cg_supervisor,
    last: *mut *mut cg_report,
) -> crate::error::cg_status {
    if !last.is_null() {
        ptr::put(last, std::ptr::null_mut());
    }
    guard_status("cg_supervisor_close", || {
        let s = ptr::take(supervisor, "supervisor")?;
        let report = s.inner.close()?;
        if let (false, Some(done)) = (last.is_null(), report.last) {
            ptr::put(last, Owned::give(done));
        }
        Ok(())
    })
}
