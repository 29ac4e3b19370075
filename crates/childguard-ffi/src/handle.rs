//! `cg_handle`: a spawned child and the socket connected to it; spawn, kill, close, detach.

use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use childguard::{ChildHandle, CloseControl, Signal};

use crate::builder::cg_builder;
use crate::error::{cg_status, guard, guard_status, Failure};
use crate::ptr;
use crate::report::{cg_report, Owned};

/// A spawned child, owned together with our end of its socket.
///
/// Opaque. Ownership: the caller's, from `cg_spawn()` until exactly one of `cg_close()`,
/// `cg_handle_free()` or a successful `cg_detach()`, each of which consumes it.
/// Thread-safety: one thread at a time per handle (a handle may move between threads);
/// `cg_pid()` and `cg_socket_fd()` only read it and may run concurrently with each other.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct cg_handle {
    /// `None` only inside a `cg_detach` that is handing it over.
    inner: Option<ChildHandle>,
}

impl cg_handle {
    pub(crate) fn get(&mut self) -> Result<&mut ChildHandle, Failure> {
        self.inner
            .as_mut()
            .ok_or_else(|| Failure::invalid("handle was already given up"))
    }

    /// The handle, to read only (`None` inside a `cg_detach`).
    pub(crate) fn peek(&self) -> Option<&ChildHandle> {
        self.inner.as_ref()
    }
}

/// Spawns the child the builder describes, and returns once it runs (and, with a readiness
/// condition, once it is ready). Consumes `builder` in every case: do not use or free it
/// afterwards.
///
/// On failure returns NULL, with `cg_last_error_code()` saying which step failed
/// (`CG_ERR_SPAWN`: the program is missing or not executable; `CG_ERR_READY`, …) and
/// `cg_last_error_message()` naming the program and the reason. Nothing is left behind: no
/// fd, no child, no zombie.
///
/// Ownership: the returned handle is the caller's (see `cg_handle`). Thread-safety: safe from
/// any thread; the child is forked by childguard's own threads where the kernel ties state to
/// the forking thread (`exit_with_parent`).
#[no_mangle]
pub extern "C" fn cg_spawn(builder: *mut cg_builder) -> *mut cg_handle {
    guard(
        "cg_spawn",
        |_| std::ptr::null_mut(),
        || {
            let b = *ptr::take(builder, "builder")?;
            let handle = b.into_builder().spawn()?;
            Ok(ptr::give(cg_handle {
                inner: Some(handle),
            }))
        },
    )
}

