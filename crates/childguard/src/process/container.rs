//! A child that launched a container (`containment/container`): the process we supervise is
//! the engine's client (`podman run`, `docker run`), the tree is the container. What changes
//! for [`Process`]: where a rung goes, and when the child is gone.

use std::io;
use std::time::Instant;

use crate::base::signal::Signal;

use super::containment::container::{Container, Rung};
use super::Process;

impl Process {
    /// Puts the container `container` in our hands: the rungs go to it through its engine,
    /// and the close waits until the engine no longer runs it.
    pub(crate) fn contain_container(&mut self, container: Container) {
        self.container = Some(container);
    }

    /// The container the child launched, if it launched one we hold.
    pub(crate) fn container(&self) -> Option<&Container> {
        self.container.as_ref()
    }

    /// A rung for a child that launched a container: a catchable `signal` goes to the
    /// container through the engine — `Some` then, the client left alone (it would pass the
    /// signal on: a second copy); `SIGKILL` goes to the container, and then (`None`: the usual
    /// path) to the client's group too. `None` also while the engine does not know the
    /// container (not created yet: the client is the whole tree) or when the engine failed
    /// (noted for the report): then the client gets the rung as any child would.
    pub(super) fn signal_container(
        &mut self,
        signal: Signal,
    ) -> Option<io::Result<(bool, Option<usize>)>> {
        let container = self.container.as_mut()?;
        // The `CONT` after each catchable rung wakes a stopped child; a container is paused by
        // its engine, not stopped by a signal, and one more engine call per rung would cost
        // ~0.1 s for nothing.
        if signal == Signal::CONT {
            return Some(Ok((false, Some(0))));
        }
        match container.signal(signal) {
            Ok(Rung::Signalled) if signal != Signal::KILL => Some(Ok((true, None))),
            Ok(_) => None,
            Err(e) => {
                container.note(format!(
                    "{signal} to the container {}: {e}",
                    container.name()
                ));
                None
            }
        }
    }

    /// With a container: `Some(gone)` once the client has exited — gone when the engine no
    /// longer runs the container. `None` without one.
    pub(super) fn container_gone(&mut self) -> io::Result<Option<bool>> {
        match &mut self.container {
            Some(container) => container.is_gone().map(Some),
            None => Ok(None),
        }
    }

    /// When a wait must end to ask the engine again (the client exited, the container not yet
    /// seen gone), at the latest `deadline`.
    pub(super) fn container_wake_by(&self, deadline: Instant) -> Instant {
        match &self.container {
            Some(container) if !self.is_running() => container.wake_by(deadline),
            _ => deadline,
        }
    }

    /// The container's notes for the report; once the client has exited, after removing what
    /// `--rm` should have removed.
    pub(super) fn take_container_notes(&mut self) -> Vec<String> {
        let running = self.is_running();
        match &mut self.container {
            Some(container) if !running => container.finish(),
            Some(container) => container.take_notes(),
            None => Vec::new(),
        }
    }
}
