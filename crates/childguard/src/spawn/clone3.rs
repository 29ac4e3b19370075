//! Our own spawn: `clone3(2)` with `CLONE_VM | CLONE_VFORK` (no page table copied, whatever
//! our size), a pidfd at birth (`CLONE_PIDFD`) and, when contained, the cgroup at birth
//! (`CLONE_INTO_CGROUP`: no `cgroup.procs` write, which waits an RCU grace period); the raw
//! call is `sys/clone3.rs`, the child's steps `sys/own_child.rs`.
//!
//! Taken for a Command whose every setting we can read and honour (`command_fields.rs`):
//! program, args, env (`env_clear`, `arg0` through `command_debug`), `current_dir`, stdio of
//! every kind, `process_group`. Anything else (`uid`, `gid`, `groups`, `chroot` …) takes std's
//! path, as does every spawn where our spawn cannot run (see [`Unavailable`]).
//!
//! Fallbacks, as systemd's: `clone3` failing with `ENOSYS` (no `clone3`: kernel < 5.3, or a
//! seccomp profile that hides it, as Docker's does), `E2BIG`/`EINVAL` (a kernel that knows
//! fewer flags or a shorter `clone_args`: `CLONE_CLEAR_SIGHAND` is 5.5, `CLONE_INTO_CGROUP`
//! 5.7), `EPERM`/`EACCES` (a seccomp profile or an LSM), `EOPNOTSUPP`/`EBUSY` (a cgroup a
//! process cannot be born in: threaded, or domain-invalid) send the spawn to std's path, and
//! every later one at once: the answer holds for the process. `CHILDGUARD_SPAWN=std` in the
//! environment forces std's path, `CHILDGUARD_SPAWN=clone3` ours for every builder that did not
//! choose (CI runs the suite both ways).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::process::Command;
use std::sync::OnceLock;

use crate::base::signal::Signal;
use crate::error::ErrorKind;
use crate::failpoint::{self, Point};
use crate::spawn::command_fields::{self, StdioSpec};
use crate::sys::{self, ChildPlan, PidExec, Step};

/// What a spawn asks of the child beyond the Command.
#[derive(Debug)]
pub(crate) struct OwnSetup {
    /// The v2 cgroup's directory fd ([`cgroup_fd`]): the child is born there.
    pub(crate) cgroup: Option<OwnedFd>,
    /// The limits' v1 `cgroup.procs` the child joins itself (`-1`: none).
    pub(crate) v1_procs: [i32; 3],
    pub(crate) death_signal: Option<(Signal, u32)>,
    pub(crate) ignore_sigpipe: bool,
    pub(crate) start_signals: sys::StartSignals,
    /// The exec that writes `LISTEN_PID`/`WATCHDOG_PID` (activation, watchdog), if any.
    pub(crate) exec: Option<PidExec>,
}

/// A child born of our spawn: exec'd, with its pidfd and our ends of the pipes it asked for.
#[derive(Debug)]
pub(crate) struct Born {
    pub(crate) pid: u32,
    pub(crate) pidfd: OwnedFd,
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: Option<OwnedFd>,
    pub(crate) stderr: Option<OwnedFd>,
}

/// Why std's path spawns this one.
#[derive(Debug, Clone)]
pub(crate) struct Unavailable(pub(crate) String);

/// A spawn that did not happen.
#[derive(Debug)]
pub(crate) enum NotBorn {
    /// Take std's path; the setup is given back.
    Unavailable(Unavailable, Option<Box<PidExec>>),
    /// The spawn failed as it would on std's path too (the program is missing …).
    Failed(ErrorKind, io::Error),
}

/// Why this process spawns by std's path, once a `clone3` failure said ours cannot work here.
static OFF: OnceLock<Unavailable> = OnceLock::new();

/// Whether a builder that chose `own` (`None`: did not choose) spawns with ours, as
/// `CHILDGUARD_SPAWN` may override. `Err`: the variable holds something else.
pub(crate) fn chosen(own: Option<bool>) -> io::Result<bool> {
    static FORCED: OnceLock<Result<Option<bool>, String>> = OnceLock::new();
    let forced = FORCED.get_or_init(|| match std::env::var_os("CHILDGUARD_SPAWN") {
        None => Ok(None),
        Some(v) if v == "std" => Ok(Some(false)),
        Some(v) if v == "clone3" => Ok(Some(true)),
        Some(v) => Err(format!(
            "CHILDGUARD_SPAWN={}: expected std or clone3",
            v.to_string_lossy()
        )),
    });
    match forced {
        Err(why) => Err(io::Error::new(io::ErrorKind::InvalidInput, why.clone())),
        Ok(Some(false)) => Ok(false),
        Ok(Some(true)) => Ok(own != Some(false)),
        Ok(None) => Ok(own == Some(true)),
    }
}

