//! # childguard-forksafe
//!
//! The few system calls that both of childguard's forking crates make around and inside a
//! process they fork or clone off a (possibly multi-threaded) host, written once:
//!
//! - `childguard` forks its cgroup *guardian* (a double `clone(2)` without `CLONE_VM`);
//! - `childguard-teardown` clones its *teardown helper* (`clone(2)` with `CLONE_VM`).
//!
//! Neither crate may depend on the other: the teardown helper is linked into the *server*
//! (which should not carry a supervisor library), and childguard has no use for async teardown.
//! So the mechanisms they share live here, below both:
//!
//! - every signal blocked in the forking thread around the fork ([`SignalsBlocked`]), so no
//!   handler of the host runs in the new process before it has dealt with signals itself;
//! - every inherited fd but the few kept closed in the new process ([`close_all_except`]:
//!   `close_range(2)`, or a `close(2)` loop up to [`close_loop_limit`] on Linux < 5.9);
//! - the wait for a child whose exit signal is 0 (`waitpid(2)` with `__WALL`: [`wait_all`]);
//! - the exit that touches nothing of the host's (`_exit(2)`: [`exit_now`]);
//! - memory without an allocator (`mmap(2)`: [`map_anonymous`]).
//!
//! Everything a forked or cloned process calls here is async-signal-safe: one system call at a
//! time through the C library's `syscall` or a function POSIX lists as async-signal-safe, no
//! allocation, no lock, no panic. Error numbers come back as `errno` values, read right after
//! the call in the same thread. Linux only: on other systems the crate is empty.

#![deny(unsafe_code)]

#[cfg(target_os = "linux")]
mod sys;

#[cfg(target_os = "linux")]
pub use sys::{
    close_all_except, close_loop_limit, exit_now, map_anonymous, wait_all, SignalsBlocked,
};
