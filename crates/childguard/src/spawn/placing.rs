//! The placement of a contained child in its cgroup, before it execs: the fds it writes
//! through (see `sys::Placement`), and what the parent learns from them after the spawn.

use std::io;
use std::os::fd::OwnedFd;

use crate::sys;

/// The cgroup a contained child is made in.
#[cfg(target_os = "linux")]
pub(crate) type ContainedIn = crate::process::containment::create::Cgroup;
/// No cgroups off Linux (`Builder::make_cgroup` never makes one).
#[cfg(not(target_os = "linux"))]
pub(crate) type ContainedIn = std::convert::Infallible;

/// The placement pipe of one contained spawn: the child reports a failed `cgroup.procs` write
/// through it (see `sys::Placement`).
pub(crate) struct Placing {
    /// The cgroup's `cgroup.procs`, opened for this spawn.
    #[cfg(target_os = "linux")]
    procs: OwnedFd,
    v1_procs: [i32; 3],
    fall_back: bool,
    read: OwnedFd,
    write: OwnedFd,
}

impl Placing {
    #[cfg(target_os = "linux")]
    pub(crate) fn new(cgroup: &ContainedIn, fall_back: bool) -> io::Result<Placing> {
        let flags = rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK;
        let (read, write) = rustix::pipe::pipe_with(flags)?;
        Ok(Placing {
            procs: cgroup.open_procs()?,
            v1_procs: cgroup.limits().map_or([-1; 3], |l| l.v1_procs()),
            fall_back,
            read,
            write,
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub(crate) fn new(cgroup: &ContainedIn, _fall_back: bool) -> io::Result<Placing> {
        match *cgroup {}
    }

    pub(crate) fn fds(&self) -> sys::Placement {
        use std::os::fd::AsRawFd;
        #[cfg(target_os = "linux")]
        let procs = self.procs.as_raw_fd();
        #[cfg(not(target_os = "linux"))]
        let procs = -1;
        sys::Placement {
            procs,
            v1_procs: self.v1_procs,
            report: self.write.as_raw_fd(),
            fall_back: self.fall_back,
        }
    }

    /// After a failed spawn: the errno of a failed placement and which write failed (0: the
    /// v2 cgroup, 1 + i: the i-th v1 one), if that is what failed.
    pub(crate) fn failure(&self) -> Option<(i32, usize)> {
        let mut report = [0u8; 8];
        match rustix::io::read(&self.read, &mut report) {
            Ok(8) => {
                let errno = i32::from_ne_bytes(report[..4].try_into().ok()?);
                let which = i32::from_ne_bytes(report[4..].try_into().ok()?);
                Some((errno, usize::try_from(which).unwrap_or(0)))
            }
            _ => None,
        }
    }
}

impl std::fmt::Debug for Placing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placing").finish_non_exhaustive()
    }
}

/// The error of a child that could not join its cgroup (`which`: as [`Placing::failure`]).
#[cfg(target_os = "linux")]
pub(crate) fn placing_error(cgroup: &ContainedIn, (errno, which): (i32, usize)) -> io::Error {
    let v1 = which
        .checked_sub(1)
        .and_then(|i| cgroup.limits().and_then(|l| l.v1_dir(i)));
    crate::process::containment::create::explain_placement(v1.unwrap_or(cgroup.dir()), errno)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn placing_error(cgroup: &ContainedIn, _failure: (i32, usize)) -> io::Error {
    match *cgroup {}
}

/// After a successful spawn: `Ok(cgroup)` if the child joined it (or there is none), or, for a
/// `Containment::BestEffort` child that could not join and went on uncontained
/// (`sys::Placement::fall_back`), `Err(why)`; its cgroup is dropped (removed: nothing ran in
/// it).
pub(crate) fn joined(
    placement: Option<&Placing>,
    cgroup: Option<ContainedIn>,
) -> Result<Option<ContainedIn>, String> {
    match (placement.and_then(Placing::failure), cgroup) {
        (Some(failure), Some(cgroup)) => Err(placing_error(&cgroup, failure).to_string()),
        (_, cgroup) => Ok(cgroup),
    }
}
