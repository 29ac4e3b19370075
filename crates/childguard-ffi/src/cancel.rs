//! `cg_cancel`: a flag that interrupts childguard's waits — a spawn's readiness wait, a
//! `cg_wait_timeout_cancel`, a `cg_close_cancel` — set from any thread or from a signal
//! handler (`cg_cancel_set` is one atomic store: async-signal-safe).
//!
//! The library's one wait primitive looks at the flag at least every 20 ms and whenever a
//! signal interrupts its `poll` (`EINTR`, when the signal lands on the waiting thread): a
//! SIGINT handler that sets the flag ends the wait at once. What a cancel leaves, by call:
//! a spawn returns NULL with `CG_ERR_INTERRUPTED` and its server is closed by its ladder in
//! the background (nothing is left); a close returns `CG_ERR_INTERRUPTED` and the rest of its
//! ladder and the reap go to the background reaper; a wait returns `CG_ERR_INTERRUPTED` and
//! the child keeps running. The flag stays set until `cg_cancel_reset`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use childguard::{CloseControl, Interrupt};

use crate::builder::cg_builder;
use crate::error::{cg_status, guard, guard_status};
use crate::handle::{cg_handle, close_with, exit_word};
use crate::ptr;
use crate::report::cg_report;

/// A cancel flag, made by `cg_cancel_new()`.
///
/// Opaque. Ownership: the caller's until `cg_cancel_free()`; a builder given it keeps its own
/// reference, so it may be freed before the spawn. Thread-safety: `cg_cancel_set()` and
/// `cg_cancel_reset()` may run from any thread, concurrently with the waits that read it, and
/// `cg_cancel_set()` from a signal handler.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct cg_cancel {
    flag: Arc<AtomicBool>,
}

impl cg_cancel {
    pub(crate) fn interrupt(&self) -> Interrupt {
        let flag = Arc::clone(&self.flag);
        Interrupt::new(move || {
            if flag.load(Ordering::SeqCst) {
                Err(std::io::Error::new(
                    std::io::ErrorKind::Interrupted,
                    "cancelled (cg_cancel_set)",
                ))
            } else {
                Ok(())
            }
        })
    }
}

/// A new cancel flag, not set. Never NULL.
#[no_mangle]
pub extern "C" fn cg_cancel_new() -> *mut cg_cancel {
    ptr::give(cg_cancel {
        flag: Arc::new(AtomicBool::new(false)),
    })
}

/// Sets the flag: every wait reading it ends within 20 ms (at once when a signal interrupts
/// it). Async-signal-safe (one atomic store; no allocation, no lock): call it from a `SIGINT`
/// handler. NULL is a no-op.
#[no_mangle]
pub extern "C" fn cg_cancel_set(cancel: *const cg_cancel) {
    if let Some(cancel) = ptr::borrow_or_none(cancel) {
        cancel.flag.store(true, Ordering::SeqCst);
    }
}

/// Clears the flag, for the next waits. Async-signal-safe. NULL is a no-op.
#[no_mangle]
pub extern "C" fn cg_cancel_reset(cancel: *const cg_cancel) {
    if let Some(cancel) = ptr::borrow_or_none(cancel) {
        cancel.flag.store(false, Ordering::SeqCst);
    }
}

/// Frees the caller's reference (builders given it keep theirs). NULL is a no-op.
#[no_mangle]
pub extern "C" fn cg_cancel_free(cancel: *mut cg_cancel) {
    guard(
        "cg_cancel_free",
        |_| (),
        || {
            if !cancel.is_null() {
                drop(ptr::take(cancel, "cancel")?);
            }
            Ok(())
        },
    )
}

/// The spawn's waits (readiness, socket activation's connect) read `cancel`: once it is set,
/// `cg_spawn` returns NULL with `CG_ERR_INTERRUPTED`, and the server is closed by its ladder
/// in the background (shut down, the first rung sent at once, the rest and the reap by the
/// background reaper): nothing is left. The builder keeps its own reference to `cancel`.
#[no_mangle]
pub extern "C" fn cg_builder_cancel(
    builder: *mut cg_builder,
    cancel: *const cg_cancel,
) -> cg_status {
    guard_status("cg_builder_cancel", || {
        let b = ptr::borrow_mut(builder, "builder")?;
        let cancel = ptr::borrow(cancel, "cancel")?;
        b.interrupt = Some(cancel.interrupt());
        Ok(())
    })
}