impl cg_builder {
    /// The library's builder for what this one describes (each of a supervisor's starts makes
    /// one from a copy).
    pub(crate) fn into_builder(self) -> childguard::Builder {
        let b = self;
        let mut cmd = Command::new(&b.argv[0]);
        cmd.args(&b.argv[1..]);
        if b.env_clear {
            cmd.env_clear();
        }
        for (key, value) in &b.env {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        if let Some(dir) = &b.cwd {
            cmd.current_dir(dir);
        }
        // The Command is built here from the caller's argv: no pre_exec hook.
        let mut spawn = ChildHandle::builder(cmd)
            .own_spawn(true)
            .socket(b.socket)
            .process_group(b.process_group)
            .skip_ignored_rungs(b.skip_ignored)
            .contain(b.containment)
            .kill_mode(b.kill_mode)
            .limits(b.limits)
            .exit_with_parent(b.exit_with_parent);
        if let Some(dir) = b.cgroup_parent {
            spawn = spawn.cgroup_parent(dir);
        }
        if let Some(signal) = b.death_signal {
            spawn = spawn.parent_death_signal(signal);
        }
        if let Some(ladder) = b.ladder {
            spawn = spawn.ladder(ladder);
        }
        if let Some(ready) = b.ready {
            spawn = spawn.ready(ready);
        }
        if let Some(timeout) = b.ready_timeout {
            spawn = spawn.ready_timeout(timeout);
        }
        if let Some(interval) = b.watchdog {
            spawn = spawn.watchdog(interval);
        }
        if let Some(interrupt) = b.interrupt {
            spawn = spawn.interrupt(interrupt);
        }
        if let Some(mut capture) = b.capture {
            if let Some((bytes, lines)) = b.tail {
                capture = capture.tail_bytes(bytes).tail_lines(lines);
            }
            spawn = spawn.capture(capture);
        }
        spawn
    }
}

/// Our end of the child's socket, or -1 if the handle has none (`CG_SOCKET_NONE`, or NULL).
///
/// Ownership: the fd belongs to the handle: read and write it, but do not close it; it stays
/// valid until `cg_close()` / `cg_handle_free()` (which shut it down and close it) or
/// `cg_detach()` (which gives it to you).
#[no_mangle]
pub extern "C" fn cg_socket_fd(handle: *const cg_handle) -> i32 {
    guard(
        "cg_socket_fd",
        |_| -1,
        || {
            let h = ptr::borrow(handle, "handle")?;
            Ok(h.inner
                .as_ref()
                .and_then(ChildHandle::socket)
                .map_or(-1, |s| s.as_raw_fd()))
        },
    )
}

/// The child's pid, or -1 (NULL, or no child). The pid stays the child's until it is reaped —
/// by the close, or by a `cg_try_wait()` / `cg_wait_timeout()` that returned its status
/// (unless it leads a process group): signal it with `cg_kill()`, which uses the pidfd and
/// cannot hit a recycled pid.
#[no_mangle]
pub extern "C" fn cg_pid(handle: *const cg_handle) -> i32 {
    guard(
        "cg_pid",
        |_| -1,
        || {
            let h = ptr::borrow(handle, "handle")?;
            Ok(h.inner
                .as_ref()
                .and_then(ChildHandle::id)
                .and_then(|pid| i32::try_from(pid).ok())
                .unwrap_or(-1))
        },
    )
}

/// Sends `signal` once (to the group with `cg_builder_process_group`; `SIGCONT` after it if it
/// is catchable, so a stopped child acts on it), then waits up to `grace_ms` for the exit.
/// `*exited` (if not NULL) is set to whether the child has exited. After the exit nothing is
/// sent. A later close counts this as a rung already taken: it resumes after the first rung
/// that sends the same signal.
///
/// Blocks up to `grace_ms`. Thread-safety: one thread at a time per handle.
#[no_mangle]
pub extern "C" fn cg_kill(
    handle: *mut cg_handle,
    signal: i32,
    grace_ms: u64,
    exited: *mut bool,
) -> cg_status {
    guard_status("cg_kill", || {
        let h = ptr::borrow_mut(handle, "handle")?.get()?;
        let signal = Signal::from_raw(signal)
            .ok_or_else(|| Failure::invalid(format!("signal {signal} is not a signal number")))?;
        let status = h.kill(signal, Duration::from_millis(grace_ms))?;
        ptr::put(exited, status.is_some());
        Ok(())
    })
}

/// `CG_OK` with the exit status written to `*status` (if not NULL), or `CG_RUNNING`.
pub(crate) fn exit_word(exited: Option<ExitStatus>, status: *mut i32) -> cg_status {
    match exited {
        Some(exit) => {
            // The wait(2) status word (Linux, FreeBSD and macOS share its layout: code << 8,
            // or the signal and the core flag in the low byte), as childguard built it from
            // waitid's siginfo.
            ptr::put(status, exit.into_raw());
            cg_status::CG_OK
        }
        None => cg_status::CG_RUNNING,
    }
}

/// Whether the child has exited, without blocking and without closing anything.
///
/// Returns `CG_OK` once the child has exited, with `*status` (if not NULL) set to its wait(2)
/// status word: test it with `WIFEXITED` / `WEXITSTATUS` / `WIFSIGNALED` / `WTERMSIG` from
/// `<sys/wait.h>`. Returns `CG_RUNNING` while it runs (`*status` untouched; not a failure: the
/// last error is not changed). Any other status is a failure, with `*status` untouched:
/// `CG_ERR_NULL_ARGUMENT` (`handle` NULL), `CG_ERR_INHERITED` (called in a `fork()`ed copy of
/// the process that spawned the child: only that one may wait for it), `CG_ERR_WAIT`.
///
/// Like `waitpid(WNOHANG)`, the call that sees the exit reaps the child — except a process
/// group leader (`cg_builder_process_group`), which stays a zombie until the close so its group
/// id cannot be reused while the close may still signal the group. Later calls return the same
/// status again. The handle stays the caller's and must still be closed (`cg_close()` then
/// reports `CG_ENDING_BEFORE_CLOSE`, shuts the socket down and, with containment, still ends
/// the child's cgroup). A pointer passed to `cg_close()`, `cg_handle_free()` or a successful
/// `cg_detach()` is freed: do not pass it here.
///
/// Thread-safety: one thread at a time per handle.
#[no_mangle]
pub extern "C" fn cg_try_wait(handle: *mut cg_handle, status: *mut i32) -> cg_status {
    guard(
        "cg_try_wait",
        |failed| failed,
        || {
            let h = ptr::borrow_mut(handle, "handle")?.get()?;
            Ok(exit_word(h.try_wait()?, status))
        },
    )
}

/// Waits up to `timeout_ms` milliseconds for the child to exit, woken the moment it does (by
/// its pidfd, or `SIGCHLD` where there is none), without closing anything.
///
/// Returns as `cg_try_wait()` does: `CG_OK` with the wait(2) status word in `*status` (if not
/// NULL) once the child has exited — at once if it already had; `CG_RUNNING` if the timeout
/// passed first (not a failure: the last error is not changed); any other status is a failure
/// (`CG_ERR_NULL_ARGUMENT`, `CG_ERR_INHERITED`, `CG_ERR_WAIT`). A `timeout_ms` of 0 is
/// `cg_try_wait()`; a huge one is capped at about a hundred years. Nothing is sent to the
/// child: to make it exit, use `cg_kill()` or `cg_close()`. Reaps as `cg_try_wait()` does.
///
/// Blocks up to `timeout_ms`. Thread-safety: one thread at a time per handle.
#[no_mangle]
pub extern "C" fn cg_wait_timeout(
    handle: *mut cg_handle,
    timeout_ms: u64,
    status: *mut i32,
) -> cg_status {
    guard(
        "cg_wait_timeout",
        |failed| failed,
        || {
            let h = ptr::borrow_mut(handle, "handle")?.get()?;
            let exited = h.wait_timeout(Duration::from_millis(timeout_ms))?;
            Ok(exit_word(exited, status))
        },
    )
}

/// Closes the child: `shutdown(SHUT_RDWR)` on the socket, close it, climb the ladder (each
/// rung's signal, `SIGCONT`, a wait up to its grace woken the moment the child exits), reap.
/// Blocks at most the ladder's total grace plus a few milliseconds; a child that outlives the
/// last rung goes to childguard's background reaper thread (the report says so).
///
/// Consumes `handle` in every case. `*report` (if not NULL) receives the close report — also
/// on failure when the close got far enough to have one (else NULL); free it with
/// `cg_report_free()`. On failure the child is still reaped, or watched by the background
/// reaper which reaps it.
///
/// Thread-safety: one thread at a time per handle.
#[no_mangle]
pub extern "C" fn cg_close(handle: *mut cg_handle, report: *mut *mut cg_report) -> cg_status {
    ptr::put(report, std::ptr::null_mut());
    guard_status("cg_close", || {
        close_with(handle, CloseControl::new(), report)
    })
}

/// The body of `cg_close` and `cg_close_cancel`: takes `handle`, closes it with `control`,
/// writes the report (if asked for, also on failure when there is one).
pub(crate) fn close_with(
    handle: *mut cg_handle,
    control: CloseControl<'_>,
    report: *mut *mut cg_report,
) -> Result<(), Failure> {
    let mut h = ptr::take(handle, "handle")?;
    let inner = h
        .inner
        .take()
        .ok_or_else(|| Failure::invalid("handle was already given up"))?;
    // The C report is built only for a caller that asked for it: one given to a NULL
    // `report` would be leaked.
    let wanted = !report.is_null();
    match inner.close_with(control) {
        Ok(done) => {
            if wanted {
                ptr::put(report, Owned::give(done));
            }
            Ok(())
        }
        Err(e) => {
            if let Some(done) = e.close_report().filter(|_| wanted) {
                ptr::put(report, Owned::give(done.clone()));
            }
            Err(e.into())
        }
    }
}

/// Frees a handle as `cg_close()` does, without a report. NULL is a no-op.
///
/// Blocks like `cg_close()`. Thread-safety: one thread at a time per handle.
#[no_mangle]
pub extern "C" fn cg_handle_free(handle: *mut cg_handle) {
    guard(
        "cg_handle_free",
        |_| (),
        || {
            if !handle.is_null() {
                // Dropping the ChildHandle runs the close path (shutdown, close, ladder, reap).
                drop(ptr::take(handle, "handle")?);
            }
            Ok(())
        },
    )
}

/// Gives the child up without closing it: nothing is sent, the child keeps running, and
/// childguard's background reaper reaps it whenever it exits (no zombie).
///
/// On success the handle is freed and `*socket_fd` (if not NULL) receives our end of the
/// socket (-1 if none), which is now the caller's to close. On failure (the background reaper
/// cannot be started) nothing is given up: the handle is unchanged and still the caller's.
#[no_mangle]
pub extern "C" fn cg_detach(handle: *mut cg_handle, socket_fd: *mut i32) -> cg_status {
    guard_status("cg_detach", || {
        let h = ptr::borrow_mut(handle, "handle")?;
        let inner = h
            .inner
            .take()
            .ok_or_else(|| Failure::invalid("handle was already given up"))?;
        match inner.detach() {
            Ok(socket) => {
                drop(ptr::take(handle, "handle")?);
                ptr::put(socket_fd, socket.map_or(-1, IntoRawFd::into_raw_fd));
                Ok(())
            }
            Err(e) => {
                let failure = Failure::new(cg_status::of(e.error().kind()), e.to_string());
                h.inner = Some(e.into_handle());
                Err(failure)
            }
        }
    })
}

/// Frees a report from `cg_close()`. NULL is a no-op.
#[no_mangle]
pub extern "C" fn cg_report_free(report: *mut cg_report) {
    guard(
        "cg_report_free",
        |_| (),
        || {
            if !report.is_null() {
                drop(ptr::take_report(report, "report")?);
            }
            Ok(())
        },
    )
}
