//! Resource limits on a contained child's cgroup — systemd's `MemoryMax=`, `MemoryHigh=`,
//! `TasksMax=`, `CPUQuota=` — and what the kernel did under them: the OOM killer named
//! (`oom-kill`, as systemd's unit result), throttling at `MemoryHigh=`, the peak usage.
//!
//! Hosts differ, and both kinds are supported as systemd's hybrid mode and runc support them:
//! on a pure cgroup v2 host the controllers are in v2 (enabled in the parent's
//! `cgroup.subtree_control` when they are not yet), on a hybrid host (this project's CI) the
//! `memory`, `pids` and `cpu` controllers are bound to v1 hierarchies of their own, where the
//! child gets a cgroup of the same name in each hierarchy it needs. One small file per part:
//! - [`value`]: the values in systemd's spelling;
//! - [`hierarchy`]: where each controller is (from `/proc/self/mountinfo`);
//! - [`files`]: which file each limit is written to, and where the counts are read, in
//!   either version;
//! - [`v1`]: the v1 cgroups, their removal, and the sweep of stale ones.
//!
//! A limit that cannot be applied is an error naming the file, the value and why — never a
//! silent no-op.

use std::fmt;

#[cfg(target_os = "linux")]
pub(crate) mod apply;
#[cfg(target_os = "linux")]
pub(crate) mod files;
#[cfg(target_os = "linux")]
pub(crate) mod hierarchy;
#[cfg(target_os = "linux")]
pub(crate) mod v1;
pub(crate) mod value;

pub use value::Amount;
use value::Bytes;

/// Limits on a contained child's cgroup, in systemd's terms. See
/// [`Builder::limits`](crate::Builder::limits).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Limits {
    /// `MemoryMax=`: the hard limit (v2 `memory.max`, v1 `memory.limit_in_bytes`); above it
    /// the kernel reclaims, then its OOM killer ends a process of the cgroup.
    pub memory_max: Option<Amount>,
    /// `MemoryHigh=`: the throttle (v2 `memory.high` only): above it the cgroup's processes
    /// are slowed down and reclaimed hard, never killed.
    pub memory_high: Option<Amount>,
    /// `TasksMax=`: processes and threads at most (`pids.max`): a `fork` or thread start
    /// beyond fails with `EAGAIN`.
    pub tasks_max: Option<Amount>,
    /// `CPUQuota=`: CPU time per 100 ms period, as a percentage of one CPU (`cpu.max`, v1
    /// `cpu.cfs_quota_us`); 200 is two CPUs' worth.
    pub cpu_quota: Option<u32>,
}

impl Limits {
    /// No limits.
    pub fn new() -> Limits {
        Limits::default()
    }

    /// Sets one limit by its name — `memory-max`, `memory-high`, `tasks-max`, `cpu-quota`
    /// (or systemd's `MemoryMax`, …) — from its value in systemd's spelling (`512M`,
    /// `infinity`, `100`, `50%`). `Err`: which name or value, and why.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let bad = |why: String| format!("{name}={value}: {why}");
        match name.to_ascii_lowercase().replace('-', "").as_str() {
            "memorymax" => self.memory_max = Some(value::parse_bytes(value).map_err(bad)?),
            "memoryhigh" => self.memory_high = Some(value::parse_bytes(value).map_err(bad)?),
            "tasksmax" => self.tasks_max = Some(value::parse_tasks(value).map_err(bad)?),
            "cpuquota" => self.cpu_quota = Some(value::parse_cpu_quota(value).map_err(bad)?),
            _ => {
                return Err(format!(
                    "{name}: no such limit (memory-max, memory-high, tasks-max, cpu-quota)"
                ))
            }
        }
        Ok(())
    }

    /// `MemoryMax=` in bytes.
    pub fn memory_max(mut self, bytes: u64) -> Limits {
        self.memory_max = Some(Amount::Some(bytes));
        self
    }

    /// `MemoryHigh=` in bytes.
    pub fn memory_high(mut self, bytes: u64) -> Limits {
        self.memory_high = Some(Amount::Some(bytes));
        self
    }

    /// `TasksMax=`.
    pub fn tasks_max(mut self, tasks: u64) -> Limits {
        self.tasks_max = Some(Amount::Some(tasks));
        self
    }

    /// `CPUQuota=` as a percentage of one CPU (at least 1).
    pub fn cpu_quota(mut self, percent: u32) -> Limits {
        self.cpu_quota = Some(percent);
        self
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

impl fmt::Display for Limits {
    /// systemd's spelling: `MemoryMax=64M TasksMax=50 CPUQuota=50%`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let size = |a: Amount| match a {
            Amount::Some(n) => Bytes(n).to_string(),
            Amount::Infinity => "infinity".into(),
        };
        let mut parts = Vec::new();
        if let Some(a) = self.memory_max {
            parts.push(format!("MemoryMax={}", size(a)));
        }
        if let Some(a) = self.memory_high {
            parts.push(format!("MemoryHigh={}", size(a)));
        }
        if let Some(a) = self.tasks_max {
            parts.push(format!("TasksMax={a}"));
        }
        if let Some(p) = self.cpu_quota {
            parts.push(format!("CPUQuota={p}%"));
        }
        f.write_str(&parts.join(" "))
    }
}

