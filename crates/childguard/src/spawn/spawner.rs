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
use std::process::{Child, Command};
use std::sync::mpsc;

use crate::core::per_process::PerProcess;

type Request = (Command, mpsc::Sender<io::Result<Child>>);

/// The channel to this process's spawner thread.
static SPAWNER: PerProcess<mpsc::Sender<Request>> = PerProcess::new();

/// The spawner, started on first use; a failed start is tried again on the next use (see
/// [`PerProcess::get_or_start`]).
fn spawner() -> io::Result<&'static mpsc::Sender<Request>> {
    SPAWNER.get_or_start("childguard-spawner", || Ok(mpsc::channel()), serve)
}

/// The spawner thread: spawns each command it is sent, for as long as the process lives.
fn serve(_: &'static mpsc::Sender<Request>, requests: mpsc::Receiver<Request>) {
    for (mut cmd, reply) in requests {
        let spawned = cmd.spawn();
        // Drop `cmd` (and with it the child's ends of its sockets) *before* replying, so that
        // spawn() never returns while this process still holds them.
        drop(cmd);
        let _ = reply.send(spawned);
    }
}

/// Spawns `cmd` from the long-lived spawner thread.
pub(crate) fn spawn(cmd: Command) -> io::Result<Child> {
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner()?
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("childguard spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("childguard spawner thread is gone"))?
}
