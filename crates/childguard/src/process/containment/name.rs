//! Our cgroups' names, `childguard-<pid>-<n>-t<start>-ns<pidns>`: the prefix and the tags of
//! this process that make a name unique across pid reuse and pid namespaces, read from
//! `/proc`. `create` makes names; `stale` reads them back to find a dead owner. Moved out of
//! `stale.rs` by the layering (issue 21 item 5): `create` no longer imports `stale`.

use std::io;
use std::sync::OnceLock;

use crate::core::per_process::PerProcess;

/// The name prefix of our cgroups.
pub(crate) const PREFIX: &str = "childguard-";

/// The suffix new names carry after `<pid>-<n>`: `-t<start>-ns<inode>` of this process (empty
/// where `/proc` does not tell).
///
/// Race avoided (a fresh cgroup swept as stale): the tags are this *process's*, read again
/// when the pid changed. A child made by `fork()` without `exec` inherits the parent's cached
/// copy; naming its cgroups `childguard-<its pid>-…-t<the parent's start>` made them look like
/// the cgroups of a dead supervisor whose pid was reused, and the first sweep in any other
/// process (`stale`) killed and removed them — between our `mkdir` and the move into
/// `cgroup.procs`, which then failed with `ENODEV`.
pub(crate) fn own_tags() -> &'static str {
    // Per process and lock-free (a lock held by a parent's thread at the fork would stay
    // locked in the child): see `core::per_process`.
    static TAGS: PerProcess<String> = PerProcess::new();
    if let Some(tags) = TAGS.get() {
        return tags;
    }
    let mut tags = String::new();
    if let Some((_, start)) = proc_stat("self") {
        tags.push_str(&format!("-t{start}"));
        if let Some(ns) = own_pid_namespace() {
            tags.push_str(&format!("-ns{ns}"));
        }
    }
    match TAGS.publish(tags) {
        Ok(ours) => ours,
        // Another thread of this process read the same tags first.
        Err((_, theirs)) => theirs,
    }
}

/// `/proc/PID/stat`'s state (field 3) and start time (field 22), read after the last `)` (the
/// command name may contain spaces and parentheses).
pub(crate) fn proc_stat(pid: &str) -> Option<(char, u64)> {
    let text = crate::base::kernel_text::read(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

pub(crate) fn parse_stat(text: &str) -> Option<(char, u64)> {
    let mut fields = text.get(text.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4..=21 lie between the state (3) and the start time (22).
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The inode of this process's pid namespace (`/proc/self/ns/pid` → `pid:[INODE]`).
pub(crate) fn own_pid_namespace() -> Option<u64> {
    static NS: OnceLock<Option<u64>> = OnceLock::new();
    *NS.get_or_init(|| pid_namespace_of("self").ok())
}

/// The inode of process `pid`'s pid namespace, from the link `/proc/PID/ns/pid` (`pid:[INODE]`).
/// Reading another user's link needs `CAP_SYS_PTRACE` (else `EACCES`); a process gone
/// meanwhile gives `ENOENT`. A link of another form is `InvalidData`.
pub(crate) fn pid_namespace_of(pid: &str) -> io::Result<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid"))?;
    link.to_str()
        .and_then(|l| l.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("/proc/{pid}/ns/pid: {} is not pid:[INODE]", link.display()),
            )
        })
}
