//! Containment: nothing a child starts — `setsid`'d workers, double-forked daemons — outlives
//! its close. One interface, three backends; its callers (the close, the reaper, the tokio
//! face, the CLI) hold a [`Process`](crate::process::Process) and ask it to signal the tree,
//! kill the tree, say whether it is empty and who the server is — never which backend answers:
//!
//! - **cgroup** (the files below): a cgroup v2 of its own per child; needs a writable cgroup.
//! - **PID namespace** ([`pid_namespace`]) and **subreaper** ([`subreaper`]): a tree init of
//!   ours ([`tree_init`]) between us and the server — the PID 1 of a new namespace, or a
//!   process that adopts every orphan — for where no cgroup can be written.
//!
//! [`Containment`] says which is asked for, `Any` and `BestEffort` take the best that works
//! (docs/design.md argues the order), and [`ContainmentReport`] says which answered.
//!
//! The cgroup's files, one small file per mechanism:
//! - [`mount`]: where cgroup v2 is mounted and which cgroup this process is in.
//! - [`at`]: every cgroup directory opened once (`O_NOFOLLOW`), every later step relative to
//!   its fd (`mkdirat`, `openat`, `unlinkat`): never a write or a removal by path.
//! - [`create`]: making the child's cgroup (unique name, mode 0755) and removing it;
//!   [`create_cgroup`] sweeps the parent's stale cgroups first.
//! - [`name`]: our cgroups' names and the tags of this process in them.
//! - [`pidns`]: which pid namespaces have no process left (for names made in another one).
//! - [`explain`]: errors that name the cgroup file and what the errno means there.
//! - [`trim`]: the removal, bottom-up: the cgroups a server made inside its own first.
//! - [`stale`]: on first use of a parent, killing and removing the cgroups of dead
//!   supervisors in it; [`judge`] tells from a name whether its supervisor is dead;
//!   [`notes`] keeps what the sweeps did for the next close report.
//! - [`events`]: `cgroup.events` (`populated`, `frozen`) and the watch that wakes a
//!   wait when it changes.
//! - [`members`]: the cgroup's processes as pidfds, each checked to be in the cgroup after
//!   it was opened, for a signal to every member.
//! - `guardian`: one process for this whole process (forked without exec, started at the
//!   first `exit_with_parent` contained spawn) that kills and removes every cgroup still
//!   registered with it if we die first.
//! - [`kill`]: `cgroup.kill` (Linux 5.14), or freeze → `SIGKILL` each member → thaw.
//! - [`limits`]: resource limits (`MemoryMax=`, `TasksMax=`, …) on the cgroup, in cgroup v2
//!   or in the v1 hierarchies of a hybrid host, and the OOM killer named.
//!
//! The child is placed before it execs. On our own spawn (`spawn/clone3.rs`) it is born in the
//! cgroup (`clone3` with `CLONE_INTO_CGROUP` and the cgroup's directory fd): nothing is
//! written. On std's path (the fallback, or a `Command` our spawn cannot honour) it writes `0`
//! to the new cgroup's `cgroup.procs` before exec (`sys::install_child_setup`), through an fd
//! opened here before the fork. v1 limit cgroups on a hybrid host are joined through their
//! `cgroup.procs` on both paths (`limits/v1.rs`). Everything it starts afterwards is born
//! inside the cgroup.

#[cfg(target_os = "linux")]
pub(crate) mod at;
#[cfg(target_os = "linux")]
pub(crate) mod container;
#[cfg(target_os = "linux")]
pub(crate) mod create;
#[cfg(target_os = "linux")]
pub(crate) mod events;
#[cfg(target_os = "linux")]
pub(crate) mod explain;
#[cfg(target_os = "linux")]
pub(crate) mod guardian;
#[cfg(target_os = "linux")]
pub(crate) mod judge;
#[cfg(target_os = "linux")]
pub(crate) mod kill;
pub(crate) mod limits;
#[cfg(target_os = "linux")]
pub(crate) mod members;
#[cfg(target_os = "linux")]
pub(crate) mod mount;
#[cfg(target_os = "linux")]
pub(crate) mod name;
#[cfg(target_os = "linux")]
pub(crate) mod notes;
#[cfg(target_os = "linux")]
pub(crate) mod pid_namespace;
#[cfg(target_os = "linux")]
pub(crate) mod pidns;
#[cfg(target_os = "linux")]
pub(crate) mod stale;
#[cfg(target_os = "linux")]
pub(crate) mod subreaper;
#[cfg(target_os = "linux")]
pub(crate) mod tree_init;
#[cfg(target_os = "linux")]
pub(crate) mod trim;

