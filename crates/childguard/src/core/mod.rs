//! The core: the one event loop that carries every background watch of the library
//! ([`event_loop`]), its deadline heap ([`timers`]) and its watches on kernfs files
//! ([`file_watch`], Linux); and the one wait primitive ([`wait`]) every blocking wait of the
//! library goes through.

pub(crate) mod bell;
pub(crate) mod event_loop;
#[cfg(target_os = "linux")]
pub(crate) mod file_watch;
pub(crate) mod per_process;
pub(crate) mod sigchld;
mod timers;
pub(crate) mod wait;
