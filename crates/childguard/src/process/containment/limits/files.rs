//! The files each limit is written to, and read back from, in either version of cgroups:
//!
//! | limit | cgroup v2 | cgroup v1 |
//! |---|---|---|
//! | `MemoryMax=` | `memory.max` | `memory.limit_in_bytes` |
//! | `MemoryHigh=` | `memory.high` | none: refused (v1's soft limit is not a throttle) |
//! | `TasksMax=` | `pids.max` | `pids.max` |
//! | `CPUQuota=` | `cpu.max` (`quota period`) | `cpu.cfs_period_us`, `cpu.cfs_quota_us` |
//! | OOM kills | `memory.events` `oom_kill` | `memory.oom_control` `oom_kill` |
//! | peak usage | `memory.peak` (Linux 5.19) | `memory.max_usage_in_bytes` |
//! | throttled | `memory.events` `high` | — |
//! | task limit hit | `pids.events` `max` | `pids.events` `max` |
//!
//! Pure functions of the limits, so that the v2 writes are tested here even on a host whose
//! v2 hierarchy has no controllers.

use super::hierarchy::Controller;
use super::value::Amount;
use super::Limits;

/// The CFS period we use: 100 ms, systemd's and the kernel's default.
const CPU_PERIOD_US: u64 = 100_000;

/// Which version of cgroups a controller is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}

/// One file write: `file` in the child's cgroup directory gets `value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Write {
    pub(crate) file: &'static str,
    pub(crate) value: String,
}

fn write(file: &'static str, value: impl ToString) -> Write {
    Write {
        file,
        value: value.to_string(),
    }
}

/// The controllers `limits` needs, each once, in a fixed order.
pub(crate) fn controllers(limits: &Limits) -> Vec<Controller> {
    let mut out = Vec::new();
    if limits.memory_max.is_some() || limits.memory_high.is_some() {
        out.push(Controller::Memory);
    }
    if limits.tasks_max.is_some() {
        out.push(Controller::Pids);
    }
    if limits.cpu_quota.is_some() {
        out.push(Controller::Cpu);
    }
    out
}

/// The writes that apply `limits`' part for `controller` in cgroups `version`, in order;
/// `Err`: a limit that version cannot express, and why.
pub(crate) fn writes(
    limits: &Limits,
    controller: Controller,
    version: Version,
) -> Result<Vec<Write>, String> {
    let v2 = |a: Amount| a.get().map_or_else(|| "max".to_string(), |n| n.to_string());
    let v1 = |a: Amount| a.get().map_or_else(|| "-1".to_string(), |n| n.to_string());
    let mut out = Vec::new();
    match (controller, version) {
        (Controller::Memory, Version::V2) => {
            if let Some(high) = limits.memory_high {
                out.push(write("memory.high", v2(high)));
            }
            if let Some(max) = limits.memory_max {
                out.push(write("memory.max", v2(max)));
            }
        }
        (Controller::Memory, Version::V1) => {
            if limits.memory_high.is_some() {
                return Err(
                    "MemoryHigh= needs the memory controller of cgroup v2 (memory.high); \
                            on this host it is on cgroup v1, whose soft limit only reclaims \
                            under global pressure and never throttles: use MemoryMax="
                        .into(),
                );
            }
            if let Some(max) = limits.memory_max {
                out.push(write("memory.limit_in_bytes", v1(max)));
            }
        }
        (Controller::Pids, _) => {
            if let Some(max) = limits.tasks_max {
                out.push(write("pids.max", v2(max)));
            }
        }
        (Controller::Cpu, Version::V2) => {
            if let Some(percent) = limits.cpu_quota {
                let quota = u64::from(percent) * CPU_PERIOD_US / 100;
                out.push(write("cpu.max", format!("{quota} {CPU_PERIOD_US}")));
            }
        }
        (Controller::Cpu, Version::V1) => {
            if let Some(percent) = limits.cpu_quota {
                let quota = u64::from(percent) * CPU_PERIOD_US / 100;
                out.push(write("cpu.cfs_period_us", CPU_PERIOD_US));
                out.push(write("cpu.cfs_quota_us", quota));
            }
        }
    }
    Ok(out)
}

/// What the kernel counted in one controller's files, read before the cgroup is removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) oom_kills: Option<u64>,
    pub(crate) high_events: Option<u64>,
    pub(crate) peak: Option<u64>,
    pub(crate) tasks_max_hits: Option<u64>,
}

impl Counts {
    /// Adds what another hierarchy counted (each field is read in one place only).
    pub(crate) fn merge(&mut self, other: Counts) {
        self.oom_kills = self.oom_kills.or(other.oom_kills);
        self.high_events = self.high_events.or(other.high_events);
        self.peak = self.peak.or(other.peak);
        self.tasks_max_hits = self.tasks_max_hits.or(other.tasks_max_hits);
    }
}

