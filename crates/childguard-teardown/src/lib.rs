//! # childguard-teardown
//!
//! Asynchronous address-space teardown for a process with a lot of memory (Linux).
//!
//! When a process exits, the kernel frees its memory *before* the parent's `waitpid` returns:
//! a server with many GiB touched keeps whoever waits for it waiting (tens of milliseconds per
//! GiB). Call [`enable`] early in such a server, and its exit is seen by its parent at once; a
//! helper process frees the memory afterwards.
//!
//! ```no_run
//! // First thing in main(), before the big allocations:
//! match childguard_teardown::enable() {
//!     Ok(teardown) => eprintln!("teardown helper: pid {}", teardown.helper_pid()),
//!     Err(err) => eprintln!("warning: {err}"), // the process then frees its own memory at exit
//! }
//! // … allocate, serve, exit …
//! ```
//!
//! # How it works
//!
//! [`enable`] starts a helper with `clone(CLONE_VM)`: a separate process (its own pid, its own
//! thread group) that shares the caller's address space. An address space is freed when its
//! last user lets go of it; with the helper holding on, the caller's exit only drops a
//! reference, the caller becomes a zombie at once and its parent's `waitpid` returns. The
//! helper, which was waiting on a pidfd of the caller, then exits too, and the kernel frees the
//! memory in the helper's exit. This is the scheme of QEMU's `-async-teardown` option.
//!
//! The helper, step by step:
//!
//! - is cloned with every signal blocked in the calling thread (restored right after), so no
//!   signal handler of the caller can run in it; it then blocks every signal itself, glibc's
//!   internal ones included, and never unblocks any: it needs none (it waits on a pidfd, and
//!   its death signal is `SIGKILL`, which cannot be blocked);
//! - runs on its own stack: `sysconf(_SC_THREAD_STACK_MIN)`, at least 64 KiB, `mmap`ed, with a
//!   guard page below it (a failed allocation is an [`Error`], never silently skipped). The
//!   stack is never unmapped: it is in use until the process ends;
//! - sets `PR_SET_PDEATHSIG(SIGKILL)` (only when [`enable`] runs on the main thread, see below)
//!   and then re-checks `getppid()` against the pid recorded before `clone`;
//! - names itself `cleanup/<ppid>` (`PR_SET_NAME`, cut to 15 bytes);
//! - calls `setsid()`, leaving the caller's session and process group (a `killpg` meant for the
//!   server — childguard's ladder sends those — must not kill the helper first);
//! - `chdir("/")`, so it does not pin the caller's working directory;
//! - closes every fd it inherited (its fd table is a copy) except its pidfd of the caller, with
//!   two `close_range(2)` calls around it, or a `close` loop up to `RLIMIT_NOFILE` (capped at
//!   2²⁰) on kernels before 5.9. So it never keeps the server's socket or pipes open;
//! - reports `READY` to [`enable`] (a futex in its stack mapping), then `poll`s the pidfd until
//!   the caller has exited, and `_exit(0)`s.
//!
//! Everything the helper runs is raw system calls on its own stack: it shares the caller's
//! memory, so it never allocates, takes a lock or uses std's I/O. All of it lives in one
//! module, `sys.rs`, with a safety argument per `unsafe` block.
//!
//! [`enable`] returns once the helper is set up (or has failed, with the reason), so when it
//! returns `Ok` the helper is already visible as `cleanup/<pid>` and holds only its pidfd.
//!
//! # Process relationships
//!
//! - The helper is a **child of the caller** (no `CLONE_PARENT`), with **exit signal 0**: the
//!   caller gets no `SIGCHLD` for it, and `wait()`/`waitpid(-1, …)` (without `__WALL`) neither
//!   see nor reap it, so a program that waits for "all its children" is not disturbed.
//! - After the caller exits, the helper is reparented to the nearest child subreaper or to init,
//!   which reaps it when it exits, after freeing the memory. A program that is a subreaper
//!   (`PR_SET_CHILD_SUBREAPER`) above the caller will see `cleanup/<pid>` children exit.
//! - It is in its **own session and process group**, but in the caller's **cgroup**.
//!
//! # Limits
//!
//! - **A helper killed before the caller defeats it.** Then the caller's exit frees the memory
//!   as usual. `SIGKILL` to the whole cgroup (systemd's `KillMode=control-group`, `docker kill`)
//!   kills both at once, and whichever exits last pays. A `kill -9` of `cleanup/<pid>` does the
//!   same. (Other signals do nothing: the helper blocks them.)
//! - **The memory is freed later, not sooner.** The teardown still costs the same CPU time, in
//!   the helper, and until it ends the memory is still charged to the same cgroup (the helper
//!   is in it): a replacement server started at once may meet a full memory limit.
//! - **It is visible**: `ps` shows `cleanup/<ppid>` next to the server while it runs, and for
//!   the length of the teardown after the server has exited.
//! - **`fork()`**: a forked child has its own copy of the address space and no helper; it can
//!   call [`enable`] to get its own (the record of the parent's helper is ignored in a child).
//! - **`exec()`** after [`enable`]: the old address space stays alive, held by the helper, until
//!   the new program exits — do not `exec` in a process that enabled teardown. (Spawning
//!   programs with `std::process::Command` is fine: that is fork/vfork + exec in the child.)
//! - **Threads are fine**: the helper waits for the whole process, not a thread. But
//!   `PR_SET_PDEATHSIG` follows the *thread* that created the helper, so when [`enable`] runs
//!   off the main thread the death signal is not set (the thread might exit before the process
//!   does, which would kill the helper early), and the pidfd alone ends the helper.
//! - Linux 5.3 or later (`pidfd_open`); other systems get [`Error::Unsupported`].
//!
//! See `docs/teardown.md` for more.

