//! `spawn_async`: `spawn()` — with its readiness wait and activation's accept — for async code.

use std::io;

use crate::error::{Error, ErrorKind, Result};
use crate::{Builder, ChildHandle};

impl Builder {
    /// [`spawn`](Builder::spawn) for async code: the fork, the activation accept and the
    /// [`ready`](Builder::ready) wait run on tokio's blocking pool
    /// ([`spawn_blocking`](::tokio::task::spawn_blocking)), so no runtime worker thread ever
    /// waits for the server; the future resolves when `spawn()` would return.
    ///
    /// Dropping the future does not stop the start: it runs to its end on the pool, and the
    /// handle it made is then dropped there, which closes the child (in a runtime: as
    /// [`Reap::Background`](crate::Reap::Background)). Needs a runtime with a blocking pool
    /// (any tokio runtime has one).
    pub async fn spawn_async(self) -> Result<ChildHandle> {
        let program = self.program_name();
        match ::tokio::task::spawn_blocking(move || self.spawn()).await {
            Ok(spawned) => spawned,
            Err(e) => Err(Error::new(
                ErrorKind::Spawn,
                Some(&program),
                io::Error::other(format!("the spawn task failed: {e}")),
            )),
        }
    }
}