use std::path::PathBuf;

/// Makes a new cgroup `childguard-<pid>-<n>-t<start>-ns<pidns>` (mode 0755) under `parent`,
/// or under the cgroup this process runs in. On error nothing is left behind. The stale
/// cgroups of dead supervisors beside it are taken once its child is born ([`after_birth`]).
#[cfg(target_os = "linux")]
pub(crate) fn create_cgroup(
    parent: Option<&std::path::Path>,
    limits: &limits::Limits,
) -> std::io::Result<create::Cgroup> {
    let parent = create::Cgroup::resolve_parent(parent)?;
    let mut cgroup = create::Cgroup::create_in(parent)?;
    if !limits.is_empty() {
        cgroup.limit(limits)?;
    }
    Ok(cgroup)
}

/// Once a contained child is born (its `clone3` returned: with `CLONE_VFORK`, once it has
/// `exec`'d; on std's path, once it has joined `cgroup`), the sweeps of stale cgroups, each
/// once per process: the v2 one of `cgroup`'s parent the first time that parent is used
/// ([`stale`]), then the v1 hierarchies' (after the v2 sweep, which killed the stale cgroups'
/// processes, so their v1 twins are empty). After the birth, so they run while the child's
/// program starts on another CPU instead of before it: a `readdir` of the parent and of each
/// v1 hierarchy, a `/proc` scan when a name needs one, and a bounded wait when a stale cgroup
/// had members (~0.1 ms of `init -- true` here, before it was moved, for the v1 sweep
/// alone). Their notes reach this child's close report
/// ([`Cgroup::take_notes`](create::Cgroup::take_notes) takes the pending ones). The child's
/// own v1 cgroups, when it has limits, are made before: a sweep takes only dead supervisors'
/// cgroups, never ours, whose names carry our pid and start time.
#[cfg(target_os = "linux")]
pub(crate) fn after_birth(cgroup: &create::Cgroup) {
    if let Some(parent) = cgroup.dir().parent() {
        // `hierarchy_path` is the parent's path in the hierarchy plus `/name`.
        let hierarchy = match cgroup.hierarchy_path().rsplit_once('/') {
            Some(("", _)) | None => "/",
            Some((above, _)) => above,
        };
        stale::sweep_once(cgroup.parent_fd(), parent, hierarchy);
    }
    limits::apply::sweep_v1_hierarchies();
}

/// Which mechanism holds a contained child's whole tree (see [`Containment`]): the one that
/// answered, named in the close report ([`CloseReport::containment`](crate::CloseReport::containment)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
#[non_exhaustive]
pub enum Backend {
    /// A cgroup v2 of its own (`cgroup.kill` ends the tree).
    Cgroup,
    /// A new PID namespace whose PID 1 is childguard's tree init (its death ends the tree).
    PidNamespace,
    /// childguard's tree init as a subreaper (it kills every orphan re-parented to it).
    Subreaper,
    /// A container the child launched (`docker run`, `podman run`, `nerdctl run`): the rungs
    /// go to it through its engine ([`Builder::container_engine`](crate::Builder::container_engine)).
    Container,
}

