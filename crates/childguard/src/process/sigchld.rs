//! The portable mechanism: `kill(2)` and `waitid(P_PID)` on our own pid, for children without
//! a pidfd (other Unixes, old kernels, a failed `pidfd_open`). Their waits are woken by the
//! `SIGCHLD` notifier of the core ([`crate::core::sigchld`]).

use std::io;
use std::process::ExitStatus;

use rustix::process::{kill_process, WaitId};

use crate::base::signal::Signal;
use crate::failpoint::{self, Point};
use crate::sys;

/// `kill(2)` on our unreaped child.
pub(crate) fn send(pid: u32, signal: Signal) -> io::Result<()> {
    let pid = super::pid(pid)?;
    failpoint::check(Point::Kill)?;
    Ok(kill_process(pid, sys::rustix_signal(signal)?)?)
}

/// `waitid(P_PID)`: see [`super::observe_exit`].
pub(crate) fn observe_exit(pid: u32, reap: bool) -> io::Result<Option<ExitStatus>> {
    super::observe_exit(WaitId::Pid(super::pid(pid)?), reap)
}

/// Errors out if the host's `SIGCHLD` disposition has the kernel reap children itself:
/// `SIG_IGN`, or the `SA_NOCLDWAIT` flag (with any handler). A child is then never a zombie:
/// `waitid` gives `ECHILD`, the status is lost, and the pid may be recycled while we would
/// still signal it by number (`kill`, `killpg` on its group).
pub(crate) fn check_not_ignored() -> io::Result<()> {
    let why = match sys::sigchld_reaping()? {
        sys::SigchldReaping::Ours => return Ok(()),
        sys::SigchldReaping::Ignored => "SIGCHLD is set to SIG_IGN in this process",
        sys::SigchldReaping::NoChildWait => "SIGCHLD has the SA_NOCLDWAIT flag in this process",
    };
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "{why}, so the kernel reaps children itself: their exit status is lost and their \
             pid can be reused while we hold it; restore SIG_DFL (or install a handler) \
             without SA_NOCLDWAIT before spawning"
        ),
    ))
}
