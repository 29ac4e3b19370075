//! Every `unsafe` block and raw system call of this crate lives here (Linux only): one thin
//! wrapper per call, each naming its man page, each `unsafe` block saying why it holds.
//!
//! The file has two halves:
//!
//! - **Parent side**: what [`crate::enable`] calls. Ordinary code; it may allocate, and uses
//!   rustix's safe wrappers where they exist.
//! - **Helper side**: [`helper_main`] and the `raw_*` wrappers it calls. This code runs in the
//!   process made by `clone(CLONE_VM)`: it shares every byte of memory with the parent, runs on
//!   a small stack of its own, and has the parent's thread pointer (TLS) because it was not
//!   given one. So it must never allocate, take a lock, touch std's I/O, panic, or read any
//!   state the parent may be changing. It only calls `libc::syscall` (and `libc::_exit`) with
//!   values it copied onto its own stack — through its `raw_*` wrappers here and
//!   childguard-forksafe's `close_all_except` and `exit_now` (shared with childguard's cgroup
//!   guardian), which make only those calls — plus atomics on the [`HelperBlock`] that the
//!   parent set aside for it.
//!
//! `errno` and the helper: glibc's `syscall()` stores a failure's error number in the calling
//! *thread's* `errno`, found through the thread pointer, which in the helper is the thread that
//! called `enable()`. During setup that thread is parked in [`wait_state_change`], whose result
//! is never interpreted (and rustix's raw Linux backend does not use `errno` at all), so the
//! helper may read and write that `errno` slot then. After the helper has
//! reported `READY` it makes only `ppoll` (which cannot fail here: one valid pollfd, no timeout,
//! every catchable signal blocked) and `_exit`, so it never touches `errno` again; the enabling
//! thread may have exited by then and its TLS been reused.

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::io;
use std::mem;
use std::os::fd::OwnedFd;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::Duration;

use childguard_forksafe::{close_all_except, exit_now, SignalsBlocked};
use libc::{c_int, c_long, c_ulong};
use rustix::process::{Pid, PidfdFlags, Signal};
use rustix::thread::futex;

// ---------------------------------------------------------------------------------------------
// Shared between the two sides
// ---------------------------------------------------------------------------------------------

/// [`HelperBlock::state`]: the helper has exited while the parent is still alive. Written by the
/// kernel (`CLONE_CHILD_CLEARTID`, which also does a futex wake), never by us.
pub(crate) const STATE_EXITED: u32 = 0;
/// [`HelperBlock::state`]: set by the parent before `clone`; the helper is setting itself up.
pub(crate) const STATE_STARTING: u32 = 1;
/// [`HelperBlock::state`]: set by the helper once set up; it now waits for the parent's end.
pub(crate) const STATE_READY: u32 = 2;

/// A setup step of the helper, reported through [`HelperBlock`] when it fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Step {
    /// `rt_sigprocmask`: block every signal, glibc's internal ones included.
    BlockSignals = 1,
    /// `prctl(PR_SET_PDEATHSIG, SIGKILL)`.
    DeathSignal = 2,
    /// `prctl(PR_SET_NAME, "cleanup/<ppid>")`.
    SetName = 3,
    /// `setsid`: leave the parent's session and process group.
    NewSession = 4,
    /// `close_range` (or the `close` loop): drop every fd but the pidfd.
    CloseFds = 5,
}

impl Step {
    /// What the step does, for error messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Step::BlockSignals => "rt_sigprocmask (block all signals)",
            Step::DeathSignal => "prctl(PR_SET_PDEATHSIG, SIGKILL)",
            Step::SetName => "prctl(PR_SET_NAME)",
            Step::NewSession => "setsid",
            Step::CloseFds => "close_range (close inherited fds)",
        }
    }

    fn from_raw(raw: u32) -> Option<Self> {
        [
            Step::BlockSignals,
            Step::DeathSignal,
            Step::SetName,
            Step::NewSession,
            Step::CloseFds,
        ]
        .into_iter()
        .find(|step| *step as u32 == raw)
    }
}

/// What the helper needs to know, copied by value onto its stack before it does anything.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
pub(crate) struct HelperArgs {
    /// The parent's pid (its thread-group id), recorded before `clone`.
    pub parent_pid: i32,
    /// The pidfd of the parent, open in the fd table the helper gets a copy of.
    pub pidfd: i32,
    /// Whether to set `PR_SET_PDEATHSIG(SIGKILL)` (only when cloned from the main thread: the
    /// death signal follows the *thread* that made us).
    pub death_signal: bool,
    /// Upper bound of the `close` loop used when `close_range(2)` is missing (Linux < 5.9).
    pub close_limit: u32,
    /// `cleanup/<ppid>`, at most 15 bytes, NUL-terminated.
    pub name: [u8; 16],
}

