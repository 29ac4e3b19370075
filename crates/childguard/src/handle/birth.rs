//! The fork itself, and the child adopted: our own spawn (`spawn/clone3.rs`) when the builder
//! chose it and it can run, else std's `Command::spawn` with our `pre_exec` hook
//! (`sys/exec.rs`); either way a [`Process`] supervised from its first moment, our ends of
//! its pipes, and the cgroup it was placed in. On every error nothing is left behind.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Instant;

use crate::error::ErrorKind;
use crate::process::Process;
#[cfg(target_os = "linux")]
use crate::spawn::clone3::{self, Born, NotBorn, OwnSetup};
use crate::spawn::placing::{self, placing_error, ContainedIn, Placing};
use crate::spawn::spawner;
use crate::spawn::stdio::Pipes;
use crate::sys::{self, PidExec};

/// What the fork needs, gathered by [`Builder::spawn`](crate::Builder::spawn).
pub(super) struct Conception {
    pub(super) command: Command,
    /// Our own spawn was chosen (`spawn/clone3.rs`; Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) own: bool,
    /// Forked by the spawner thread (the parent-death signal follows the forking thread).
    pub(super) exit_with_parent: bool,
    pub(super) death_signal: Option<(crate::base::signal::Signal, u32)>,
    pub(super) ignore_sigpipe: bool,
    pub(super) start_signals: sys::StartSignals,
    /// std's path must install the hook (an fd to sweep, a cgroup to join …). When our own
    /// spawn was chosen, whether an fd is to be swept was not asked: std's path asks.
    pub(super) sweep: bool,
    pub(super) own_exec: Option<PidExec>,
    pub(super) cgroup: Option<ContainedIn>,
    /// Tree inits to try, in order (`process/containment/tree_init`; always empty off Linux).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) tree: Vec<crate::process::containment::Backend>,
    /// Backends already passed over, with why.
    pub(super) passed_over: Vec<String>,
    /// `KillMode::ControlGroup`: a tree init forwards catchable rungs to the whole tree.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(super) to_all: bool,
    /// `Containment::BestEffort` without limits: a cgroup that cannot be joined is left.
    pub(super) may_fall_back: bool,
    pub(super) process_group: bool,
    pub(super) portable: bool,
}

/// The child, adopted.
pub(super) struct Birth {
    pub(super) process: Process,
    pub(super) pipes: Pipes,
    pub(super) pid: u32,
    /// The cgroup it was placed in; `None` after a best-effort fall-back (then `fell_back`).
    pub(super) cgroup: Option<ContainedIn>,
    pub(super) fell_back: Option<String>,
    /// The backend that holds the tree, with those passed over.
    pub(super) containment: Option<crate::process::containment::ContainmentReport>,
    /// The tree init's tree, when one holds the child.
    #[cfg(target_os = "linux")]
    pub(super) tree: Option<crate::process::containment::tree_init::Tree>,
    /// The child leads a process group of its own (asked, or after a fall-back).
    pub(super) process_group: bool,
    /// Our own spawn was chosen, but std's path made the child: why.
    pub(super) spawned_by_std: Option<String>,
}

/// Spawns and adopts the child.
#[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
pub(super) fn give(mut c: Conception) -> Result<Birth, (ErrorKind, io::Error)> {
    let spawn_began = Instant::now();
    #[cfg(target_os = "linux")]
    if !c.tree.is_empty() {
        if let Some(birth) = in_tree(&mut c, spawn_began)? {
            return Ok(birth);
        }
    }
    let passed_over = std::mem::take(&mut c.passed_over);
    if !passed_over.is_empty() {
        // BestEffort and no backend could be had: a process group of its own.
        c.process_group = true;
    }
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut unavailable = None;
    #[cfg(target_os = "linux")]
    if c.own {
        match own(&mut c) {
            Ok(born) => return adopt_born(c, born, spawn_began),
            Err(NotBorn::Failed(kind, e)) => return Err((kind, e)),
            // std's path, with the exec (if any) given back.
            Err(NotBorn::Unavailable(why, exec)) => {
                c.own_exec = exec.map(|e| *e);
                unavailable = Some(why.0);
            }
        }
    }
    let mut birth = by_std(c, spawn_began)?;
    birth.spawned_by_std = unavailable;
    if !passed_over.is_empty() {
        birth.fell_back = Some(passed_over.join("; "));
    }
    Ok(birth)
}