/// Spawns `command` with our spawn, or says why std's path must.
///
/// The caller drops `command` (and with it the child's ends of the fds it holds) right after.
pub(crate) fn spawn(command: &Command, setup: OwnSetup) -> Result<Born, NotBorn> {
    if !sys::CLONE3_SUPPORTED {
        let why = Unavailable("no clone3 trampoline for this target".into());
        return Err(NotBorn::Unavailable(why, setup.exec.map(Box::new)));
    }
    if let Some(off) = OFF.get() {
        return Err(NotBorn::Unavailable(off.clone(), setup.exec.map(Box::new)));
    }
    let mut setup = setup;
    let cgroup = setup.cgroup.take();
    let (plan, ours, theirs) = prepare(command, setup)?;
    let (plan, cloned) = clone_child(cgroup.as_ref().map(AsFd::as_fd), plan)?;
    drop(theirs);
    let (pid, pidfd) = match cloned {
        Ok(born) => born,
        Err(e) => return Err(not_cloned(e, plan.exec)),
    };
    if plan.errno != 0 || plan.reached != Step::Exec {
        reap_failed(&pidfd);
        let errno = if plan.errno != 0 {
            plan.errno
        } else {
            libc::ECHILD
        };
        return Err(NotBorn::Failed(
            ErrorKind::Spawn,
            step_error(plan.reached, errno),
        ));
    }
    let [stdin, stdout, stderr] = ours;
    Ok(Born {
        pid,
        pidfd,
        stdin,
        stdout,
        stderr,
    })
}

/// The plan of a spawn and both ends of its stdio, or why std's path must spawn it.
#[allow(clippy::type_complexity)]
fn prepare(
    command: &Command,
    setup: OwnSetup,
) -> Result<(ChildPlan, [Option<OwnedFd>; 3], [Option<Theirs>; 3]), NotBorn> {
    let fields = match command_fields::read(command) {
        Ok(fields) => fields,
        Err(why) => {
            let exec = setup.exec.map(Box::new);
            return Err(NotBorn::Unavailable(Unavailable(why), exec));
        }
    };
    let exec = match setup.exec {
        Some(exec) => exec,
        // `execve` itself, not glibc's `execvp`: a file the kernel refuses fails with ENOEXEC,
        // as with posix_spawnp — no shell fallback to guard against (`exec_check`).
        None => crate::spawn::own_exec::prepare(command, |_| {}, &[], None)
            .map_err(|(kind, e)| NotBorn::Failed(kind, e))?,
    };
    let failed = |e: io::Error| NotBorn::Failed(ErrorKind::Spawn, e);
    let has_listener = exec.has_listener();
    let mut plan = ChildPlan::new(exec);
    let (ours, theirs) = stdio(&fields.stdio).map_err(failed)?;
    plan.stdio = theirs
        .each_ref()
        .map(|fd| fd.as_ref().map_or(-1, |p| p.raw()));
    plan.cwd = command
        .get_current_dir()
        .map(|dir| crate::spawn::program::c_string(dir.as_os_str().as_bytes()))
        .transpose()
        .map_err(|e| NotBorn::Failed(ErrorKind::Config, e))?;
    plan.process_group = fields.process_group;
    plan.v1_procs = setup.v1_procs;
    plan.ignore_sigpipe = setup.ignore_sigpipe;
    plan.death_signal = setup.death_signal;
    plan.start_signals = setup.start_signals;
    plan.first_private_fd = if has_listener { 4 } else { 3 };
    Ok((plan, ours, theirs))
}

/// Spawns `command` under a tree init of `backend` (`process/containment/tree_init`): the tree
/// init's pid and pidfd (the child we supervise), our ends of the server's pipes, and the
/// tree. `to_all`: `KillMode::ControlGroup`; `host_gone`: the tree ends when we do.
pub(crate) fn spawn_tree(
    command: &Command,
    setup: OwnSetup,
    backend: crate::process::containment::Backend,
    to_all: bool,
    host_gone: bool,
) -> Result<(Born, crate::process::containment::tree_init::Tree), TreeNotBorn> {
    use crate::process::containment::tree_init::{self, NoTree};
    let (mut plan, ours, theirs) = match prepare(command, setup) {
        Ok(prepared) => prepared,
        Err(NotBorn::Unavailable(why, _)) => {
            return Err(TreeNotBorn::Refused(io::Error::other(why.0)))
        }
        Err(NotBorn::Failed(kind, e)) => return Err(TreeNotBorn::Failed(kind, e)),
    };
    let group = plan.process_group.is_some();
    let started = tree_init::start(backend, &mut plan, to_all, group, host_gone);
    drop(theirs);
    let started = started.map_err(|e| match e {
        NoTree::Refused(e) => TreeNotBorn::Refused(e),
        NoTree::Failed(e) => TreeNotBorn::Failed(ErrorKind::Spawn, e),
    })?;
    let [stdin, stdout, stderr] = ours;
    Ok((
        Born {
            pid: started.pid,
            pidfd: started.pidfd,
            stdin,
            stdout,
            stderr,
        },
        started.tree,
    ))
}