/// The helper's mailbox, at the top of its stack mapping (which is never unmapped once the
/// helper exists, so references to it are `'static`).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct HelperBlock {
    /// `STATE_*`; also the futex word and the `CLONE_CHILD_CLEARTID` address.
    state: AtomicU32,
    /// The [`Step`] that failed (0: none), written by the helper before it exits.
    failed_step: AtomicU32,
    /// The error number of that failure.
    failed_errno: AtomicI32,
    /// Read-only after `clone`.
    args: HelperArgs,
}

impl HelperBlock {
    /// One of the `STATE_*` values.
    pub(crate) fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// The step that failed and its error, if the helper reported one.
    pub(crate) fn failure(&self) -> Option<(Step, io::Error)> {
        let step = Step::from_raw(self.failed_step.load(Ordering::Acquire))?;
        let errno = self.failed_errno.load(Ordering::Acquire);
        Some((step, io::Error::from_raw_os_error(errno)))
    }
}

// ---------------------------------------------------------------------------------------------
// Parent side
// ---------------------------------------------------------------------------------------------

/// `sysconf(3)` `_SC_PAGESIZE`, or 4096 if it cannot tell.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf only looks up a value for a valid name; it has no memory arguments.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// `sysconf(3)` `_SC_THREAD_STACK_MIN`: the smallest stack the C library supports for a thread
/// (glibc computes it at run time from the CPU's signal-frame size). `None` if indeterminate.
pub(crate) fn thread_stack_min() -> Option<usize> {
    // SAFETY: as in `page_size`.
    let n = unsafe { libc::sysconf(libc::_SC_THREAD_STACK_MIN) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// `getpid(2)`.
pub(crate) fn getpid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}

/// `gettid(2)` compared with `getpid(2)`: is the calling thread the main thread (the thread-group
/// leader)?
pub(crate) fn on_main_thread() -> bool {
    rustix::thread::gettid() == rustix::process::getpid()
}

/// `pidfd_open(2)` on our own process (Linux 5.3). `O_CLOEXEC` is implied.
pub(crate) fn pidfd_open_self() -> io::Result<OwnedFd> {
    Ok(rustix::process::pidfd_open(
        rustix::process::getpid(),
        PidfdFlags::empty(),
    )?)
}

/// `kill(2)` with `SIGKILL`, for a helper that did not finish its setup in time. The pid is
/// still ours: the helper is our child with exit signal 0, which only a `__WALL` wait (ours, in
/// [`reap`]) can reap, so it stays a zombie until then and its pid is not reused.
pub(crate) fn kill_helper(pid: u32) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    Ok(rustix::process::kill_process(pid, Signal::KILL)?)
}

/// `waitpid(2)` with `__WALL` (the helper's exit signal is 0, so a plain wait does not see it):
/// reaps a helper whose `state` is already [`STATE_EXITED`]. Blocks until it is a zombie, which
/// is a moment: the kernel clears `state` on its way out.
pub(crate) fn reap(pid: u32) -> io::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    childguard_forksafe::wait_all(pid)
        .map(drop)
        .map_err(io::Error::from_raw_os_error)
}

