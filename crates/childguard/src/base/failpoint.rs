//! Fault injection for the reliability tests (feature `failpoints`; off unless a build asks
//! for it, and then inert until a test arms a point).
//!
//! A failpoint sits right in front of one system call (or one step made of system calls) on
//! a path ordinary tests never take — a kernel whose `waitid` knows no `P_PIDFD`, a seccomp
//! profile that answers `EPERM`, a thread that cannot be started — and, when armed, makes that
//! call fail with the chosen `errno` instead of making it. Nothing else is mocked: the kernel
//! still does everything else, so a test sees what a program would see on a host where that
//! call fails.
//!
//! Armed process-wide: tests that arm one run in a process of their own (`cg-signal-driver`).
//! Without the feature every check is `Ok(())` and compiles away.

use std::io;

/// A place where a system call can be made to fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Point {
    /// `pidfd_open(2)` of a child we just spawned (`process/pidfd.rs`).
    PidfdOpen,
    /// `waitid(2)` with `P_PIDFD` on a child's pidfd, the verifying call at adoption among
    /// them (`process/pidfd.rs`).
    WaitidPidfd,
    /// Starting the `SIGCHLD` notifier thread of the portable mechanism
    /// (`process/sigchld.rs`: `pthread_create`).
    NotifierStart,
    /// Listing `/proc` for the members of a process group (`group.rs`: `opendir`/`getdents`).
    ProcList,
    /// `pidfd_open(2)` of a process-group member found in `/proc` (`group.rs`).
    MemberPidfdOpen,
    /// `pidfd_send_signal(2)` to the child (`process/pidfd.rs`).
    PidfdSendSignal,
    /// `killpg(2)` to the child's group (`group.rs`).
    KillProcessGroup,
    /// `kill(2)` to the child (`process/sigchld.rs`, the portable mechanism).
    Kill,
    /// Starting the event loop's thread, which the background reaper, the capture drain and
    /// the cgroup watches run on (`core/event_loop.rs`: `pthread_create`).
    ReaperStart,
    /// Writing a cgroup's `cgroup.kill` (`containment/kill.rs`, and the guardian): armed with
    /// `ENOENT`, the host looks like a kernel before 5.14, and the freeze fallback runs. The
    /// guardian takes the setting at its start (it is a separate process): arm it before the
    /// process's first contained `exit_with_parent` spawn.
    CgroupKill,
    /// The `clone3(2)` of our own spawn (`spawn/clone3.rs`): armed with `ENOSYS`, `E2BIG`,
    /// `EINVAL`, `EPERM`, `EOPNOTSUPP` or `EBUSY`, the host looks like one where it cannot be
    /// used, and the spawn falls back to std's path (remembered for the process).
    Clone3,
}

#[cfg(feature = "failpoints")]
mod armed {
    use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

    use super::Point;

    const POINTS: usize = 11;
    static ERRNO: [AtomicI32; POINTS] = [const { AtomicI32::new(0) }; POINTS];
    static HITS: [AtomicU64; POINTS] = [const { AtomicU64::new(0) }; POINTS];

    fn index(point: Point) -> usize {
        match point {
            Point::PidfdOpen => 0,
            Point::WaitidPidfd => 1,
            Point::NotifierStart => 2,
            Point::ProcList => 3,
            Point::MemberPidfdOpen => 4,
            Point::PidfdSendSignal => 5,
            Point::KillProcessGroup => 6,
            Point::Kill => 7,
            Point::ReaperStart => 8,
            Point::CgroupKill => 9,
            Point::Clone3 => 10,
        }
    }

    pub(super) fn get(point: Point) -> i32 {
        HITS[index(point)].fetch_add(1, Ordering::SeqCst);
        ERRNO[index(point)].load(Ordering::SeqCst)
    }

    pub(super) fn hits(point: Point) -> u64 {
        HITS[index(point)].load(Ordering::SeqCst)
    }

    pub(super) fn set(point: Point, errno: i32) {
        ERRNO[index(point)].store(errno, Ordering::SeqCst);
    }
}

/// Arms `point`: from now on the call fails with `errno` (0 disarms it).
#[cfg(feature = "failpoints")]
pub fn set(point: Point, errno: i32) {
    armed::set(point, errno);
}

/// Disarms `point`: the call is made again.
#[cfg(feature = "failpoints")]
pub fn clear(point: Point) {
    armed::set(point, 0);
}

/// How many times the call at `point` was about to be made (armed or not) since the start.
#[cfg(feature = "failpoints")]
pub fn hits(point: Point) -> u64 {
    armed::hits(point)
}