#![deny(unsafe_code)]

mod error;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
mod sys;

pub use error::Error;

/// The running teardown helper of this process, from [`enable`].
///
/// A plain record: dropping it does nothing (the helper stays until the process ends).
#[derive(Debug, Clone, Copy)]
pub struct Teardown {
    helper: u32,
    parent: u32,
    #[cfg(target_os = "linux")]
    block: &'static sys::HelperBlock,
}

impl Teardown {
    /// The helper's pid. It shows up in `ps` as `cleanup/<parent pid>` (cut to 15 bytes).
    pub fn helper_pid(&self) -> u32 {
        self.helper
    }

    /// The pid of the process the helper serves (the one that called [`enable`]).
    pub fn parent_pid(&self) -> u32 {
        self.parent
    }

    /// Whether the helper is still there, waiting for this process to end.
    ///
    /// False if it was killed (then this process will free its own memory at exit, as without
    /// [`enable`]), and in a forked child (which has no helper). The first call that finds the
    /// helper killed also reaps it (it is our child, with exit signal 0, so no plain `wait`
    /// sees it): ask once in a while if the helper may be killed, or it stays a zombie until
    /// this process exits.
    pub fn is_alive(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            linux::is_alive(self)
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

impl PartialEq for Teardown {
    fn eq(&self, other: &Self) -> bool {
        self.helper == other.helper && self.parent == other.parent
    }
}

impl Eq for Teardown {}

/// Starts the teardown helper for this process, or returns the one already started.
///
/// Call it early (before allocating the memory, though any memory mapped later is covered too:
/// the address space is shared, not copied). A second call returns the same [`Teardown`] and
/// starts nothing — even if the helper has since been killed (see [`Teardown::is_alive`]).
/// Calls from several threads are serialised; one helper is started. In a child made by
/// `fork()` after `enable()`, the first call starts the child's own helper.
///
/// Blocks until the helper has set itself up: typically well under a millisecond.
///
/// # Errors
///
/// [`Error::Unsupported`] on systems other than Linux; [`Error::Sys`] if a system call fails
/// (e.g. `pidfd_open` on Linux before 5.3, or `clone` refused); [`Error::HelperSetup`],
/// [`Error::HelperVanished`] or [`Error::Timeout`] if the helper did not get ready. A failed
/// call leaves no helper behind, and may be retried.
pub fn enable() -> Result<Teardown, Error> {
    #[cfg(target_os = "linux")]
    {
        linux::enable()
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err(Error::Unsupported)
    }
}