/// Why a tree init did not start its server (see `tree_init::NoTree`).
#[derive(Debug)]
pub(crate) enum TreeNotBorn {
    /// This backend is refused here: the next one may work.
    Refused(io::Error),
    /// The spawn failed as it would with any backend.
    Failed(ErrorKind, io::Error),
}

/// The `clone3` and the child's steps: from the small-table thread when this process holds
/// many fds (`small_table.rs`), else from this thread.
fn clone_child(
    cgroup: Option<std::os::fd::BorrowedFd<'_>>,
    mut plan: ChildPlan,
) -> Result<(ChildPlan, io::Result<(u32, OwnedFd)>), NotBorn> {
    if let Err(e) = failpoint::check(Point::Clone3) {
        return Ok((plan, Err(e)));
    }
    if crate::spawn::small_table::worth_it(&plan, cgroup) {
        use crate::spawn::small_table::{spawn_child, Outcome};
        match spawn_child(cgroup, plan) {
            Outcome::Made(plan, cloned) => return Ok((plan, cloned)),
            Outcome::NoThread(back) => plan = back,
            Outcome::Lost(e) => return Err(NotBorn::Failed(ErrorKind::Spawn, e)),
        }
    }
    let cloned = sys::spawn_child(cgroup, &mut plan);
    Ok((plan, cloned))
}

/// What a failed `clone3` means: std's path for this process (the errnos of the module's
/// list), else a failed spawn.
fn not_cloned(e: io::Error, exec: PidExec) -> NotBorn {
    let errno = e.raw_os_error().unwrap_or(libc::EIO);
    let holds = matches!(
        errno,
        libc::ENOSYS
            | libc::E2BIG
            | libc::EINVAL
            | libc::EPERM
            | libc::EACCES
            | libc::EOPNOTSUPP
            | libc::EBUSY
    );
    if !holds {
        return NotBorn::Failed(ErrorKind::Spawn, e);
    }
    let why = Unavailable(format!(
        "clone3 failed with {e}: std's path spawns for the rest of this process"
    ));
    let _ = OFF.set(why.clone());
    NotBorn::Unavailable(why, Some(Box::new(exec)))
}

/// A step's failure as std would give it: the exec's errno as is (a missing program is
/// `NotFound`), any other step's with its name.
fn step_error(step: Step, errno: i32) -> io::Error {
    let e = io::Error::from_raw_os_error(errno);
    if step == Step::Exec {
        return e;
    }
    io::Error::new(
        e.kind(),
        format!("{} failed in the child: {e}", step.call()),
    )
}

/// Reaps a child that exited before its exec (it exited 127: `CLONE_VFORK` returned after).
fn reap_failed(pidfd: &OwnedFd) {
    let _ = rustix::process::waitid(
        rustix::process::WaitId::PidFd(pidfd.as_fd()),
        rustix::process::WaitIdOptions::EXITED,
    );
}

/// A child's end of one of its stdio fds: one we made, or one the Command holds.
enum Theirs {
    Made(OwnedFd),
    Held(i32),
}

impl Theirs {
    fn raw(&self) -> i32 {
        match self {
            Theirs::Made(fd) => fd.as_raw_fd(),
            Theirs::Held(fd) => *fd,
        }
    }
}

/// Our ends and the child's ends of fds 0–2: `/dev/null` opened, pipes made (close-on-exec
/// both: the child's end reaches 0–2 by `dup2`, which clears the flag there).
#[allow(clippy::type_complexity)]
fn stdio(specs: &[StdioSpec; 3]) -> io::Result<([Option<OwnedFd>; 3], [Option<Theirs>; 3])> {
    use rustix::fs::{Mode, OFlags};
    let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
    let mut theirs: [Option<Theirs>; 3] = [None, None, None];
    for (i, spec) in specs.iter().enumerate() {
        theirs[i] = match *spec {
            StdioSpec::Inherit => None,
            StdioSpec::Fd(fd) => Some(Theirs::Held(fd)),
            StdioSpec::Null => {
                let flags = if i == 0 {
                    OFlags::RDONLY
                } else {
                    OFlags::WRONLY
                };
                let null = rustix::fs::open("/dev/null", flags | OFlags::CLOEXEC, Mode::empty())?;
                Some(Theirs::Made(null))
            }
            StdioSpec::Piped => {
                let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
                let (our, their) = if i == 0 { (write, read) } else { (read, write) };
                ours[i] = Some(our);
                Some(Theirs::Made(their))
            }
        };
    }
    Ok((ours, theirs))
}

/// The directory fd of a v2 cgroup, for `CLONE_INTO_CGROUP`: a close-on-exec duplicate of the
/// one the cgroup was opened with when it was made (`O_RDONLY`, not `O_PATH`: the kernel takes
/// the cgroup from an fd it can `fdget`), never the path opened again.
pub(crate) fn cgroup_fd(dir: std::os::fd::BorrowedFd<'_>) -> io::Result<OwnedFd> {
    dir.try_clone_to_owned()
}