/// `futex(2)` `FUTEX_WAIT` (shared, because the kernel's `CLONE_CHILD_CLEARTID` wake is shared):
/// sleeps while `block.state` is still `expected`, at most `timeout`. Returns early on a wake,
/// a signal, or a value that already differs; callers re-check the state either way, so the
/// error is not interpreted.
pub(crate) fn wait_state_change(block: &HelperBlock, expected: u32, timeout: Duration) {
    let timeout = futex::Timespec {
        tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    let _ = futex::wait(
        &block.state,
        futex::Flags::empty(),
        expected,
        Some(&timeout),
    );
}

/// The helper's stack: one anonymous mapping of a guard page, the stack, and the
/// [`HelperBlock`] at the very top. Unmapped on drop, which only happens when no helper was
/// started on it; [`clone_helper`] takes it over for good.
#[derive(Debug)]
pub(crate) struct HelperStack {
    base: NonNull<u8>,
    len: usize,
    /// Where the block is (and so where the stack starts, growing down): 64-byte aligned.
    block: NonNull<HelperBlock>,
}

impl HelperStack {
    /// Maps `guard page + stack_size (+ block)` bytes, rounded up to pages, makes the lowest
    /// page inaccessible so a stack overflow faults instead of writing over the parent's memory,
    /// and writes the block with `args` and state [`STATE_STARTING`].
    pub(crate) fn new(stack_size: usize, page: usize, args: HelperArgs) -> io::Result<Self> {
        let too_big = || io::Error::from_raw_os_error(libc::ENOMEM);
        let usable = stack_size
            .checked_add(mem::size_of::<HelperBlock>() + 64)
            .and_then(|n| n.checked_next_multiple_of(page))
            .ok_or_else(too_big)?;
        let len = usable.checked_add(page).ok_or_else(too_big)?;
        let base = mmap_stack(len)?;
        if let Err(err) = mprotect_none(base, page) {
            munmap(base, len);
            return Err(err);
        }
        // The block sits in the last bytes of the mapping, aligned down to 64.
        let top = base.as_ptr() as usize + len;
        let block_addr = (top - mem::size_of::<HelperBlock>()) & !63;
        let block = base
            .as_ptr()
            .wrapping_add(block_addr - base.as_ptr() as usize)
            .cast::<HelperBlock>();
        // SAFETY: `block` lies inside the readable, writable part of the fresh mapping (it is
        // above the guard page: usable > size_of::<HelperBlock>() + 64), is 64-byte aligned
        // (more than HelperBlock needs), and nothing else refers to the mapping yet.
        unsafe {
            block.write(HelperBlock {
                state: AtomicU32::new(STATE_STARTING),
                failed_step: AtomicU32::new(0),
                failed_errno: AtomicI32::new(0),
                args,
            });
        }
        let block = NonNull::new(block).ok_or_else(too_big)?;
        Ok(Self { base, len, block })
    }
}

impl Drop for HelperStack {
    fn drop(&mut self) {
        munmap(self.base, self.len);
    }
}

/// `mmap(2)`: `len` bytes of private anonymous read-write memory, flagged `MAP_STACK`.
fn mmap_stack(len: usize) -> io::Result<NonNull<u8>> {
    childguard_forksafe::map_anonymous(len, libc::MAP_STACK).map_err(io::Error::from_raw_os_error)
}

/// `mprotect(2)` `PROT_NONE` on the first `len` bytes at `addr` (the guard page).
fn mprotect_none(addr: NonNull<u8>, len: usize) -> io::Result<()> {
    // SAFETY: the range is the page-aligned start of our own fresh mapping, which nothing
    // references yet; making it inaccessible cannot invalidate any Rust reference.
    let rc = unsafe { libc::mprotect(addr.as_ptr().cast(), len, libc::PROT_NONE) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `munmap(2)` of a mapping from [`mmap_stack`]. Failure leaves it mapped, which is harmless.
fn munmap(addr: NonNull<u8>, len: usize) {
    // SAFETY: only called with a whole mapping from `mmap_stack` that no helper runs on (see
    // `HelperStack`'s drop and `clone_helper`), so no reference into it remains.
    unsafe {
        libc::munmap(addr.as_ptr().cast(), len);
    }
}

/// A running helper: its pid and its block, which stays mapped for the life of the process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Helper {
    pub pid: u32,
    pub block: &'static HelperBlock,
}

/// `clone(2)` with `CLONE_VM | CLONE_CHILD_CLEARTID` and exit signal 0, with every signal
/// blocked in the calling thread around it ([`SignalsBlocked`]: so no handler of ours can run
/// in the new process before it has blocked signals itself; glibc leaves its two internal
/// signals unblocked, which the helper blocks first thing). The new process runs
/// [`helper_main`] on `stack`.
///
/// Not shared: the fd table (the helper closes its copy), the fs info (cwd), signal handlers
/// (the helper keeps everything blocked, so the copied handlers never run), the thread group.
/// Exit signal 0: the parent gets no `SIGCHLD` for it and `wait()`/`waitpid(-1)` without
/// `__WALL` never see it. On success the mapping is handed to the helper and never unmapped.
pub(crate) fn clone_helper(stack: HelperStack) -> io::Result<Helper> {
    let block = stack.block;
    let flags = libc::CLONE_VM | libc::CLONE_CHILD_CLEARTID;
    let blocked = SignalsBlocked::all()?;
    // SAFETY:
    // - `helper_main` only makes raw system calls on its own stack and atomics on the block; it
    //   never touches memory the parent uses (see the module docs), so sharing the address space
    //   is sound. It never returns (it calls `_exit`).
    // - The stack pointer is the block's address: 64-byte aligned, with the usable stack below it
    //   down to the guard page; the block above it is not overwritten by the stack.
    // - The mapping stays valid for the helper's whole life: on success it is forgotten below
    //   (never unmapped); on failure no helper exists and it may be unmapped.
    // - `ctid` is the block's `state`, an AtomicU32 (same layout as the kernel's u32 tid slot)
    //   that lives as long as the mapping, so the kernel's clear-and-wake at exit is in bounds.
    // - `ptid` and `tls` are unused (no CLONE_PARENT_SETTID / CLONE_SETTLS) and passed as null.
    let pid = unsafe {
        libc::clone(
            helper_main,
            block.as_ptr().cast::<c_void>(),
            flags,
            block.as_ptr().cast::<c_void>(),
            ptr::null_mut::<libc::pid_t>(),
            ptr::null_mut::<c_void>(),
            (*block.as_ptr()).state.as_ptr().cast::<libc::pid_t>(),
        )
    };
    // Read errno before anything else can change it; on success the helper exists and may be
    // writing this thread's errno (see the module docs), so it is not read then.
    let failed = (pid == -1).then(io::Error::last_os_error);
    drop(blocked);
    if let Some(err) = failed {
        return Err(err); // `stack` is dropped and unmapped: no helper runs on it.
    }
    mem::forget(stack);
    // SAFETY: the block was initialised by `HelperStack::new` and its mapping is never unmapped
    // from here on, so a shared 'static reference is valid; all mutation goes through atomics.
    let block: &'static HelperBlock = unsafe { &*block.as_ptr() };
    Ok(Helper {
        pid: pid as u32,
        block,
    })
}

// ---------------------------------------------------------------------------------------------
// Helper side: no allocation, no locks, no std I/O, no panics. See the module docs.
// ---------------------------------------------------------------------------------------------

/// Size of the kernel's `sigset_t` (`_NSIG / 8`), what `rt_sigprocmask` and `ppoll` expect.
#[cfg(any(target_arch = "mips", target_arch = "mips64"))]
const KERNEL_SIGSET_BYTES: usize = 16;
#[cfg(not(any(target_arch = "mips", target_arch = "mips64")))]
const KERNEL_SIGSET_BYTES: usize = 8;

/// The helper's whole life. Entered by `clone` with `arg` = its [`HelperBlock`].
extern "C" fn helper_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the block written by `HelperStack::new` before `clone`; its mapping is
    // never unmapped while we may run, and it is only read (args) or used through atomics.
    let block = unsafe { &*arg.cast::<HelperBlock>() };
    let args = block.args; // a copy on our own stack: from here on we read only our copy
    let fail = |step: Step, errno: c_int| -> c_int {
        block.failed_errno.store(errno, Ordering::SeqCst);
        block.failed_step.store(step as u32, Ordering::SeqCst);
        // Exiting clears `state` and wakes the parent (CLONE_CHILD_CLEARTID).
        exit_now(0)
    };

    // 1. Nothing may interrupt us with a handler copied from the parent (glibc's internal
    //    signals included); SIGKILL and SIGSTOP cannot be blocked and need no handler.
    if let Err(errno) = raw_block_all_signals() {
        return fail(Step::BlockSignals, errno);
    }
    // 2. Die with the parent even if the pidfd wait below were to fail, then make sure the
    //    parent did not die before that request took effect.
    if args.death_signal {
        if let Err(errno) = raw_set_death_signal_kill() {
            return fail(Step::DeathSignal, errno);
        }
    }
    if raw_getppid() != args.parent_pid {
        exit_now(0);
    }
    // 3. Be recognisable in ps/top.
    if let Err(errno) = raw_set_name(&args.name) {
        return fail(Step::SetName, errno);
    }
    // 4. Leave the parent's session and process group: a `killpg` meant for the parent's group
    //    (childguard's ladder sends them) must not kill us first, or the parent's exit would do
    //    the teardown after all; and group-survivor scans should not wait for us.
    if let Err(errno) = raw_setsid() {
        return fail(Step::NewSession, errno);
    }
    // 5. Do not pin the parent's working directory (and its mount). Best effort.
    raw_chdir_root();
    // 6. Hold no copy of the parent's fds (sockets, pipes, ...), except the pidfd.
    if let Err(errno) = close_all_except(&[args.pidfd], args.close_limit) {
        return fail(Step::CloseFds, errno);
    }
    // 7. Report, wake the parent in `enable()`, and from now on touch nothing of its memory.
    block.state.store(STATE_READY, Ordering::SeqCst);
    raw_futex_wake(&block.state);

    // 8. Wait for the parent process to end. Our exit then drops the last reference to the
    //    address space, and the kernel frees it in our context, not the parent's.
    raw_poll_until_readable(args.pidfd);
    exit_now(0)
}

/// The error number of the last failed call, from the enabling thread's `errno` slot. Only
/// during setup (see the module docs).
fn raw_errno() -> c_int {
    // SAFETY: __errno_location returns the address of the errno of the thread whose TLS we
    // use: the enabling thread, which is alive and parked in enable() during our setup.
    unsafe { *libc::__errno_location() }
}

/// `rt_sigprocmask(2)` `SIG_SETMASK` with every bit set (the raw call, so glibc's internal
/// signals are blocked too).
fn raw_block_all_signals() -> Result<(), c_int> {
    let all = [0xffu8; 16];
    // SAFETY: `all` is a readable buffer of at least KERNEL_SIGSET_BYTES bytes on our stack;
    // the old-set pointer is null; only our own mask changes.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as c_long,
            all.as_ptr(),
            ptr::null_mut::<c_void>(),
            KERNEL_SIGSET_BYTES as c_ulong,
        )
    };
    if rc == -1 {
        return Err(raw_errno());
    }
    Ok(())
}

