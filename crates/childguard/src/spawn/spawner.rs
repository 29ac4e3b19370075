//! The spawner thread: forks children that must die with us (`exit_with_parent`).
//!
//! Race avoided (PDEATHSIG thread): Linux delivers `PR_SET_PDEATHSIG` when the *thread* that
//! forked the child exits, not when the process does. A child spawned from a short-lived thread
//! (a worker, a `spawn_blocking` task) would be killed as soon as that thread returns. So such
//! children are forked by one long-lived internal thread that lives as long as the process.
//!
//! Race avoided (`fork()` without `exec`): in a child made by `fork()` the spawner thread does
//! not exist, and a request sent to it would wait forever for its reply. The spawner belongs
//! to the process that started it ([`crate::core::per_process`]); a forked child starts its own.

use std::io;
use std::sync::mpsc;

use crate::core::per_process::PerProcess;

/// A spawn to make on the spawner thread; it sends its own reply.
type Request = Box<dyn FnOnce() + Send>;

/// The channel to this process's spawner thread.
static SPAWNER: PerProcess<mpsc::Sender<Request>> = PerProcess::new();

/// The spawner, started on first use; a failed start is tried again on the next use (see
/// [`PerProcess::get_or_start`]).
fn spawner() -> io::Result<&'static mpsc::Sender<Request>> {
    SPAWNER.get_or_start("childguard-spawner", || Ok(mpsc::channel()), serve)
}

/// The spawner thread: makes each spawn it is sent, for as long as the process lives.
fn serve(_: &'static mpsc::Sender<Request>, requests: mpsc::Receiver<Request>) {
    for spawn in requests {
        spawn();
    }
}

/// Runs `spawn` (std's `Command::spawn` or our own) on the long-lived spawner thread and
/// returns its result. `spawn` drops what holds the child's ends of its fds (the Command)
/// before it returns, so that our spawn never returns while this process still holds them.
pub(crate) fn run<T: Send + 'static>(spawn: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
    let gone = || io::Error::other("childguard spawner thread is gone");
    let (reply_tx, reply_rx) = mpsc::channel();
    let request: Request = Box::new(move || {
        let _ = reply_tx.send(spawn());
    });
    spawner()?.send(request).map_err(|_| gone())?;
    reply_rx.recv().map_err(|_| gone())
}
