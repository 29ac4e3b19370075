//! `--lifeline`: the process whose exit ends the `--workers` children — the server's parent
//! when it started (a benchmark, a test) — so a parent killed in the middle leaves no busy
//! worker behind, though the workers are in sessions of their own and outlive the server.
//!
//! Race avoided (*the parent gone before it is watched*): the server opens its parent's pidfd
//! and then checks that its parent is still that pid (an orphan has been reparented by then).
//! The workers open their own pidfds by that pid; the server looks at its pidfd once they all
//! have, and ends them if the parent has exited meanwhile — so no worker can be watching a
//! reused pid.

use std::io;
use std::time::Duration;

use rustix::process::Pid;

/// How often a busy worker looks at its lifeline.
pub const LIFELINE_EVERY: Duration = Duration::from_millis(10);

/// A process watched for its exit: its pidfd on Linux (readable once it has exited, zombie or
/// reaped), else its pid, looked at with `kill(pid, 0)`.
#[derive(Debug)]
pub struct Lifeline {
    pid: Pid,
    #[cfg(target_os = "linux")]
    pidfd: std::os::fd::OwnedFd,
}

impl Lifeline {
    /// The server's side: our parent now. Fails if it has already exited.
    pub fn of_parent() -> io::Result<Lifeline> {
        let parent = rustix::process::getppid()
            .ok_or_else(|| io::Error::other("no parent (we are the first process)"))?;
        let lifeline = Lifeline::watch(parent.as_raw_nonzero().get() as u32)?;
        if rustix::process::getppid() != Some(parent) || lifeline.is_gone() {
            return Err(io::Error::other(format!(
                "our parent {} exited before it could be watched",
                parent.as_raw_nonzero()
            )));
        }
        Ok(lifeline)
    }

    /// A worker's side: process `pid` (the server checks it was the live parent afterwards).
    pub fn watch(pid: u32) -> io::Result<Lifeline> {
        let pid = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        #[cfg(target_os = "linux")]
        return Ok(Lifeline {
            pid,
            pidfd: rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?,
        });
        #[cfg(not(target_os = "linux"))]
        {
            rustix::process::test_kill_process(pid)?;
            Ok(Lifeline { pid })
        }
    }

    /// The watched pid.
    pub fn pid(&self) -> u32 {
        self.pid.as_raw_nonzero().get() as u32
    }

    /// Whether the watched process has exited.
    pub fn is_gone(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            use rustix::event::{poll, PollFd, PollFlags, Timespec};
            let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
            let now = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            matches!(poll(&mut fds, Some(&now)), Ok(n) if n > 0)
        }
        // Off Linux a zombie still answers kill(pid, 0): a worker then runs on until its
        // watched process is reaped.
        #[cfg(not(target_os = "linux"))]
        rustix::process::test_kill_process(self.pid).is_err()
    }
}
