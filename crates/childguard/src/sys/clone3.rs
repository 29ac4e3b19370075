//! `clone3(2)` into a child that runs one function on a stack of its own and exits: the raw
//! call of our own spawn (`spawn/clone3.rs`), as glibc's `posix_spawn` and Go's `os/exec` do.
//!
//! The child is made with `CLONE_VM | CLONE_VFORK`: it shares our memory, and the calling
//! thread sleeps until it has exec'd or exited. No page table is copied, so the spawn costs
//! the same in a process of 10 MiB or 10 GiB (a `fork` grows with the parent's memory).
//! `CLONE_PIDFD` gives the child's pidfd at birth (no window where the child is only a pid
//! number), `CLONE_INTO_CGROUP` places it in its cgroup at birth (no `cgroup.procs` write,
//! which waits an RCU grace period), and `CLONE_CLEAR_SIGHAND` resets every caught signal to
//! its default in the child, so none of our handlers can run there, on our memory.
//!
//! Why a trampoline in assembly: a `CLONE_VM` child cannot return from the system call into
//! the compiled code of its caller — it runs on its own stack, where that code's frame does
//! not exist, while the caller's frame belongs to the sleeping parent. So the instructions
//! right after the `syscall` branch: the parent goes on, the child calls the function it was
//! given and hands its result to `exit(2)`. x86_64 only for now; elsewhere [`SUPPORTED`] is
//! false and every spawn takes std's path.
//!
//! What the child function may do (the contract of [`clone3_run`]): only async-signal-safe
//! calls that do not allocate and take no lock — it shares the heap and every lock with a
//! process whose other threads go on running — and it must not unwind.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// Whether this target has the trampoline.
pub(crate) const SUPPORTED: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

/// The child's stack: 64 KiB (glibc's `posix_spawn` uses 32 KiB); the steps it runs use a few
/// hundred bytes. A page below it is left inaccessible, so an overflow faults in the child
/// instead of writing over our memory.
pub(crate) const STACK_SIZE: usize = 64 * 1024;

/// The flags of a spawn: always `CLONE_VM | CLONE_VFORK | CLONE_PIDFD | CLONE_CLEAR_SIGHAND`,
/// plus `CLONE_INTO_CGROUP` when `cgroup` is given.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn flags(into_cgroup: bool) -> u64 {
    use linux_raw_sys::general as k;
    // The kernel's constants from linux-raw-sys, widened without sign extension: `libc`
    // types CLONE_CLEAR_SIGHAND and CLONE_INTO_CGROUP as c_int, which overflows to 0.
    let mut flags = u64::from(k::CLONE_VM)
        | u64::from(k::CLONE_VFORK)
        | u64::from(k::CLONE_PIDFD)
        | k::CLONE_CLEAR_SIGHAND;
    if into_cgroup {
        flags |= k::CLONE_INTO_CGROUP;
    }
    flags
}

/// `clone3(2)`: runs `child(arg)` in a new process (see the module), which exits with its
/// result; returns once that process has exec'd or exited, with its pid and pidfd. `cgroup`:
/// a directory fd of the cgroup (v2) the child is born in.
///
/// Every signal is blocked in the calling thread for the call (and so in the child until it
/// unblocks them): a signal arriving in the child before `CLONE_CLEAR_SIGHAND` took effect
/// would otherwise run our handler there.
///
/// # Safety
/// `child` must keep to the module's contract, and `arg` must stay valid until this returns
/// (the parent sleeps meanwhile, so nothing else of ours runs on this thread).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) unsafe fn clone3_run(
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    child: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> io::Result<(u32, OwnedFd)> {
    let stack = Stack::take()?;
    // SAFETY: the stack is ours and unused until the call returns; the rest is the caller's.
    let born = unsafe { clone3_run_on(stack.base, STACK_SIZE, cgroup, child, arg) };
    stack.keep();
    born
}

