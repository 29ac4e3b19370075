//! Our cgroups' names, `childguard-<pid>-<n>-t<start>-ns<pidns>`: the prefix and the tags of
//! this process that make a name unique across pid reuse and pid namespaces, read from
//! `/proc`. `create` makes names; `stale` reads them back to find a dead owner. Moved out of
//! `stale.rs` by the layering (issue 21 item 5): `create` no longer imports `stale`.

use std::sync::OnceLock;

/// The name prefix of our cgroups.
pub(crate) const PREFIX: &str = "childguard-";

/// The suffix new names carry after `<pid>-<n>`: `-t<start>-ns<inode>` of this process (empty
/// where `/proc` does not tell).
pub(crate) fn own_tags() -> &'static str {
    static TAGS: OnceLock<String> = OnceLock::new();
    TAGS.get_or_init(|| {
        let mut tags = String::new();
        if let Some((_, start)) = proc_stat("self") {
            tags.push_str(&format!("-t{start}"));
            if let Some(ns) = own_pid_namespace() {
                tags.push_str(&format!("-ns{ns}"));
            }
        }
        tags
    })
}

/// `/proc/PID/stat`'s state (field 3) and start time (field 22), read after the last `)` (the
/// command name may contain spaces and parentheses).
pub(crate) fn proc_stat(pid: &str) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
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
    *NS.get_or_init(|| {
        let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
        let link = link.to_str()?;
        link.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
    })
}
