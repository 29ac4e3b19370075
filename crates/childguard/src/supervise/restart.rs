//! The restart job, on the event core: the running generation's exit is an io source of the
//! loop (a duplicate of its pidfd), the delay before the next start is the loop's timer, and
//! the start itself — which may block in its readiness wait — runs on a short-lived worker
//! thread that ends once the new generation is up. No thread waits for a server that runs.
//!
//! Races avoided, each named where it is handled:
//! - *Close vs. the exit handler*: the close sets `closing` and takes the handle under the
//!   lock; a handler that runs after sees `closing` (or another generation) and does nothing.
//! - *Close vs. the timer*: the close posts the timer's cancel; a timer that fired first runs
//!   its handler, which sees `closing` under the lock before it starts a worker, so either the
//!   close finds the worker's handle (and joins it) or no worker is started.
//! - *Close vs. a start*: the close sets the start's interrupt flag (its readiness wait breaks
//!   off, the half-started server closed by the reaper, which the close then drains), and a
//!   start that returns after the close closes what it spawned.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::state::{GenerationExit, Phase, Shared, State};
use crate::core::event_loop::{self, Ops};
use crate::error::{Error, ErrorKind};
use crate::Interrupt;

/// Watches generation `generation`'s exit. Called with the lock not held.
pub(crate) fn watch(shared: &Arc<Shared>, generation: u64) {
    let watch = {
        let mut state = shared.lock();
        if state.closing || state.generation != generation {
            return;
        }
        match state.current.as_mut().map(|h| h.watch_exit()) {
            Some(Ok(watch)) => watch,
            // The handle cannot be looked at: count it as an exit, status lost.
            _ => {
                drop(state);
                return post_exit(shared, generation);
            }
        }
    };
    if watch.exited().is_some() {
        return post_exit(shared, generation);
    }
    #[cfg(target_os = "linux")]
    if let (Some(fd), Ok(l)) = (watch.into_fd(), event_loop::get()) {
        let shared = Arc::clone(shared);
        l.post(move |ops| {
            let handler_shared = Arc::clone(&shared);
            let handler = Box::new(move |ops: &mut Ops, id| {
                ops.remove_io(id);
                on_exit(&handler_shared, generation, ops);
            });
            if ops.add_io(fd, handler).is_err() {
                // epoll refused the fd (max_user_watches): wait on a thread of its own.
                wait_on_thread(&shared, generation);
            }
        });
        return;
    }
    // No pidfd (another Unix, the portable mechanism), or no loop: a thread waits.
    #[cfg_attr(target_os = "linux", allow(unreachable_code))]
    wait_on_thread(shared, generation);
}

/// The fallback of [`watch`]: a thread that waits for the exit, then hands it to the loop.
fn wait_on_thread(shared: &Arc<Shared>, generation: u64) {
    let shared = Arc::clone(shared);
    let _ = std::thread::Builder::new()
        .name("childguard-sup".into())
        .spawn(move || loop {
            let watch = match shared.lock().current.as_mut().map(|h| h.watch_exit()) {
                Some(Ok(w)) => w,
                _ => return post_exit(&shared, generation),
            };
            if watch.exited().is_some() {
                return post_exit(&shared, generation);
            }
            let _ = watch.wait_until(Instant::now() + std::time::Duration::from_secs(1));
            if shared.lock().closing {
                return;
            }
        });
}

/// Runs [`on_exit`] on the loop thread.
fn post_exit(shared: &Arc<Shared>, generation: u64) {
    let shared = Arc::clone(shared);
    match event_loop::get() {
        Ok(l) => l.post(move |ops| on_exit(&shared, generation, ops)),
        Err(_) => {
            let mut state = shared.lock();
            state.end(Phase::Ended, None);
            shared.changed.notify_all();
        }
    }
}

/// On the loop thread: generation `generation` exited. Decides, never blocks.
fn on_exit(shared: &Arc<Shared>, generation: u64, ops: &mut Ops) {
    let mut state = shared.lock();
    // Race: the close (or a newer generation) came first.
    if state.closing || state.generation != generation || state.phase != Phase::Running {
        return;
    }
    let Some(mut handle) = state.current.take() else {
        return;
    };
    let status = handle.try_wait().ok().flatten();
    // Its last output before its exit, which this round may have handed us first.
    handle.read_output_now_on_loop(ops);
    let now = Instant::now();
    let exit = GenerationExit {
        generation,
        status,
        oom_kill: handle.limits_report().is_some_and(|l| l.result.is_some()),
        start_error: None,
        output_tail: handle.output_tail(),
        at: SystemTime::now(),
    };
    state.record(exit);
    let started_at = state.started_at;
    state.starts.ended(&shared.restart, started_at, now);
    state.ended = Some(handle);
    decide(shared, &mut state, ops);
}

/// After an exit or a failed start: end, give up, or start again after the delay.
fn decide(shared: &Arc<Shared>, state: &mut State, ops: &mut Ops) {
    let now = Instant::now();
    let last_status = state.exits.last().and_then(|e| e.status);
    let failed_start = state.exits.last().is_some_and(|e| e.start_error.is_some());
    if !failed_start && !shared.restart.wants_restart(last_status) {
        state.end(Phase::Ended, None);
    } else if state.starts.over_limit(&shared.restart, now) {
        let why = state.crash_loop_message(&shared.restart);
        state.end(Phase::GaveUp, Some(why));
    } else {
        let delay = state.starts.delay(&shared.restart);
        state.phase = Phase::Waiting;
        if delay.is_zero() {
            start_worker(shared, state);
        } else {
            let timer_shared = Arc::clone(shared);
            state.timer = Some(ops.add_timer(now + delay, move |_| {
                let mut state = timer_shared.lock();
                state.timer = None;
                // Race: a close after the timer fired and before this lock.
                if !state.closing {
                    start_worker(&timer_shared, &mut state);
                }
            }));
        }
    }
    shared.changed.notify_all();
}

