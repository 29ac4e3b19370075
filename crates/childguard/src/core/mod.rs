//! The core: what every waiting layer above shares. Issue 21 puts the one event loop
//! (`event_loop.rs`) and the one wait primitive (`wait.rs`) here.

pub(crate) mod poll;
