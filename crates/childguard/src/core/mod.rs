//! The core: the one event loop that carries every background watch of the library
//! ([`event_loop`]), its deadline heap ([`timers`]) and its one inotify instance
//! ([`inotify`], Linux); and the one wait primitive ([`wait`]) every blocking wait of the
//! library goes through.

pub(crate) mod bell;
pub(crate) mod event_loop;
#[cfg(target_os = "linux")]
pub(crate) mod inotify;
mod timers;
pub(crate) mod wait;

/// The most threads the library runs in the background, whatever the number of children —
/// 1,000 contained, captured servers alive at once cost no more threads than one:
///
/// | thread (`/proc/self/task/*/comm`) | what it does | when it starts |
/// |---|---|---|
/// | `childguard-loop` | the event loop: every pidfd, rung deadline, captured pipe, `cgroup.events` watch, notify socket of a background close | first spawn that captures or contains, first hand-off to the reaper |
/// | `childguard-call` (`childguard-callbacks`) | every handle's `on_line` and passthrough | first spawn with either |
/// | `childguard-spawner` (`childguard-spaw`) | forks the children that die with us (`exit_with_parent`: `PR_SET_PDEATHSIG` follows the forking thread) | first such spawn |
/// | `childguard-sigchld` (`childguard-sigc`) | wakes blocking waits on the portable mechanism (no pidfds: other Unixes, old kernels) | first portable spawn |
/// | `childguard-mrelease` (`childguard-mrel`), at most 2 at once | `process_mrelease(2)` beside a `SIGKILL` rung of a big child | such a rung; ends with it |
///
/// Each is per process: a child made by `fork()` without `exec` starts its own on first use.
/// Not counted: the threads of a tokio runtime the caller runs, and the guardian, which is a
/// process.
pub const MAX_BACKGROUND_THREADS: usize = 4 + crate::release::MAX_RELEASE_HELPERS;
