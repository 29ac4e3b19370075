//! The kernel's floor under the `spawn_close_own_us` row: the same server spawned and closed
//! with no childguard code, contained and not, to show what containment costs before any of
//! ours runs.
//!
//! Each side: a socketpair; `clone3(2)` with `CLONE_PIDFD | CLONE_VFORK` — plus, contained,
//! `CLONE_INTO_CGROUP` into a cgroup made for it (`mkdir` in the cgroup this process runs in,
//! where childguard makes its own, and an `O_DIRECTORY` open) — whose child `dup2`s the socket
//! onto stdin and stdout and `execve`s the server; `READY` read; the close: `shutdown`, close,
//! `poll` on the pidfd (1 s), `waitid` to reap; contained, `rmdir` (which would fail with
//! `EBUSY` if anything were left in it). No `cgroup.events` watch, no stale sweep, no report.
//!
//! Not `CLONE_VM`: the child is a copy of this process (fork semantics, no trampoline needed),
//! so both sides pay for copying this process's page tables; that cost is the same for both,
//! and only makes the floor's ratio smaller than a `CLONE_VM` spawn's would be.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags};
use rustix::process::{waitid, WaitId, WaitIdOptions};

use crate::sys::{self, Exec};
use crate::{fixture, Result};

/// What every spawn of the floor needs, made once: the server's argv and envp, and the cgroup
/// directory the contained side makes its cgroups in.
pub struct Floor {
    exec: Exec,
    parent: PathBuf,
    next: std::cell::Cell<u64>,
}

impl Floor {
    pub fn new() -> Result<Floor> {
        let cmd = fixture::command(&[])?;
        let program = cstring(cmd.get_program())?;
        let mut argv = vec![program.clone()];
        for arg in cmd.get_args() {
            argv.push(cstring(arg)?);
        }
        let mut envp = Vec::new();
        for (k, v) in std::env::vars_os() {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            envp.push(CString::new(kv)?);
        }
        Ok(Floor {
            exec: Exec::new(program, argv, envp),
            // Where childguard makes its own cgroups.
            parent: crate::scenarios::scale::probe::containment_parent()?,
            next: std::cell::Cell::new(0),
        })
    }

    /// One spawn + close, contained or not; µs taken.
    pub fn once(&self, contained: bool) -> Result<f64> {
        let start = Instant::now();
        let cgroup = match contained {
            true => Some(self.make_cgroup()?),
            false => None,
        };
        let (ours, theirs) = UnixStream::pair()?;
        let dir = cgroup.as_ref().map(|(_, dir)| dir.as_fd());
        let pidfd = sys::clone3_exec(&self.exec, theirs.as_raw_fd(), dir)?;
        drop(theirs);
        let kept_dir = cgroup.map(|(path, dir)| {
            drop(dir);
            path
        });
        fixture::read_ready(&ours)?;
        // The close.
        rustix::net::shutdown(&ours, rustix::net::Shutdown::Both)?;
        drop(ours);
        let grace = rustix::time::Timespec::try_from(Duration::from_secs(1))?;
        if poll(&mut [PollFd::new(&pidfd, PollFlags::IN)], Some(&grace))? == 0 {
            return Err("contain floor: the server did not exit within 1 s of EOF".into());
        }
        waitid(WaitId::PidFd(pidfd.as_fd()), WaitIdOptions::EXITED)?
            .ok_or("contain floor: waitid returned no status")?;
        drop(pidfd);
        if let Some(path) = kept_dir {
            std::fs::remove_dir(&path)
                .map_err(|e| format!("contain floor: rmdir {}: {e}", path.display()))?;
        }
        Ok(start.elapsed().as_secs_f64() * 1e6)
    }

    /// `mkdir` a fresh cgroup under the parent and open it (`O_DIRECTORY`, for
    /// `CLONE_INTO_CGROUP`).
    fn make_cgroup(&self) -> Result<(PathBuf, OwnedFd)> {
        let n = self.next.get();
        self.next.set(n + 1);
        let path = self
            .parent
            .join(format!("childguard-bench-floor-{}-{n}", std::process::id()));
        std::fs::create_dir(&path)
            .map_err(|e| format!("contain floor: mkdir {}: {e}", path.display()))?;
        let flags = rustix::fs::OFlags::RDONLY
            | rustix::fs::OFlags::DIRECTORY
            | rustix::fs::OFlags::CLOEXEC;
        match rustix::fs::open(&path, flags, rustix::fs::Mode::empty()) {
            Ok(fd) => Ok((path, fd)),
            Err(e) => {
                let _ = std::fs::remove_dir(&path);
                Err(format!("contain floor: open {}: {e}", path.display()).into())
            }
        }
    }
}

fn cstring(s: &OsStr) -> Result<CString> {
    Ok(CString::new(s.as_bytes())?)
}