/// [`clone3_run`] on a stack the caller gives: `size` bytes from `base`, unused by anything
/// else until this returns. For a caller that may not allocate nor touch a thread-local (the
/// tree init, a fork-like copy of the host: `sys/own_child.rs` `spawn_child_from_copy`).
///
/// # Safety
/// As [`clone3_run`], and `base..base + size` must be writable memory nothing else uses
/// before this returns.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub(crate) unsafe fn clone3_run_on(
    base: *mut libc::c_void,
    size: usize,
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    child: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> io::Result<(u32, OwnedFd)> {
    use std::os::fd::AsRawFd;
    let mut pidfd: libc::c_int = -1;
    // SAFETY: clone_args is plain old data; all zeros is its "unset" value for every field.
    let mut args: linux_raw_sys::general::clone_args = unsafe { std::mem::zeroed() };
    args.flags = flags(cgroup.is_some());
    args.pidfd = std::ptr::addr_of_mut!(pidfd) as u64;
    args.exit_signal = libc::SIGCHLD as u64;
    args.stack = base as u64;
    args.stack_size = size as u64;
    args.cgroup = cgroup.map_or(0, |fd| fd.as_raw_fd() as u64);
    let blocked = BlockedSignals::all()?;
    let ret: isize;
    // SAFETY: the clone3 system call with a valid clone_args of its size. In the parent
    // (rax != 0) the block is a plain system call that clobbers rcx and r11 (listed) and
    // touches memory (the kernel writes `pidfd`; the child may write what `arg` points to:
    // no `nomem`, so the compiler reloads memory after it). In the child (rax == 0) rsp is
    // the top of `stack` (16-byte aligned: the `call` leaves the callee the alignment the
    // ABI asks for), r12 and r13 still hold `child` and `arg` (the kernel copies the
    // registers), and the child never comes back into compiled code: `exit` ends it.
    // The stack outlives the child's use of it: CLONE_VFORK keeps us here until the child
    // exec'd or exited.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r13",
            "call r12",
            "mov edi, eax",
            "mov eax, {exit}",
            "syscall",
            "ud2",
            "2:",
            exit = const libc::SYS_exit,
            inlateout("rax") libc::SYS_clone3 as isize => ret,
            in("rdi") std::ptr::addr_of_mut!(args),
            in("rsi") std::mem::size_of_val(&args),
            in("r12") child as usize,
            in("r13") arg,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    drop(blocked);
    if ret < 0 {
        return Err(io::Error::from_raw_os_error(-ret as i32));
    }
    // SAFETY: on success the kernel stored a new pidfd, ours alone, in `pidfd`.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok((ret as u32, pidfd))
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
pub(crate) unsafe fn clone3_run_on(
    _base: *mut libc::c_void,
    _size: usize,
    _cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    _child: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    _arg: *mut libc::c_void,
) -> io::Result<(u32, OwnedFd)> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
pub(crate) unsafe fn clone3_run(
    _cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    _child: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    _arg: *mut libc::c_void,
) -> io::Result<(u32, OwnedFd)> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// The child's stack: an anonymous mapping with an inaccessible guard page at its bottom.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
struct Stack {
    /// The mapping, guard page included.
    map: *mut libc::c_void,
    /// The lowest usable byte, one page above `map`.
    base: *mut libc::c_void,
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
std::thread_local! {
    /// The stack of this thread's last spawn, kept for its next one. Free to reuse: the
    /// child that ran on it had exec'd or exited before `clone3` returned (`CLONE_VFORK`), and
    /// nothing else ever runs on it. Keeping it spares each spawn an `mmap`, an `mprotect`, a
    /// `munmap` (whose TLB shootdown interrupts every CPU that runs one of our threads) and the
    /// child's page faults on fresh pages; it costs a thread that spawned 68 KiB of address
    /// space, the few pages the child touched resident, unmapped when the thread ends.
    static KEPT: std::cell::Cell<Option<Stack>> = const { std::cell::Cell::new(None) };
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
impl Stack {
    const GUARD: usize = 4096;

    /// This thread's kept stack, or a new one (the first spawn on this thread, or a spawn
    /// while the thread's stack is in use: none can be, as the thread sleeps in `clone3`
    /// meanwhile, but a new one is always safe).
    fn take() -> io::Result<Stack> {
        match KEPT.try_with(std::cell::Cell::take) {
            Ok(Some(stack)) => Ok(stack),
            _ => Stack::new(),
        }
    }

    /// Keeps this stack for the thread's next spawn (unmapped now if the thread is ending).
    fn keep(self) {
        let _ = KEPT.try_with(|kept| kept.set(Some(self)));
    }

    fn new() -> io::Result<Stack> {
        let len = STACK_SIZE + Self::GUARD;
        // SAFETY: mmap(2) of a new private anonymous mapping: no existing memory is touched.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack {
            map,
            // SAFETY: `map` is a mapping of `len` > GUARD bytes: one page in is inside it.
            base: unsafe { map.cast::<u8>().add(Self::GUARD).cast() },
        };
        // SAFETY: mprotect(2) of the mapping's first page, which is ours and unused.
        if unsafe { libc::mprotect(map, Self::GUARD, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: munmap(2) of the mapping made in `new`; nothing uses it any more (the child
        // exec'd or exited before clone3 returned).
        unsafe { libc::munmap(self.map, STACK_SIZE + Self::GUARD) };
    }
}

/// Every signal blocked in the calling thread until dropped, which restores the mask before.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
struct BlockedSignals(libc::sigset_t);

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
impl BlockedSignals {
    fn all() -> io::Result<BlockedSignals> {
        // SAFETY: sigfillset/pthread_sigmask on sigset_t values we own; pthread_sigmask only
        // changes this thread's mask and stores the previous one in `old`.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            Ok(BlockedSignals(old))
        }
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `all`, a valid sigset_t.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod tests {
    #[test]
    fn the_high_flags_are_not_lost_when_widened() {
        // The pitfall: libc's c_int constants overflow to 0 when widened to u64.
        let flags = super::flags(true);
        assert_eq!(
            flags >> 32,
            0b11,
            "CLONE_CLEAR_SIGHAND and CLONE_INTO_CGROUP: {flags:#x}"
        );
        assert_eq!(super::flags(false) >> 32, 0b01);
    }

    #[test]
    fn a_thread_keeps_its_stack_for_its_next_spawn() {
        let first = super::Stack::take().unwrap();
        let base = first.base;
        first.keep();
        let again = super::Stack::take().unwrap();
        assert_eq!(again.base, base, "the kept stack is reused");
        // Taken, none is kept: a spawn meanwhile gets a new one.
        let other = super::Stack::take().unwrap();
        assert_ne!(other.base, base);
        again.keep();
    }
}