/// Starts the worker that closes the ended generation and starts the next. Under the lock.
fn start_worker(shared: &Arc<Shared>, state: &mut State) {
    let worker_shared = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("childguard-start".into())
        .spawn(move || start_next(&worker_shared));
    match spawned {
        Ok(worker) => {
            // The previous start's worker is done with the supervisor (it set `Running` and
            // posted its watch before this exit could be seen): let it go, never joined under
            // the lock — a join here would block the loop thread on a thread that might want
            // the lock. The close joins only the latest worker, the one that may still start.
            state.worker = Some(worker);
        }
        Err(e) => {
            state.end(
                Phase::GaveUp,
                Some(format!("gave up: no thread for the next start: {e}")),
            );
        }
    }
}

/// On the worker: the ended generation closed, then the next start.
fn start_next(shared: &Arc<Shared>) {
    let ended = {
        let mut state = shared.lock();
        if state.closing {
            return;
        }
        state.phase = Phase::Starting;
        state.ended.take()
    };
    if let Some(ended) = ended {
        // Its reap, what is left of its group or cgroup, the cgroup's removal.
        let report = match ended.close() {
            Ok(report) => Some(report),
            Err(e) => e.close_report().cloned(),
        };
        if let Some(report) = report {
            shared.lock().keep_report(report);
        }
    }
    let builder = {
        let mut make = shared.make.lock().unwrap_or_else(|p| p.into_inner());
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut *make))
    };
    let generation = shared.lock().generation + 1;
    let Ok(builder) = builder else {
        let mut state = shared.lock();
        let why = "gave up: the closure that makes each start's builder panicked";
        state.end(Phase::GaveUp, Some(why.into()));
        shared.changed.notify_all();
        return;
    };
    let began = Instant::now();
    let spawned = builder
        .interrupt(Interrupt::flag(Arc::clone(&shared.stop_start)))
        .spawn();
    let mut state = shared.lock();
    state.starts.started(began);
    match spawned {
        Ok(handle) if state.closing => {
            // Race: the close came during the start; it waits for this worker.
            drop(state);
            if let Ok(report) = handle.close() {
                shared.lock().keep_report(report);
            }
        }
        Ok(handle) => {
            state.current = Some(handle);
            state.generation = generation;
            state.restarts += 1;
            state.started_at = Instant::now();
            state.phase = Phase::Running;
            let callbacks = state.on_change.clone();
            shared.changed.notify_all();
            drop(state);
            for callback in callbacks {
                callback(generation);
            }
            watch(shared, generation);
        }
        Err(_) if state.closing => {}
        Err(e) => failed_start(shared, state, generation, began, &e),
    }
}

/// A start that failed counts as an exit that did not hold; the loop decides what next.
fn failed_start(
    shared: &Arc<Shared>,
    mut state: std::sync::MutexGuard<'_, State>,
    generation: u64,
    began: Instant,
    e: &Error,
) {
    state.record(GenerationExit {
        generation,
        status: None,
        oom_kill: false,
        start_error: Some(e.to_string()),
        output_tail: e.output_tail().map(str::to_owned),
        at: SystemTime::now(),
    });
    state.starts.ended(&shared.restart, began, began);
    drop(state);
    let shared = Arc::clone(shared);
    match event_loop::get() {
        Ok(l) => l.post(move |ops| {
            let mut state = shared.lock();
            if !state.closing {
                decide(&shared, &mut state, ops);
            }
        }),
        Err(e) => {
            let mut state = shared.lock();
            state.end(
                Phase::GaveUp,
                Some(format!("gave up: no event loop for the next start: {e}")),
            );
            shared.changed.notify_all();
        }
    }
}

/// The close's part: stops what is under way and says what the caller must wait for.
pub(crate) fn stop(shared: &Shared) -> Stopped {
    let mut state = shared.lock();
    state.closing = true;
    shared.stop_start.store(true, Ordering::SeqCst);
    shared.changed.notify_all();
    if let (Some(timer), Ok(l)) = (state.timer.take(), event_loop::get()) {
        // Race: a timer that fired already sees `closing` before it starts a worker.
        l.post(move |ops| ops.cancel_timer(timer));
    }
    Stopped {
        current: state.current.take(),
        ended: state.ended.take(),
        worker: state.worker.take(),
        was_starting: state.phase == Phase::Starting,
    }
}

/// What the close takes over from the supervision.
pub(crate) struct Stopped {
    pub(crate) current: Option<crate::ChildHandle>,
    pub(crate) ended: Option<crate::ChildHandle>,
    pub(crate) worker: Option<std::thread::JoinHandle<()>>,
    pub(crate) was_starting: bool,
}

/// The error of a supervisor that gave up.
pub(crate) fn crash_loop(program: Option<&str>, message: &str) -> Error {
    Error::new(
        ErrorKind::CrashLoop,
        program,
        std::io::Error::other(message.to_string()),
    )
}
