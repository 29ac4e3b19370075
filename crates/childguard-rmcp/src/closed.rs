//! [`Closed`]: the close's outcome, reachable after rmcp consumed the transport.

use std::sync::Arc;

use childguard::CloseReport;
use tokio::sync::watch;

type Outcome = Option<Arc<childguard::Result<CloseReport>>>;

/// Where the outcome of a [`ChildTransport`](crate::ChildTransport)'s close is published once
/// it ends. Cheap to clone; any number of them may wait.
#[derive(Debug, Clone)]
pub struct Closed {
    rx: watch::Receiver<Outcome>,
}

impl Closed {
    /// Waits until the close ended, and gives its [`CloseReport`] — also when the close
    /// failed (the report the error carries). `None` if no report will come: only where no
    /// close thread could be started (`EAGAIN`) and the runtime dropped the task that stood in
    /// for it (the child then went to childguard's background reaper, which ends and reaps
    /// it). A close running when the process exits reports nothing either, to no one.
    pub async fn report(&self) -> Option<CloseReport> {
        let outcome = self.outcome().await?;
        match &*outcome {
            Ok(report) => Some(report.clone()),
            Err(e) => e.close_report().cloned(),
        }
    }

    /// Waits until the close ended, and gives its outcome as the handle's close returned it;
    /// `None` as for [`report`](Closed::report).
    pub async fn outcome(&self) -> Option<Arc<childguard::Result<CloseReport>>> {
        let mut rx = self.rx.clone();
        // The value is looked at once more after the publisher went: a report published just
        // before is found; if none was, it was lost.
        let outcome = rx.wait_for(Option::is_some).await.ok()?.clone();
        outcome
    }

    /// The outcome if the close already ended, without waiting.
    pub fn now(&self) -> Option<Arc<childguard::Result<CloseReport>>> {
        self.rx.borrow().clone()
    }
}

/// The transport's side.
#[derive(Debug, Clone)]
pub(crate) struct Publisher {
    tx: watch::Sender<Outcome>,
}

impl Publisher {
    pub(crate) fn new() -> Publisher {
        Publisher {
            tx: watch::Sender::new(None),
        }
    }

    pub(crate) fn subscribe(&self) -> Closed {
        Closed {
            rx: self.tx.subscribe(),
        }
    }

    pub(crate) fn publish(&self, outcome: childguard::Result<CloseReport>) {
        self.tx.send_replace(Some(Arc::new(outcome)));
    }
}
