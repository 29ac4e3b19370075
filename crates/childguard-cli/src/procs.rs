//! Who is whose child, from `/proc` (Linux): `init`'s reaping and sweep use it, and so do the
//! tests and the bench that watch `init` from outside — one reader, not a copy each.

use std::collections::BTreeSet;
use std::fs;

/// The children of `pid` now (alive or zombie), from every thread's
/// `/proc/PID/task/*/children` file — a re-parented orphan is adopted by one of the threads,
/// not necessarily the main one. Empty if `pid` is gone (or the kernel has no such files).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut found = BTreeSet::new();
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    for task in tasks.flatten() {
        if let Ok(text) = childguard::read_kernel_text(task.path().join("children")) {
            found.extend(
                text.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    found.into_iter().collect()
}

/// Every descendant of `pid` now, parents before their children.
pub fn descendants_of(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for child in children_of(parent) {
            if seen.insert(child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}