/// `Err(errno)` if `point` is armed, else `Ok(())`. Called right before the system call.
#[cfg(feature = "failpoints")]
pub(crate) fn check(point: Point) -> io::Result<()> {
    match armed::get(point) {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn check(_point: Point) -> io::Result<()> {
    Ok(())
}

/// A pause armed by a test and slept at one point of the library: the two points that need
/// one (a slow `process_mrelease(2)`, a preempted spawn) share this, not two copies of it.
#[cfg(feature = "failpoints")]
struct ArmedDelay(std::sync::atomic::AtomicU64);

#[cfg(feature = "failpoints")]
impl ArmedDelay {
    const fn new() -> Self {
        Self(std::sync::atomic::AtomicU64::new(0))
    }

    /// Arms `delay` (`None`: disarms). Stored as nanoseconds, saturated at `u64::MAX`.
    fn set(&self, delay: Option<std::time::Duration>) {
        let nanos = delay.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.0.store(nanos, std::sync::atomic::Ordering::SeqCst);
    }

    /// Sleeps the armed delay, if any.
    fn sleep(&self) {
        let nanos = self.0.load(std::sync::atomic::Ordering::SeqCst);
        if nanos > 0 {
            std::thread::sleep(std::time::Duration::from_nanos(nanos));
        }
    }
}

/// Extra time every `process_mrelease(2)` takes.
#[cfg(feature = "failpoints")]
static MRELEASE_DELAY: ArmedDelay = ArmedDelay::new();

/// From now on every `process_mrelease(2)` returns only after its real work plus `delay`
/// (`None`: as fast as the kernel) — as the call does at 8 GiB, where it takes ~300 ms. For
/// the tests of the close's bound (`tests/memory_release.rs`, a test process of its own whose
/// tests run one at a time).
#[cfg(feature = "failpoints")]
pub fn set_mrelease_delay(delay: Option<std::time::Duration>) {
    MRELEASE_DELAY.set(delay);
}

/// Called by `sys::process_mrelease` right after the system call: sleeps the armed delay.
#[cfg(feature = "failpoints")]
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))] // Linux-only callers
pub(crate) fn after_mrelease() {
    MRELEASE_DELAY.sleep();
}

#[cfg(not(feature = "failpoints"))]
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))] // Linux-only callers
#[inline(always)]
pub(crate) fn after_mrelease() {}

/// Whether `release::plan` leaves out its system-wide huge-page test.
#[cfg(feature = "failpoints")]
static IGNORE_HUGE_PAGES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on (`true`), a `SIGKILL` rung's memory release leaves out its test of the
/// *system's* transparent huge pages (`release.rs`, `plan`), so that tests of the release
/// itself do not depend on what other processes on the host hold.
#[cfg(feature = "failpoints")]
pub fn ignore_system_huge_pages(on: bool) {
    IGNORE_HUGE_PAGES.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// See [`ignore_system_huge_pages`].
#[cfg(feature = "failpoints")]
pub(crate) fn ignores_system_huge_pages() -> bool {
    IGNORE_HUGE_PAGES.load(std::sync::atomic::Ordering::SeqCst)
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn ignores_system_huge_pages() -> bool {
    false
}

/// Time the spawn spends before its readiness wait starts.
#[cfg(feature = "failpoints")]
static READY_WAIT_DELAY: ArmedDelay = ArmedDelay::new();

/// From now on every spawn with a readiness condition sleeps `delay` between starting the
/// capture and starting its wait (`None`: no pause), as a spawning thread preempted there on
/// a loaded machine does, while the child writes and the event loop reads. For
/// `tests/ready_watch.rs`, a test process of its own.
#[cfg(feature = "failpoints")]
pub fn set_ready_wait_delay(delay: Option<std::time::Duration>) {
    READY_WAIT_DELAY.set(delay);
}

/// Called by the spawn right before its readiness wait: sleeps the armed delay.
#[cfg(feature = "failpoints")]
pub(crate) fn before_ready_wait() {
    READY_WAIT_DELAY.sleep();
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn before_ready_wait() {}

/// Whether the notify socket waits for each sender to be reaped before judging it.
#[cfg(feature = "failpoints")]
static NOTIFY_AWAIT_REAPED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// From now on (`true`), the notify socket, after reading a datagram and before judging its
/// sender, waits until the sender (if it is not the child) is reaped — `/proc/PID` is gone —
/// for at most 20 s: what a receiver preempted between the two sees when a helper sends
/// `READY=1` and exits at once. For `tests/notify_reaped.rs`, a test process of its own.
#[cfg(feature = "failpoints")]
pub fn set_notify_await_reaped(on: bool) {
    NOTIFY_AWAIT_REAPED.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// Called by the notify socket between reading a datagram and judging its sender.
#[cfg(feature = "failpoints")]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // Linux-only callers
pub(crate) fn before_notify_sender_check(pid: Option<u32>, child: u32) {
    if !NOTIFY_AWAIT_REAPED.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let Some(pid) = pid.filter(|&p| p != child) else {
        return;
    };
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let proc = std::path::PathBuf::from(format!("/proc/{pid}"));
    // No event tells of another process's reaping: look every millisecond.
    while proc.exists() && std::time::Instant::now() < give_up {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(not(feature = "failpoints"))]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // Linux-only callers
#[inline(always)]
pub(crate) fn before_notify_sender_check(_pid: Option<u32>, _child: u32) {}

/// Whether the watchdog's loop reads the notify socket only once the handle is done with it.
#[cfg(feature = "failpoints")]
static WATCHDOG_READS_LAST: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// From now on (`true`), the event loop, woken by a datagram on a watchdog's notify socket,
/// waits before it reads until the handle has finished with that socket (its close report
/// made), for at most 20 s: the slowest loop there can be, which the close must not need to
/// hear a server's last words. For `tests/notify_last_words.rs`, a test process of its own
/// (the loop thread waits, for every handle of the process).
#[cfg(feature = "failpoints")]
pub fn set_watchdog_reads_last(on: bool) {
    WATCHDOG_READS_LAST.store(on, std::sync::atomic::Ordering::SeqCst);
}

/// Called by the watchdog's loop before it reads the notify socket; `finished` tells whether
/// the handle is done with it.
#[cfg(feature = "failpoints")]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // Linux-only callers
pub(crate) fn before_watchdog_read(finished: impl Fn() -> bool) {
    if !WATCHDOG_READS_LAST.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // The handle's close rings nothing the loop could wait on here: look every millisecond.
    while !finished() && std::time::Instant::now() < give_up {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[cfg(not(feature = "failpoints"))]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))] // Linux-only callers
#[inline(always)]
pub(crate) fn before_watchdog_read(_finished: impl Fn() -> bool) {}
