//! The floor under `spawn`'s ratio: std's spawn + kill + wait plus exactly the system calls a
//! childguard spawn + close adds, made directly — no childguard code. It is what any
//! implementation of the core issue's requirements (only fds 0–2 reach the child, a pidfd
//! obtained race-free, signals through it, a bounded wait on it, reaping through it) pays over
//! std when it spawns through `std::process::Command`, as `ChildHandle::builder` must.
//!
//! The calls, in childguard's order (`strace` of `spawn()` + `close()` with `KILL:1s`):
//! - before the spawn: `sigaction(SIGCHLD, NULL)` (children reaped by the kernel?), and the
//!   inheritable-fd check: `fstat` of a kept `/proc/self/fd` handle (the open count), `getpid`,
//!   `fcntl(F_GETFD)` on every slot of the dense run, `lseek` + `getdents64` above it;
//! - after it: `pidfd_open`, then `waitid(P_PIDFD, WNOHANG | WNOWAIT)` (is it our child?);
//! - the close: `waitid` (exited before the close?), `shutdown`, close, `waitid` (exited on
//!   EOF?), `pidfd_send_signal(SIGKILL)`, `poll` on the pidfd, `waitid` (reap), close of the
//!   pidfd.
//!
//! The replay keeps the check's answer out of the spawn (it never sweeps): the bench's table
//! has nothing inheritable, so childguard takes std's `posix_spawn` path too.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::fs::{self, Mode, OFlags, RawDir, SeekFrom};
use rustix::process::{pidfd_open, pidfd_send_signal, waitid, PidfdFlags, Signal, WaitId};
use rustix::process::{Pid, WaitIdOptions};

use crate::sys;
use crate::Result;

/// A kept `/proc/self/fd` handle, as childguard keeps one.
pub struct FdDir(OwnedFd);

impl FdDir {
    pub fn open() -> Result<FdDir> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        Ok(FdDir(fs::open("/proc/self/fd", flags, Mode::empty())?))
    }
}

/// One spawn + close of the baselines' program through std plus childguard's system calls;
/// µs taken.
pub fn once(dir: &FdDir) -> Result<f64> {
    let start = Instant::now();
    let _ = sys::sigchld_ignored();
    inheritable_check(dir)?;
    let (mut cmd, ours) = super::command_on_socketpair()?;
    let child = cmd.spawn()?;
    drop(cmd);
    let pid = Pid::from_raw(child.id() as i32).ok_or("spawned pid 0")?;
    let pidfd = pidfd_open(pid, PidfdFlags::empty())?;
    let nohang = WaitIdOptions::NOHANG | WaitIdOptions::EXITED;
    waitid(WaitId::PidFd(pidfd.as_fd()), nohang | WaitIdOptions::NOWAIT)?;
    // The close.
    waitid(WaitId::PidFd(pidfd.as_fd()), nohang)?;
    rustix::net::shutdown(&ours, rustix::net::Shutdown::Both)?;
    drop(ours);
    waitid(WaitId::PidFd(pidfd.as_fd()), nohang)?;
    pidfd_send_signal(&pidfd, Signal::KILL)?;
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        poll(&mut fds, Some(&rustix::time::Timespec::try_from(left)?))?;
        if waitid(WaitId::PidFd(pidfd.as_fd()), nohang)?.is_some() {
            break;
        }
        if left.is_zero() {
            return Err("floor: the child outlived SIGKILL by 1 s".into());
        }
    }
    drop(pidfd);
    let took = start.elapsed().as_secs_f64() * 1e6;
    drop(child); // reaped above; dropping a std Child neither waits nor kills
    Ok(took)
}

/// childguard's check for inheritable fds (its `inheritable.rs`) on a small table: probe the
/// dense run, list what lies above it.
fn inheritable_check(dir: &FdDir) -> Result<()> {
    let open = fs::fstat(&dir.0)?.st_size as i32;
    let _ = std::process::id();
    let dense_end = open + 2;
    let mut found = (3..dense_end).any(sys::is_inheritable);
    fs::seek(&dir.0, SeekFrom::Start(2 + dense_end as u64))?;
    let mut buf = [MaybeUninit::<u8>::uninit(); 2048];
    let mut entries = RawDir::new(&dir.0, &mut buf);
    while let Some(entry) = entries.next() {
        let entry = entry?;
        let name = std::str::from_utf8(entry.file_name().to_bytes());
        let fd: Option<i32> = name.ok().and_then(|n| n.parse().ok());
        found |= fd.is_some_and(|fd| fd >= dense_end && sys::is_inheritable(fd));
    }
    if found {
        return Err("an inheritable fd is open: the floor replay assumes a clean table".into());
    }
    Ok(())
}
