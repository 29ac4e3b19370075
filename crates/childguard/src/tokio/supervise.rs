//! The supervisor's waits for async code: `wait_for_start_async` and `close_async` on tokio's
//! blocking pool, so no runtime worker thread waits for a restart or a close.

use std::io;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::{SupervisionReport, Supervisor};

fn pool_failed(e: ::tokio::task::JoinError) -> Error {
    Error::new(
        ErrorKind::Wait,
        None,
        io::Error::other(format!("the blocking task failed: {e}")),
    )
}

impl Supervisor {
    /// [`wait_for_start`](Supervisor::wait_for_start) for async code (on the blocking pool).
    /// Dropping the future leaves the wait to end by itself (at most `timeout`).
    pub async fn wait_for_start_async(&self, after: u64, timeout: Duration) -> Result<u64> {
        let shared = self.shared();
        ::tokio::task::spawn_blocking(move || shared.wait_for_start(after, timeout))
            .await
            .map_err(pool_failed)?
    }

    /// [`close`](Supervisor::close) for async code (on the blocking pool): the same report.
    pub async fn close_async(self) -> Result<SupervisionReport> {
        ::tokio::task::spawn_blocking(move || self.close())
            .await
            .map_err(pool_failed)?
    }
}