/// What the limits did (in [`CgroupReport::limits`](crate::CgroupReport::limits)), read from
/// the cgroup's files just before the close removed it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct LimitsReport {
    /// The limits applied.
    pub limits: Limits,
    /// `Some("oom-kill")` when the kernel's OOM killer killed a process of the cgroup —
    /// systemd's unit result for it; `None` otherwise.
    pub result: Option<&'static str>,
    /// Processes the OOM killer killed in the cgroup.
    pub oom_kills: u64,
    /// Times the cgroup went over `MemoryHigh=` and was throttled (v2 `memory.events`
    /// `high`; `None` without `MemoryHigh=`).
    pub memory_high_events: Option<u64>,
    /// The most memory the cgroup used, in bytes (v2 `memory.peak`, Linux 5.19; v1
    /// `memory.max_usage_in_bytes`); `None` without a memory limit or where not counted.
    pub memory_peak: Option<u64>,
    /// Times a `fork` was refused at `TasksMax=` (`pids.events` `max`).
    pub tasks_max_hits: Option<u64>,
    /// Where each controller was, e.g. `memory: cgroup v1 /sys/fs/cgroup/memory/…`.
    pub hierarchies: Vec<String>,
}

impl fmt::Display for LimitsReport {
    /// One part of the close report's line: `oom-kill: the kernel's OOM killer killed 1
    /// process (MemoryMax=64M, peak 64.0M)`, or `limits MemoryHigh=32M: throttled 12 times`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut what = Vec::new();
        if let Some(peak) = self.memory_peak {
            what.push(format!("peak {}", Bytes(peak)));
        }
        if let Some(n) = self.memory_high_events.filter(|&n| n > 0) {
            what.push(format!("throttled at MemoryHigh= {n} time(s)"));
        }
        if let Some(n) = self.tasks_max_hits.filter(|&n| n > 0) {
            what.push(format!("{n} fork(s) refused at TasksMax="));
        }
        if self.result == Some("oom-kill") {
            write!(
                f,
                "oom-kill: the kernel's OOM killer killed {} process(es) ({}",
                self.oom_kills, self.limits
            )?;
        } else {
            write!(f, "limits {} (", self.limits)?;
        }
        for w in &what {
            write!(f, ", {w}")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_by_name_in_either_spelling_and_refuse_with_the_value() {
        let mut l = Limits::new();
        l.set("memory-max", "64M").unwrap();
        l.set("TasksMax", "50").unwrap();
        l.set("cpu-quota", "50%").unwrap();
        assert_eq!(l.to_string(), "MemoryMax=64M TasksMax=50 CPUQuota=50%");
        let e = l.set("memory-max", "lots").unwrap_err();
        assert!(e.starts_with("memory-max=lots: "), "{e}");
        assert!(l
            .set("swap-max", "1G")
            .unwrap_err()
            .contains("no such limit"));
        assert!(!l.is_empty());
        assert!(Limits::new().is_empty());
    }

    #[test]
    fn the_report_names_the_oom_killer() {
        let r = LimitsReport {
            limits: Limits::new().memory_max(64 << 20),
            result: Some("oom-kill"),
            oom_kills: 1,
            memory_high_events: None,
            memory_peak: Some(64 << 20),
            tasks_max_hits: None,
            hierarchies: vec![],
        };
        assert_eq!(
            r.to_string(),
            "oom-kill: the kernel's OOM killer killed 1 process(es) (MemoryMax=64M, peak 64M)"
        );
    }
}