impl Backend {
    /// Its name in reports and on the command line: `cgroup`, `pid-namespace`, `subreaper`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cgroup => "cgroup",
            Backend::PidNamespace => "pid-namespace",
            Backend::Subreaper => "subreaper",
            Backend::Container => "container",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a child gets a cgroup of its own. See
/// [`Builder::contain`](crate::Builder::contain).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Containment {
    /// No cgroup: the ladder reaches the child (or its process group). Descendants that left
    /// the group (`setsid`) are not reached.
    #[default]
    None,
    /// A new cgroup v2 of its own, made under the cgroup this process runs in (or under
    /// [`Builder::cgroup_parent`](crate::Builder::cgroup_parent)); `spawn()` fails with
    /// [`ErrorKind::Containment`](crate::ErrorKind::Containment) if it cannot be made.
    Cgroup,
    /// The whole tree in a new PID namespace whose PID 1 is childguard's tree init, a small
    /// fork of this process that forwards the catchable rungs to the child and reaps; when it
    /// dies, however it dies, the kernel kills every process in the namespace. Root makes the
    /// namespace directly; anyone else inside a user namespace of their own (their ids mapped
    /// to themselves). The child's pid is 2 there, and it cannot gain privileges through
    /// setuid programs in a user namespace. When the child exits, the rest of its tree is
    /// killed with it (as a systemd service whose main process exits): a daemonizing server
    /// needs its foreground flag. No limits (they need the cgroup). `spawn()` fails with
    /// [`ErrorKind::Containment`](crate::ErrorKind::Containment) if the namespace is refused.
    PidNamespace,
    /// childguard's tree init as a subreaper (`PR_SET_CHILD_SUBREAPER`): every orphan of the
    /// child's tree is re-parented to it, and it kills them all at the close, when the child
    /// exits, or when this process dies (with `exit_with_parent`). Needs no privilege and
    /// changes nothing the child sees but its parent; if the tree init itself is
    /// `SIGKILL`ed, the orphans re-parent to PID 1 and escape. No limits.
    Subreaper,
    /// The best of the backends above that works here, in [`Containment::BestEffort`]'s order;
    /// `spawn()` fails with [`ErrorKind::Containment`](crate::ErrorKind::Containment), naming
    /// each backend and why it could not be had, if none can. What `childguard run --contain`
    /// asks for. With limits only the cgroup will do.
    Any,
    /// The best of the backends above that works here, in this order: [`Containment::Cgroup`] (nothing
    /// the server sees changes, limits work, and the guardian ends it if we are `SIGKILL`ed),
    /// [`Containment::PidNamespace`] (the kernel ends the tree whatever dies), then
    /// [`Containment::Subreaper`]; if none can be had (or the child cannot join its cgroup),
    /// the child is spawned leading a process group of its own, and the close report says why
    /// ([`CloseReport::containment`](crate::CloseReport::containment),
    /// [`CloseReport::containment_fallback`](crate::CloseReport::containment_fallback)). With
    /// limits only the cgroup will do: it is made or the spawn fails.
    BestEffort,
}

/// Which backend held the child's tree, and why the better ones were passed over (in
/// [`CloseReport::containment`](crate::CloseReport::containment)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ContainmentReport {
    /// The backend that answered.
    pub backend: Backend,
    /// `"cgroup: …"`, `"pid-namespace: …"`: each backend tried before it, and its error.
    pub passed_over: Vec<String>,
    /// With [`Backend::Container`]: the container's name, as its engine knows it.
    pub container: Option<String>,
}

impl ContainmentReport {
    /// The report's words for a backend other than the cgroup (whose own part says enough).
    pub(crate) fn described(&self) -> Option<String> {
        (self.backend != Backend::Cgroup).then(|| self.to_string())
    }
}

impl std::fmt::Display for ContainmentReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "contained by {}", self.backend)?;
        if let Some(name) = &self.container {
            write!(f, " {name}")?;
        }
        if !self.passed_over.is_empty() {
            write!(f, " (passed over: {})", self.passed_over.join("; "))?;
        }
        Ok(())
    }
}

/// Who gets the catchable rungs of a contained child, after systemd's `KillMode=`. The `KILL`
/// rung always reaches every member of the cgroup (`cgroup.kill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum KillMode {
    /// systemd's `KillMode=mixed` (the default): the catchable rungs go to the child (or its
    /// process group, with [`Builder::process_group`](crate::Builder::process_group)) only,
    /// so a server that stops its own workers — postgres' postmaster, nginx' master — does
    /// so in order; `SIGKILL` then reaches whatever is left, wherever it went. This is what
    /// postgres' documentation asks of a unit: its backends must be shut down by the
    /// postmaster, not each by its own `TERM`.
    #[default]
    Mixed,
    /// systemd's `KillMode=control-group`: every rung goes to every process in the cgroup.
    ControlGroup,
}

/// What containment did for one close (in [`CloseReport::cgroup`](crate::CloseReport::cgroup)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct CgroupReport {
    /// The child's cgroup directory.
    pub path: PathBuf,
    /// Who got the catchable rungs.
    pub kill_mode: KillMode,
    /// Whether the directory was removed by the close, with the cgroups the server made inside
    /// it (`false`: members outlived the ladder, and the background reaper removes it once
    /// they are gone; or a directory stayed, named in
    /// [`CloseReport::notes`](crate::CloseReport::notes)).
    pub removed: bool,
    /// Processes still in the cgroup when the close returned (0 when `removed`).
    pub members_left: usize,
    /// With [`Builder::limits`](crate::Builder::limits): the limits, and what the kernel did
    /// under them (`oom-kill`, throttling, the peak usage).
    pub limits: Option<limits::LimitsReport>,
}
