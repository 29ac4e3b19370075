//! Which reap a `ChildHandle` dropped inside tokio gets (see `Reap` and `ChildHandle`'s docs):
//! an explicit `Reap::Blocking` is kept on a multi-thread runtime — a plain blocking close on a
//! `spawn_blocking` thread, `block_in_place` on a worker, which keeps the executor running —
//! while a reap left at its default becomes `Background` in any tokio context.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Reap, SocketMode};
use childguard_tests::*;

/// slowserver ignoring HUP and EOF: only a later rung (or a signal from the test) ends it. Its
/// ignored HUP is sent and its grace spent (`skip_ignored_rungs(false)` in `spawn`): that grace
/// is what a drop must not block the executor for.
const STUBBORN: &[&str] = &["--ignore", "HUP", "--ignore-eof"];

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

fn spawn(ladder: &str, reap: Option<Reap>) -> (ChildHandle, u32) {
    let mut builder = ChildHandle::builder(slowserver(STUBBORN))
        .socket(SocketMode::Stdio)
        .ladder(ladder.parse().unwrap())
        .skip_ignored_rungs(false);
    if let Some(reap) = reap {
        builder = builder.reap(reap);
    }
    let handle = builder.spawn().expect("spawning slowserver");
    let pid = read_ready(&handle).pid;
    (handle, pid)
}

fn assert_reaped_eventually(pid: u32, what: &str) {
    assert!(
        eventually(Duration::from_secs(20), || !our_children().contains(&pid)),
        "{what}: child {pid} not reaped (state {:?})",
        proc_state(pid)
    );
}

#[test]
fn explicit_blocking_drop_in_spawn_blocking_climbs_the_ladder_and_reaps() {
    // HUP is ignored: only the KILL rung, 3 s in, ends the child. A blocking drop returns after
    // it, with the child reaped; a background one would return at once with the child alive.
    let (handle, pid) = spawn("HUP:3s,KILL:5s", Some(Reap::Blocking));
    let rt = runtime(2);
    let (took, reaped) = rt
        .block_on(rt.spawn_blocking(move || {
            let started = Instant::now();
            drop(handle);
            (started.elapsed(), !our_children().contains(&pid))
        }))
        .unwrap();
    assert!(
        reaped,
        "drop in spawn_blocking with Reap::Blocking returned after {took:?} with child {pid} \
         unreaped (state {:?}): the blocking reap was replaced by Background",
        proc_state(pid)
    );
    assert!(took >= Duration::from_secs(3), "KILL came early: {took:?}");
}

#[test]
fn explicit_blocking_drop_on_a_worker_blocks_without_stalling_the_executor() {
    // One worker thread. The dropping task blocks until the child exits; the child ignores HUP
    // and its KILL rung is 20 s away, so what ends it is a SIGTERM sent by another task on the
    // same runtime — which can run only if the drop does not hold the worker.
    let (handle, pid) = spawn("HUP:20s,KILL:1s", Some(Reap::Blocking));
    let pidfd = pidfd(pid);
    let rt = runtime(1);
    let dropping = Arc::new(AtomicBool::new(false));
    let terminator = rt.spawn({
        let dropping = Arc::clone(&dropping);
        async move {
            while !dropping.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            // Taken before the signal goes: the child's exit, and so the drop's return, can only
            // come after it.
            let sent_at = Instant::now();
            // Through a pidfd taken before the drop: never reaches a recycled pid.
            let _ = rustix::process::pidfd_send_signal(&pidfd, rustix::process::Signal::TERM);
            sent_at
        }
    });
    let (dropped_at, reaped) = rt
        .block_on(rt.spawn(async move {
            dropping.store(true, Ordering::SeqCst);
            drop(handle);
            (Instant::now(), !our_children().contains(&pid))
        }))
        .unwrap();
    let term_sent_at = rt.block_on(terminator).unwrap();
    assert!(
        reaped,
        "drop on a worker with Reap::Blocking returned with child {pid} unreaped (state {:?})",
        proc_state(pid)
    );
    assert!(
        term_sent_at <= dropped_at,
        "the other task ran only after the drop returned: the drop stalled the executor"
    );
}

#[test]
fn default_reap_drop_in_spawn_blocking_is_background() {
    // HUP's grace leaves seconds between the drop and the is_alive check, on a slow machine.
    let (handle, pid) = spawn("HUP:5s,KILL:5s", None);
    let rt = runtime(2);
    let alive_after_drop = rt
        .block_on(rt.spawn_blocking(move || {
            drop(handle);
            is_alive(pid)
        }))
        .unwrap();
    assert!(
        alive_after_drop,
        "a drop with the default reap blocked in spawn_blocking until the child was gone"
    );
    assert_reaped_eventually(pid, "default reap dropped in spawn_blocking");
}
