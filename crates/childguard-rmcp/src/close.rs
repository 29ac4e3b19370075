//! Where the transport's close runs: a thread of its own, which no tokio runtime owns, so that
//! the ladder — the EOF grace, then the rungs — is climbed to its end and the report published
//! even when the runtime that dropped or closed the transport shuts down meanwhile.
//!
//! Why not a task running `close_async`: a runtime shutting down (the end of `#[tokio::main]`,
//! `Runtime` dropped) drops its tasks. The close's future, dropped mid-way, hands the child to
//! childguard's background reaper — which climbs on, but the report is lost; a task spawned
//! during the shutdown never runs at all. A thread is not dropped by anyone: it ends when the
//! close does, or with the process.

use std::sync::{Arc, Mutex, PoisonError};

use childguard::ChildHandle;
use tokio::sync::oneshot;

use crate::closed::Publisher;

/// What the close thread takes: the handle, where its outcome goes, whom to tell after.
type Work = (ChildHandle, Publisher, oneshot::Sender<()>);

/// Starts closing `handle`: the blocking [`close`](ChildHandle::close) (EOF, the ladder, the
/// reap) on a thread named `cg-rmcp-close`, its outcome published to `done`. The receiver
/// completes once it is published (or, if the thread died first, with an error).
///
/// If no thread can be started (`EAGAIN`: `pids.max`, `RLIMIT_NPROC`): inside a tokio
/// runtime `close_async` runs as a task (a runtime shutting down drops it, and the handle's
/// own cancel-safety hands the child to childguard's background reaper, report lost);
/// outside one, the blocking close runs here.
pub(crate) fn start(handle: ChildHandle, done: Publisher) -> oneshot::Receiver<()> {
    let (tx, rx) = oneshot::channel();
    let slot: Arc<Mutex<Option<Work>>> = Arc::new(Mutex::new(Some((handle, done, tx))));
    let theirs = Arc::clone(&slot);
    let spawned = std::thread::Builder::new()
        .name("cg-rmcp-close".into())
        .spawn(move || {
            if let Some(work) = take(&theirs) {
                run(work);
            }
        });
    if spawned.is_err() {
        // The closure was dropped unrun: the work is still in the slot.
        if let Some((handle, done, tx)) = take(&slot) {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(async move {
                    done.publish(handle.close_async().await);
                    let _ = tx.send(());
                })),
                Err(_) => run((handle, done, tx)),
            }
        }
    }
    rx
}

fn take(slot: &Mutex<Option<Work>>) -> Option<Work> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

fn run((handle, done, tx): Work) {
    done.publish(handle.close());
    let _ = tx.send(());
}