/// Reads the counts of `controller` from a cgroup through `read` (file name → contents).
pub(crate) fn counts(
    controller: Controller,
    version: Version,
    read: impl Fn(&str) -> Option<String>,
) -> Counts {
    let number = |file: &str| read(file).and_then(|t| t.trim().parse().ok());
    let mut c = Counts::default();
    match (controller, version) {
        (Controller::Memory, Version::V2) => {
            let events = read("memory.events").unwrap_or_default();
            c.oom_kills = key(&events, "oom_kill");
            c.high_events = key(&events, "high");
            c.peak = number("memory.peak");
        }
        (Controller::Memory, Version::V1) => {
            c.oom_kills = read("memory.oom_control").and_then(|t| key(&t, "oom_kill"));
            c.peak = number("memory.max_usage_in_bytes");
        }
        (Controller::Pids, _) => {
            c.tasks_max_hits = read("pids.events").and_then(|t| key(&t, "max"));
        }
        (Controller::Cpu, _) => {}
    }
    c
}

/// The number after `name ` in a flat-keyed file (`memory.events`, `memory.oom_control`).
fn key(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        let mut l = Limits::new();
        l.set("memory-max", "64M").unwrap();
        l.set("memory-high", "48M").unwrap();
        l.set("tasks-max", "50").unwrap();
        l.set("cpu-quota", "50%").unwrap();
        l
    }

    fn files(w: Vec<Write>) -> Vec<(String, String)> {
        w.into_iter()
            .map(|w| (w.file.to_string(), w.value))
            .collect()
    }

    #[test]
    fn v2_writes() {
        let l = limits();
        let pair = |f: &str, v: &str| (f.to_string(), v.to_string());
        assert_eq!(
            files(writes(&l, Controller::Memory, Version::V2).unwrap()),
            vec![
                pair("memory.high", "50331648"),
                pair("memory.max", "67108864")
            ]
        );
        assert_eq!(
            files(writes(&l, Controller::Pids, Version::V2).unwrap()),
            vec![pair("pids.max", "50")]
        );
        assert_eq!(
            files(writes(&l, Controller::Cpu, Version::V2).unwrap()),
            vec![pair("cpu.max", "50000 100000")]
        );
        let mut inf = Limits::new();
        inf.set("memory-max", "infinity").unwrap();
        inf.set("tasks-max", "infinity").unwrap();
        assert_eq!(
            files(writes(&inf, Controller::Memory, Version::V2).unwrap()),
            vec![pair("memory.max", "max")]
        );
        assert_eq!(
            files(writes(&inf, Controller::Pids, Version::V2).unwrap()),
            vec![pair("pids.max", "max")]
        );
    }

    #[test]
    fn v1_writes_and_memory_high_refused() {
        let l = limits();
        let e = writes(&l, Controller::Memory, Version::V1).unwrap_err();
        assert!(e.contains("MemoryHigh="), "{e}");
        let mut m = Limits::new();
        m.set("memory-max", "64M").unwrap();
        m.set("cpu-quota", "200%").unwrap();
        let pair = |f: &str, v: &str| (f.to_string(), v.to_string());
        assert_eq!(
            files(writes(&m, Controller::Memory, Version::V1).unwrap()),
            vec![pair("memory.limit_in_bytes", "67108864")]
        );
        assert_eq!(
            files(writes(&m, Controller::Cpu, Version::V1).unwrap()),
            vec![
                pair("cpu.cfs_period_us", "100000"),
                pair("cpu.cfs_quota_us", "200000")
            ]
        );
        assert_eq!(controllers(&m), vec![Controller::Memory, Controller::Cpu]);
    }

    #[test]
    fn counts_from_either_version() {
        let v2 = |f: &str| match f {
            "memory.events" => Some("low 0\nhigh 7\nmax 12\noom 1\noom_kill 1\n".into()),
            "memory.peak" => Some("67100672\n".into()),
            _ => None,
        };
        let c = counts(Controller::Memory, Version::V2, v2);
        assert_eq!(
            (c.oom_kills, c.high_events, c.peak),
            (Some(1), Some(7), Some(67_100_672))
        );
        let v1 = |f: &str| match f {
            "memory.oom_control" => Some("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n".into()),
            "memory.max_usage_in_bytes" => Some("67108864\n".into()),
            _ => None,
        };
        let c = counts(Controller::Memory, Version::V1, v1);
        assert_eq!(
            (c.oom_kills, c.high_events, c.peak),
            (Some(2), None, Some(64 << 20))
        );
        let pids = |_: &str| Some("max 3\n".to_string());
        assert_eq!(
            counts(Controller::Pids, Version::V1, pids).tasks_max_hits,
            Some(3)
        );
    }
}