/// `prctl(2)` `PR_SET_PDEATHSIG` with `SIGKILL`.
fn raw_set_death_signal_kill() -> Result<(), c_int> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number, not a pointer.
    unsafe { raw_prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as c_ulong) }
}

/// `getppid(2)`.
fn raw_getppid() -> i32 {
    // SAFETY: no arguments; getppid cannot fail.
    let ppid = unsafe { libc::syscall(libc::SYS_getppid) };
    ppid as i32
}

/// `prctl(2)` `PR_SET_NAME`: the kernel copies at most 16 bytes, up to the first NUL.
fn raw_set_name(name: &[u8; 16]) -> Result<(), c_int> {
    // SAFETY: `name` is a 16-byte buffer on our stack whose last byte is NUL (built that way in
    // `crate::linux::helper_name`), so the kernel's bounded copy stays inside it.
    unsafe { raw_prctl(libc::PR_SET_NAME, name.as_ptr() as c_ulong) }
}

/// `prctl(2)` with one argument (the unused ones zero).
///
/// # Safety
///
/// If `option` reads or writes memory through `arg2`, `arg2` must be the address of a buffer
/// valid for what `option` does with it.
unsafe fn raw_prctl(option: c_int, arg2: c_ulong) -> Result<(), c_int> {
    // SAFETY: the caller vouches for `arg2` (see above); the rest are integers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_prctl,
            option as c_long,
            arg2,
            0 as c_ulong,
            0 as c_ulong,
            0 as c_ulong,
        )
    };
    if rc == -1 {
        return Err(raw_errno());
    }
    Ok(())
}