/// Under a tree init, each backend of `c.tree` in turn (`process/containment/tree_init`):
/// `Some` once one started the server, `None` when every one was refused and `BestEffort`
/// may fall back to a process group (their errors in `c.passed_over`).
#[cfg(target_os = "linux")]
fn in_tree(
    c: &mut Conception,
    spawn_began: Instant,
) -> Result<Option<Birth>, (ErrorKind, io::Error)> {
    use crate::process::containment::ContainmentReport;
    if c.process_group {
        c.command.process_group(0);
    }
    for backend in std::mem::take(&mut c.tree) {
        let setup = OwnSetup {
            cgroup: None,
            v1_procs: [-1; 3],
            death_signal: c.death_signal,
            ignore_sigpipe: c.ignore_sigpipe,
            start_signals: c.start_signals,
            exec: c.own_exec.take(),
        };
        match clone3::spawn_tree(&c.command, setup, backend, c.to_all, c.exit_with_parent) {
            Ok((born, tree)) => {
                let report = ContainmentReport {
                    backend,
                    passed_over: std::mem::take(&mut c.passed_over),
                    container: None,
                };
                let command = std::mem::replace(&mut c.command, Command::new(""));
                drop(command);
                let pipes = Pipes::from_fds(born.stdin, born.stdout, born.stderr);
                // The tree init leads no group: the server's group is the tree init's to signal.
                let process = Process::adopt(born.pid, Some(born.pidfd), spawn_began, false, false)
                    .map_err(|e| {
                        let _ = tree.kill_by_pid(born.pid);
                        (ErrorKind::Pidfd, e)
                    })?;
                return Ok(Some(Birth {
                    process,
                    pipes,
                    pid: tree.server_pid(),
                    cgroup: None,
                    fell_back: None,
                    containment: Some(report),
                    tree: Some(tree),
                    process_group: false,
                    spawned_by_std: None,
                }));
            }
            Err(clone3::TreeNotBorn::Refused(e)) => {
                c.passed_over.push(format!("{backend}: {e}"));
            }
            Err(clone3::TreeNotBorn::Failed(kind, e)) => return Err((kind, e)),
        }
    }
    if c.may_fall_back {
        return Ok(None);
    }
    Err((
        ErrorKind::Containment,
        io::Error::other(format!(
            "no containment could be had here: {}",
            c.passed_over.join("; ")
        )),
    ))
}

/// Our own spawn, on the spawner thread when the child must die with us.
#[cfg(target_os = "linux")]
fn own(c: &mut Conception) -> Result<Born, NotBorn> {
    let cgroup = match &c.cgroup {
        #[cfg(target_os = "linux")]
        Some(cgroup) => Some(
            clone3::cgroup_fd(cgroup.fd())
                .map_err(|e| NotBorn::Failed(ErrorKind::Containment, e))?,
        ),
        #[cfg(not(target_os = "linux"))]
        Some(cgroup) => match *cgroup {},
        None => None,
    };
    #[cfg(target_os = "linux")]
    let v1_procs = c
        .cgroup
        .as_ref()
        .and_then(|cg| cg.limits())
        .map_or([-1; 3], |l| l.v1_procs());
    if c.process_group {
        c.command.process_group(0);
    }
    let setup = OwnSetup {
        cgroup,
        v1_procs,
        death_signal: c.death_signal,
        ignore_sigpipe: c.ignore_sigpipe,
        start_signals: c.start_signals,
        exec: c.own_exec.take(),
    };
    if !c.exit_with_parent {
        return clone3::spawn(&c.command, setup);
    }
    // The Command goes to the spawner thread and comes back (std's path may need it).
    let command = std::mem::replace(&mut c.command, Command::new(""));
    let (command, born) = spawner::run(move || {
        let born = clone3::spawn(&command, setup);
        (command, born)
    })
    .map_err(|e| NotBorn::Failed(ErrorKind::Spawn, e))?;
    c.command = command;
    born
}

/// Adopts a child of our own spawn: the pidfd it was born with, the cgroup it was born in.
#[cfg(target_os = "linux")]
fn adopt_born(
    c: Conception,
    born: Born,
    spawn_began: Instant,
) -> Result<Birth, (ErrorKind, io::Error)> {
    // The child's ends of its fds go now: only ours stay open.
    drop(c.command);
    let pipes = Pipes::from_fds(born.stdin, born.stdout, born.stderr);
    let process = Process::adopt(
        born.pid,
        Some(born.pidfd),
        spawn_began,
        c.process_group,
        c.portable,
    )
    .map_err(|e| {
        // A child we cannot supervise is killed and reaped, by pid: it is unreaped, so the
        // pid is still its own.
        kill_unadopted(born.pid, c.cgroup.as_ref());
        (ErrorKind::Pidfd, e)
    })?;
    Ok(Birth {
        process,
        pipes,
        pid: born.pid,
        containment: c.cgroup.as_ref().map(|_| cgroup_report()),
        cgroup: c.cgroup,
        fell_back: None,
        #[cfg(target_os = "linux")]
        tree: None,
        process_group: c.process_group,
        spawned_by_std: None,
    })
}

