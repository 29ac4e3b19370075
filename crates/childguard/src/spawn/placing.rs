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
    procs: i32,
    fall_back: bool,
    read: OwnedFd,
    write: OwnedFd,
}

impl Placing {
    #[cfg(target_os = "linux")]
    pub(crate) fn new(cgroup: &ContainedIn, fall_back: bool) -> io::Result<Placing> {
        use std::os::fd::AsRawFd;
        let flags = rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK;
        let (read, write) = rustix::pipe::pipe_with(flags)?;
        Ok(Placing {
            procs: cgroup.procs_fd().as_raw_fd(),
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
        sys::Placement {
            procs: self.procs,
            report: self.write.as_raw_fd(),
            fall_back: self.fall_back,
        }
    }

    /// After a failed spawn: the errno of a failed placement, if that is what failed.
    pub(crate) fn failure(&self) -> Option<i32> {
        let mut errno = [0u8; 4];
        match rustix::io::read(&self.read, &mut errno) {
            Ok(4) => Some(i32::from_ne_bytes(errno)),
            _ => None,
        }
    }
}

impl std::fmt::Debug for Placing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placing")
            .field("procs", &self.procs)
            .finish()
    }
}

/// The error of a child that could not join its cgroup.
#[cfg(target_os = "linux")]
pub(crate) fn placing_error(cgroup: &ContainedIn, errno: i32) -> io::Error {
    crate::process::containment::create::explain_placement(cgroup.dir(), errno)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn placing_error(cgroup: &ContainedIn, _errno: i32) -> io::Error {
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
        (Some(errno), Some(cgroup)) => Err(placing_error(&cgroup, errno).to_string()),
        (_, cgroup) => Ok(cgroup),
    }
}