/// `setsid(2)`: a new session and process group led by us. Cannot fail for a process that is
/// not already a group leader, which a fresh pid never is.
fn raw_setsid() -> Result<(), c_int> {
    // SAFETY: no arguments.
    let rc = unsafe { libc::syscall(libc::SYS_setsid) };
    if rc == -1 {
        return Err(raw_errno());
    }
    Ok(())
}

/// `chdir(2)` to `/`. Our fs info is our own copy (no `CLONE_FS`); the parent's cwd is unchanged.
fn raw_chdir_root() {
    const ROOT: &[u8; 2] = b"/\0";
    // SAFETY: ROOT is a NUL-terminated static string.
    unsafe {
        libc::syscall(libc::SYS_chdir, ROOT.as_ptr());
    }
}

/// `futex(2)` `FUTEX_WAKE` (shared, to match the parent's wait) of everyone waiting on `word`.
fn raw_futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live AtomicU32 in the block; FUTEX_WAKE only reads the address as a
    // key; the remaining arguments are unused zeros.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE as c_long,
            c_long::from(i32::MAX),
            0 as c_ulong,
            0 as c_ulong,
            0 as c_ulong,
        );
    }
}

/// `ppoll(2)` on `fd` for `POLLIN` with no timeout: returns once the pidfd's process has ended.
/// Any error also returns (the caller then exits, which is always safe: while the parent lives,
/// our exit only drops one reference to the address space). `errno` is deliberately not read.
fn raw_poll_until_readable(fd: i32) {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd on our stack; null timeout (wait forever) and null sigmask.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_ppoll,
                &mut pollfd as *mut libc::pollfd,
                1 as c_ulong,
                ptr::null::<libc::timespec>(),
                ptr::null::<c_void>(),
                KERNEL_SIGSET_BYTES as c_ulong,
            )
        };
        // rc == 0 cannot happen without a timeout; anything else ends the wait.
        if rc != 0 {
            return;
        }
    }
}
