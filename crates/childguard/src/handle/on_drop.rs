//! How a [`ChildHandle`](crate::ChildHandle) that is dropped (not closed) closes: with which
//! [`Reap`], on which thread — so that a drop never stalls a tokio executor, and an explicit
//! [`Reap::Blocking`] is kept wherever blocking is harmless.

use crate::close::close_control::CloseControl;
use crate::handle::builder::Reap;
use crate::handle::ChildHandle;

/// What the drop does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDrop {
    /// The close path with the handle's reap, on this thread.
    AsConfigured,
    /// The close path with [`Reap::Background`]: the first due rung, then the reaper.
    #[cfg(feature = "tokio")]
    Background,
    /// The blocking close inside `tokio::task::block_in_place`.
    #[cfg(feature = "tokio")]
    BlockInPlace,
}

/// Decides [`OnDrop`] for a handle whose reap is `reap`, `chosen` if the builder was told
/// (`Builder::reap`) rather than left at its default.
///
/// - Outside any tokio context: the handle's reap.
/// - In a tokio context (feature `tokio`: `Handle::try_current()` is `Ok` — a runtime's
///   threads, its blocking pool, `Runtime::block_on`, an entered handle), with the reap left at
///   its default: `Background`, so that no grace period blocks an executor thread.
/// - In a tokio context with an explicit `Reap::Blocking`: on a multi-thread runtime the drop
///   blocks as asked, inside `block_in_place` — on a worker thread tokio first hands the
///   worker's other tasks to another thread, so the executor keeps running; on a
///   `spawn_blocking` thread (or in `Runtime::block_on`) it is a plain call. On a
///   current-thread runtime `Background`: that runtime's one thread runs every task, and
///   tokio offers no way to tell it from a `spawn_blocking` thread without panicking, so the
///   drop does not risk stalling it (close explicitly with `close()` in `spawn_blocking` to
///   block there).
pub(crate) fn decide(reap: Reap, chosen: bool) -> OnDrop {
    #[cfg(feature = "tokio")]
    {
        let Ok(runtime) = ::tokio::runtime::Handle::try_current() else {
            return OnDrop::AsConfigured;
        };
        if reap == Reap::Blocking
            && chosen
            && runtime.runtime_flavor() == ::tokio::runtime::RuntimeFlavor::MultiThread
        {
            return OnDrop::BlockInPlace;
        }
        OnDrop::Background
    }
    #[cfg(not(feature = "tokio"))]
    {
        let _ = (reap, chosen);
        OnDrop::AsConfigured
    }
}

impl Drop for ChildHandle {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        match decide(self.reap, self.reap_chosen) {
            OnDrop::AsConfigured => drop(self.close_path(CloseControl::new())),
            #[cfg(feature = "tokio")]
            OnDrop::Background => {
                // Never block an executor thread: first due rung now, the rest in the reaper.
                self.reap = Reap::Background;
                drop(self.close_path(CloseControl::new()));
            }
            #[cfg(feature = "tokio")]
            OnDrop::BlockInPlace => {
                ::tokio::task::block_in_place(|| drop(self.close_path(CloseControl::new())));
            }
        }
    }
}
