//! Every `unsafe` block and raw system call of childguard lives here, one thin wrapper per call,
//! each named after its man page. Everything else uses [`rustix`]'s safe wrappers.

#[cfg(target_os = "linux")]
pub(crate) mod guardian;
#[cfg(target_os = "linux")]
pub(crate) mod peer;

#[cfg(target_os = "linux")]
mod clone3;
mod exec;
mod fd;
#[cfg(target_os = "linux")]
mod fd_table;
#[cfg(target_os = "linux")]
mod own_child;
mod proc;
mod signal;
mod start_signals;
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
mod tests;
#[cfg(target_os = "linux")]
pub(crate) mod tree_init;

#[cfg(target_os = "linux")]
pub(crate) use clone3::SUPPORTED as CLONE3_SUPPORTED;
pub(crate) use exec::{install_child_setup, ChildSetup, PidExec, Placement};
#[cfg(target_os = "linux")]
pub(crate) use fd::dup_open_fd;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) use fd::is_inheritable;
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
pub(crate) use fd::own_raw_fd_for_test;
#[cfg(feature = "tokio")]
pub(crate) use fd::{async_fd, async_readable};
#[cfg(target_os = "linux")]
pub(crate) use fd_table::unshare_keeping;
#[cfg(target_os = "linux")]
pub(crate) use own_child::{
    run_forked, spawn_child, spawn_child_from_copy, step_from, ChildPlan, Step,
};
pub(crate) use proc::{process_cpu_time, process_mrelease};
pub(crate) use signal::{
    rustix_signal, sigchld_reaping, sigpipe_ignored_at_start, thread_blocks_signals, SigchldReaping,
};
pub(crate) use start_signals::StartSignals;

/// A value made once and never freed, published through an atomic pointer: readers get a
/// `&'static T` without taking a lock. The one lock-free building block of
/// [`crate::core::per_process`]: after `fork()` a lock that a thread of the parent held at that
/// moment stays locked forever in the child, so nothing a forked child must use to find out
/// that it is a forked child may be a lock.
pub(crate) struct Published<T: 'static>(std::sync::atomic::AtomicPtr<T>);

impl<T: Send + Sync + 'static> Published<T> {
    pub(crate) const fn new() -> Published<T> {
        Published(std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()))
    }

    /// The value published last, if any.
    pub(crate) fn load(&self) -> Option<&'static T> {
        let raw = self.0.load(std::sync::atomic::Ordering::Acquire);
        // SAFETY: every non-null pointer stored here came from `Box::into_raw` in `replace` and
        // is never freed (a replaced value is leaked, not dropped), so it stays valid for the
        // rest of the process — and in a forked child, which gets a copy of the whole address
        // space. The Acquire load pairs with the Release of the exchange that stored it: the
        // value was fully written before. `T: Sync` makes sharing `&T` between threads sound.
        unsafe { raw.as_ref() }
    }

    /// Publishes `new` in place of `current` (what [`Published::load`] returned), unless the
    /// slot changed meanwhile: then `new` is given back. The replaced value is never freed.
    pub(crate) fn replace(
        &self,
        current: Option<&'static T>,
        new: Box<T>,
    ) -> Result<&'static T, Box<T>> {
        use std::sync::atomic::Ordering;
        let expected = current.map_or(std::ptr::null_mut(), |c| std::ptr::from_ref(c).cast_mut());
        let raw = Box::into_raw(new);
        match self
            .0
            .compare_exchange(expected, raw, Ordering::AcqRel, Ordering::Acquire)
        {
            // SAFETY: `raw` came from `Box::into_raw` above and is now published; it is never
            // freed (see `load`), so a `'static` shared borrow of it is valid.
            Ok(_) => Ok(unsafe { &*raw }),
            // SAFETY: the exchange failed, so `raw` was never published: nobody else has seen
            // it, and we take back the sole ownership `Box::into_raw` gave us.
            Err(_) => Err(unsafe { Box::from_raw(raw) }),
        }
    }
}

impl<T> std::fmt::Debug for Published<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Published")
    }
}