/// `cg_wait_timeout()`, ended early by `cancel`: `CG_ERR_INTERRUPTED` then (the child keeps
/// running; the handle is as before). `cancel` NULL: `cg_wait_timeout()`.
///
/// Blocks up to `timeout_ms`. Thread-safety: one thread at a time per handle.
#[no_mangle]
pub extern "C" fn cg_wait_timeout_cancel(
    handle: *mut cg_handle,
    timeout_ms: u64,
    cancel: *const cg_cancel,
    status: *mut i32,
) -> cg_status {
    guard(
        "cg_wait_timeout_cancel",
        |failed| failed,
        || {
            let h = ptr::borrow_mut(handle, "handle")?.get()?;
            let timeout = Duration::from_millis(timeout_ms);
            let exited = match ptr::borrow_or_none(cancel) {
                Some(cancel) => h.wait_timeout_interruptible(timeout, &cancel.interrupt())?,
                None => h.wait_timeout(timeout)?,
            };
            Ok(exit_word(exited, status))
        },
    )
}

/// `cg_close()`, its waits ended by `cancel`: `CG_ERR_INTERRUPTED` then, with the report so
/// far in `*report` (if not NULL; it says the child was handed to the reaper); the rest of
/// the ladder, on its schedule, and the reap go to the background reaper. Consumes `handle`
/// in every case. `cancel` NULL: `cg_close()`.
///
/// Thread-safety: one thread at a time per handle.
#[no_mangle]
pub extern "C" fn cg_close_cancel(
    handle: *mut cg_handle,
    cancel: *const cg_cancel,
    report: *mut *mut cg_report,
) -> cg_status {
    ptr::put(report, std::ptr::null_mut());
    guard_status("cg_close_cancel", || {
        let control = match ptr::borrow_or_none(cancel) {
            Some(cancel) => CloseControl::new().interrupt(cancel.interrupt()),
            None => CloseControl::new(),
        };
        close_with(handle, control, report)
    })
}

/// With `cg_builder_ready_notify`: reloads the server as systemd's `Type=notify-reload` does —
/// sends `signal` (to its `MAINPID=` process if it named one), then waits up to `timeout_ms`
/// for `RELOADING=1` followed by `READY=1`. `CG_OK` with the time taken in `*took_ms` (if not
/// NULL); `CG_ERR_READY` on a timeout, an exit during the reload or a watchdog miss (the
/// message says which); `CG_ERR_CONFIG` without notify readiness; `CG_ERR_INTERRUPTED` when
/// `cancel` (may be NULL) is set — the server is left reloading.
///
/// Blocks up to `timeout_ms`. Thread-safety: one thread at a time per handle.
#[no_mangle]
pub extern "C" fn cg_reload(
    handle: *mut cg_handle,
    signal: i32,
    timeout_ms: u64,
    cancel: *const cg_cancel,
    took_ms: *mut u64,
) -> cg_status {
    crate::error::guard_status("cg_reload", || {
        let h = ptr::borrow_mut(handle, "handle")?.get()?;
        let signal = childguard::Signal::from_raw(signal).ok_or_else(|| {
            crate::error::Failure::invalid(format!("signal {signal} is not a signal number"))
        })?;
        let timeout = Duration::from_millis(timeout_ms);
        let took = match ptr::borrow_or_none(cancel) {
            Some(cancel) => h.reload_interruptible(signal, timeout, &cancel.interrupt())?,
            None => h.reload(signal, timeout)?,
        };
        ptr::put(took_ms, u64::try_from(took.as_millis()).unwrap_or(u64::MAX));
        Ok(())
    })
}

/// With `cg_builder_watchdog`: whether a watchdog deadline was missed (or `WATCHDOG=trigger`
/// came); `*at_ms` (if not NULL) is then when, in milliseconds since the spawn. Never blocks.
/// After a miss the server is being closed with its ladder in the background (where the child
/// has a pidfd); `cg_close` reaps it and its report names the miss.
#[no_mangle]
pub extern "C" fn cg_watchdog_missed(handle: *const cg_handle, at_ms: *mut u64) -> bool {
    guard(
        "cg_watchdog_missed",
        |_| false,
        || {
            let h = ptr::borrow(handle, "handle")?;
            let miss = h.peek().and_then(childguard::ChildHandle::watchdog_missed);
            if let Some(miss) = miss {
                ptr::put(
                    at_ms,
                    u64::try_from(miss.at.as_millis()).unwrap_or(u64::MAX),
                );
            }
            Ok(miss.is_some())
        },
    )
}
