//! Killing every member of a cgroup at once.
//!
//! `cgroup.kill` (Linux 5.14): writing `1` sends `SIGKILL` to every process in the cgroup and
//! its descendants, in the kernel, under the lock that forks take: no pid is read, so no pid
//! can be recycled under us, and no process forked during the kill escapes it (a fork racing
//! with it either finishes first and its child is killed, or fails).
//!
//! Kernels without it (5.2–5.13 have `cgroup.freeze`): freeze the cgroup (members stop and
//! cannot fork), wait until `cgroup.events` says `frozen 1`, `SIGKILL` each member through a
//! verified pidfd ([`super::members`]), then thaw. A fatal signal ends a frozen task, so the
//! thaw only lets the already-killed exit faster.

use std::io;
use std::time::{Duration, Instant};

use rustix::io::Errno;

use super::create::Cgroup;
use super::explain::explain;
use super::members;
use crate::base::signal::Signal;

/// How long the fallback waits for `frozen 1` before signalling anyway.
const FREEZE_WAIT: Duration = Duration::from_secs(1);

/// `SIGKILL` to every member. Returns how many processes were members just before.
pub(crate) fn kill_all(cgroup: &Cgroup) -> io::Result<usize> {
    // Counted before the kill, for the report (the kill itself reads no pid).
    let count = members::pids(cgroup)?.len();
    let written = match crate::failpoint::check(crate::failpoint::Point::CgroupKill) {
        Err(e) => Err(Errno::from_io_error(&e).unwrap_or(Errno::IO)),
        Ok(()) => super::at::write_at(cgroup.fd(), "cgroup.kill", b"1"),
    };
    match written {
        Ok(()) => {
            crate::base::trace::cgroup_killed(cgroup.dir(), count, "cgroup.kill");
            Ok(count)
        }
        // No `cgroup.kill` (Linux < 5.14). Told by the errno itself: the explained error
        // below keeps only its kind.
        Err(Errno::NOENT) => kill_by_freezing(cgroup),
        Err(e) => Err(explain_write(cgroup, "cgroup.kill", e)),
    }
}

/// The fallback without `cgroup.kill`: freeze → `SIGKILL` each member → thaw.
pub(crate) fn kill_by_freezing(cgroup: &Cgroup) -> io::Result<usize> {
    write_file(cgroup, "cgroup.freeze", b"1")?;
    let killed = wait_frozen(cgroup).and_then(|()| members::signal_each(cgroup, Signal::KILL));
    let thawed = write_file(cgroup, "cgroup.freeze", b"0");
    let killed = killed?;
    thawed?;
    crate::base::trace::cgroup_killed(cgroup.dir(), killed, "freeze");
    Ok(killed)
}

/// Waits (on the `cgroup.events` watch, no sleeping) until the cgroup is frozen or empty, at most
/// [`FREEZE_WAIT`]; a member stuck in the kernel may never report frozen, so after that the
/// members are signalled anyway.
fn wait_frozen(cgroup: &Cgroup) -> io::Result<()> {
    let deadline = Instant::now() + FREEZE_WAIT;
    loop {
        let events = cgroup.watch().read()?;
        if events.frozen || !events.populated || Instant::now() >= deadline {
            return Ok(());
        }
        cgroup.watch().wait(deadline)?;
    }
}

/// Writes `value` to the cgroup's file `name` (opened relative to the cgroup's fd,
/// `O_NOFOLLOW | O_CLOEXEC`, for the write).
fn write_file(cgroup: &Cgroup, name: &str, value: &[u8]) -> io::Result<()> {
    super::at::write_at(cgroup.fd(), name, value).map_err(|e| explain_write(cgroup, name, e))
}

fn explain_write(cgroup: &Cgroup, name: &str, e: Errno) -> io::Error {
    explain(&cgroup.dir().join(name), "writing", e.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    /// Spawns `sh` placed in `cgroup`, which starts `n` `setsid`'d sleepers and waits.
    fn tree_in(cgroup: &Cgroup, n: usize) -> std::process::Child {
        let procs = cgroup.dir().join("cgroup.procs");
        let script = format!(
            "echo $$ > {}; for i in $(seq {n}); do setsid sleep 1000 & done; echo started; wait",
            procs.display()
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script])
            .stdout(std::process::Stdio::piped());
        cmd.process_group(0);
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "started");
        child
    }

    fn wait_empty(cgroup: &Cgroup) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while cgroup.watch().read().unwrap().populated {
            assert!(Instant::now() < deadline, "cgroup not empty after 10 s");
            cgroup.watch().wait(deadline).unwrap();
        }
    }

    #[test]
    fn cgroup_kill_ends_every_member_and_counts_them() {
        let mut cgroup =
            crate::process::containment::create_cgroup(None, &Default::default()).unwrap();
        let mut child = tree_in(&cgroup, 3);
        // The sleepers may still be between fork and exec; all 4 are members already.
        assert_eq!(members::pids(&cgroup).unwrap().len(), 4);
        assert_eq!(kill_all(&cgroup).unwrap(), 4);
        wait_empty(&cgroup);
        child.wait().unwrap();
        cgroup.remove().unwrap();
    }

    #[test]
    fn freezing_then_killing_each_member_ends_every_member() {
        let mut cgroup =
            crate::process::containment::create_cgroup(None, &Default::default()).unwrap();
        let mut child = tree_in(&cgroup, 3);
        assert_eq!(kill_by_freezing(&cgroup).unwrap(), 4);
        wait_empty(&cgroup);
        assert!(!cgroup.watch().read().unwrap().frozen, "left frozen");
        child.wait().unwrap();
        cgroup.remove().unwrap();
    }
}