/// std's `Command::spawn`, with the `pre_exec` hook when it has work to do.
fn by_std(c: Conception, spawn_began: Instant) -> Result<Birth, (ErrorKind, io::Error)> {
    let Conception {
        mut command,
        exit_with_parent,
        death_signal,
        ignore_sigpipe,
        start_signals,
        sweep,
        own_exec,
        cgroup,
        may_fall_back,
        mut process_group,
        portable,
        own,
        ..
    } = c;
    let (mut cgroup, mut fell_back) = (cgroup, None);
    let placement = match cgroup
        .as_ref()
        .map(|c| Placing::new(c, may_fall_back))
        .transpose()
    {
        Ok(placement) => placement,
        // BestEffort: a cgroup whose cgroup.procs cannot be opened is left, as one that
        // cannot be made; the child leads a group of its own.
        Err(e) if may_fall_back => {
            cgroup = None;
            process_group = true;
            fell_back = Some(e.to_string());
            None
        }
        Err(e) => return Err((ErrorKind::Containment, e)),
    };
    if process_group {
        command.process_group(0);
    }
    // With activation fd 3 is the listener; everything above stays ours.
    let first_private_fd = if own_exec.as_ref().is_some_and(|e| e.has_listener()) {
        4
    } else {
        3
    };
    // Not asked when our own spawn was chosen (it marks every fd close-on-exec itself).
    // A blocked signal also needs the hook: std passes the forking thread's mask on, and a
    // program starts with nothing blocked on both paths (see `Builder::start_signals`).
    let sweep = sweep
        || (own && crate::spawn::inheritable::any_from(3))
        || crate::sys::thread_blocks_signals();
    if sweep || own_exec.is_some() || start_signals.is_set() {
        if own_exec.is_none() {
            crate::spawn::exec_check::refuse_unknown_format(&command)
                .map_err(|e| (ErrorKind::Spawn, e))?;
        }
        sys::install_child_setup(
            &mut command,
            sys::ChildSetup {
                death_signal,
                first_private_fd,
                own_exec,
                placement: placement.as_ref().map(Placing::fds),
                ignore_sigpipe,
                start_signals,
            },
        );
    }
    // The Command (holding the child's ends of the socket) is dropped right after the fork,
    // in whichever thread forked, so our process keeps only its own end.
    let spawned = if exit_with_parent {
        spawner::run(move || {
            let spawned = command.spawn();
            drop(command);
            spawned
        })
        .and_then(|spawned| spawned)
    } else {
        command.spawn()
    };
    let mut child = match (spawned, &placement, &cgroup) {
        (Ok(child), _, _) => child,
        (Err(e), Some(placing), Some(cgroup)) => {
            // The cgroup is dropped (removed: the child never got to run in it).
            return Err(match placing.failure() {
                Some(failure) => (ErrorKind::Containment, placing_error(cgroup, failure)),
                None => (ErrorKind::Spawn, e),
            });
        }
        (Err(e), _, _) => return Err((ErrorKind::Spawn, e)),
    };
    // BestEffort: a child that could not join its cgroup runs on uncontained, leading a
    // group of its own (`sys::Placement::fall_back`); its cgroup is removed (dropped).
    let cgroup = match placing::joined(placement.as_ref(), cgroup) {
        Ok(cgroup) => cgroup,
        Err(why) => {
            process_group = true;
            fell_back = Some(why);
            None
        }
    };
    drop(placement);
    // Our ends of the pipes the Command asked for: kept, never dropped with `child`.
    let pipes = Pipes::take_from(&mut child);
    let process = match Process::adopt(child.id(), None, spawn_began, process_group, portable) {
        Ok(p) => p,
        Err(e) => {
            kill_unadopted_cgroup(cgroup.as_ref());
            let _ = child.kill();
            let _ = child.wait();
            return Err((ErrorKind::Pidfd, e));
        }
    };
    Ok(Birth {
        process,
        pipes,
        pid: child.id(),
        containment: cgroup.as_ref().map(|_| cgroup_report()),
        cgroup,
        fell_back,
        #[cfg(target_os = "linux")]
        tree: None,
        process_group,
        spawned_by_std: None,
    })
}

/// Kills and reaps a child we could not adopt, and its cgroup's members.
#[cfg(target_os = "linux")]
fn kill_unadopted(pid: u32, cgroup: Option<&ContainedIn>) {
    kill_unadopted_cgroup(cgroup);
    if let Ok(pid) = crate::process::pid(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty());
    }
}

#[cfg_attr(not(target_os = "linux"), allow(unused_variables))]
fn kill_unadopted_cgroup(cgroup: Option<&ContainedIn>) {
    #[cfg(target_os = "linux")]
    if let Some(cgroup) = cgroup {
        let _ = crate::process::containment::kill::kill_all(cgroup);
    }
}

/// The report of a child contained by its cgroup (the first backend: nothing passed over).
fn cgroup_report() -> crate::process::containment::ContainmentReport {
    crate::process::containment::ContainmentReport {
        backend: crate::process::containment::Backend::Cgroup,
        passed_over: Vec::new(),
        container: None,
    }
}
