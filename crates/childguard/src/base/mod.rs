//! The bottom layer: what every other layer uses and that uses nothing of the crate but its
//! own layer — signal numbers, the failpoints of the fault tests, the `tracing` events.

#[doc(hidden)]
pub mod failpoint;
pub(crate) mod kernel_text;
pub(crate) mod signal;
pub(crate) mod socket_dir;
pub(crate) mod trace;
pub(crate) mod trusted_dir;
