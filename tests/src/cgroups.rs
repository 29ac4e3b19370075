//! Where this test process sits in cgroup v2 (for the containment tests): the mount found in
//! `/proc/self/mountinfo` (never a fixed path), and a lock for the tests of one binary that
//! count this process's cgroups and children.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The tests of one binary that count this process's fds, children and cgroups: one at a time.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The cgroup2 mount point, from mountinfo.
pub fn cgroup_mount() -> PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = info
        .lines()
        .find_map(|l| {
            let (before, after) = l.split_once(" - ")?;
            (after.split(' ').next()? == "cgroup2").then(|| before.split(' ').nth(4).unwrap())
        })
        .expect("this test needs cgroup v2 mounted (CI has it at /sys/fs/cgroup/unified)");
    PathBuf::from(mount)
}

/// The cgroup path of `pid` (its `0::` line), if it exists.
pub fn cgroup_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned)
}

/// The cgroup v2 directory this test process runs in.
pub fn own_cgroup_dir() -> PathBuf {
    let ours = cgroup_of(std::process::id()).expect("our own /proc/self/cgroup has a 0:: line");
    cgroup_mount().join(ours.trim_start_matches('/'))
}

/// The live guardians of process `sup`: the process named `cgguard/<sup>` (one per process,
/// issue 21), or the old kind — `/bin/sh` children of `sup` running the guardian script
/// (`childguard-guardian` in their argv) — so that a test of the one-guardian behaviour fails
/// on the old code by what it asserts, not by finding nothing.
pub fn guardians_of(sup: u32) -> Vec<u32> {
    let mut name = format!("cgguard/{sup}");
    name.truncate(15);
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if !crate::is_alive(pid) {
            continue;
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let old_kind = crate::proc_ppid(pid) == Some(sup)
            && String::from_utf8_lossy(&cmdline).contains("childguard-guardian");
        if comm.trim_end() == name || old_kind {
            found.push(pid);
        }
    }
    found
}

/// A fresh cgroup of this test's own under ours, used as `cgroup_parent`: nobody else on the
/// machine sweeps it, and its first use in this process is ours.
pub fn scratch_parent(name: &str) -> PathBuf {
    let dir = own_cgroup_dir().join(format!("cg-test-{name}-{}", std::process::id()));
    std::fs::create_dir(&dir).unwrap();
    dir
}

/// The directories below `dir`, deepest first.
pub fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(tree(&entry.path()));
            out.push(entry.path());
        }
    }
    out
}

/// Cleanup after a test (also after a failed one): kills what is in `dir` and removes it,
/// bottom-up. Returns whether it is gone.
pub fn force_remove(dir: &Path) -> bool {
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    crate::eventually(Duration::from_secs(20), || {
        for d in tree(dir) {
            let _ = std::fs::remove_dir(d);
        }
        let _ = std::fs::remove_dir(dir);
        !dir.exists()
    })
}
