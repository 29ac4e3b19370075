//! The spawner thread: forks children that must die with us (`exit_with_parent`).
//!
//! Race avoided (PDEATHSIG thread): Linux delivers `PR_SET_PDEATHSIG` when the *thread* that
//! forked the child exits, not when the process does. A child spawned from a short-lived thread
//! (a worker, a `spawn_blocking` task) would be killed as soon as that thread returns. So such
//! children are forked by one long-lived internal thread that lives as long as the process.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type Request = (Command, mpsc::Sender<io::Result<Child>>);

static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
static START: Mutex<()> = Mutex::new(());

fn spawner() -> io::Result<mpsc::Sender<Request>> {
    if let Some(tx) = SPAWNER.get() {
        return Ok(tx.lock().unwrap_or_else(|p| p.into_inner()).clone());
    }
    let _one_at_a_time = START.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(tx) = SPAWNER.get() {
        return Ok(tx.lock().unwrap_or_else(|p| p.into_inner()).clone());
    }
    let (tx, rx) = mpsc::channel::<Request>();
    std::thread::Builder::new()
        .name("childguard-spawner".into())
        .spawn(move || {
            for (mut cmd, reply) in rx {
                let spawned = cmd.spawn();
                // Drop `cmd` (and with it the child's ends of its sockets) *before* replying,
                // so that spawn() never returns while this process still holds them.
                drop(cmd);
                let _ = reply.send(spawned);
            }
        })?;
    let _ = SPAWNER.set(Mutex::new(tx.clone()));
    Ok(tx)
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
