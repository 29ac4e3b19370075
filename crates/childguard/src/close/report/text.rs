//! The close report's one-line text form (`Display`), with its notes: what `--report text`
//! prints.

use std::fmt;
use std::time::Duration;

use super::{describe_status, CloseReport, Ending, MemoryRelease};

struct Ms(Duration);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "+{:.1}ms", self.0.as_secs_f64() * 1000.0)
    }
}

impl fmt::Display for Ending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ending::NoChild => f.write_str("no child"),
            Ending::BeforeClose => f.write_str("before close"),
            Ending::Kill { signal } => write!(f, "kill({signal})"),
            Ending::Eof => f.write_str("EOF"),
            Ending::Rung { index, signal } => write!(f, "rung {index} {signal}"),
            Ending::Outlived => f.write_str("outlived the ladder"),
            Ending::InBackground => f.write_str("left to the background reaper"),
        }
    }
}

impl fmt::Display for CloseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.program, self.pid) {
            (Some(p), Some(pid)) => write!(f, "{p}[{pid}]:")?,
            (Some(p), None) => write!(f, "{p}:")?,
            (None, _) => f.write_str("socket:")?,
        }
        // The timed steps, sorted by when they happened (a stable sort: equal times keep the
        // order shutdown, signals, exit, reap).
        let mut timed: Vec<(Duration, String)> = Vec::new();
        if let Some(at) = self.shutdown {
            timed.push((at, format!("shutdown {}", Ms(at))));
        }
        for s in &self.signals {
            let group = match (s.to_rest, s.to_cgroup, s.to_group) {
                (true, _, _) => " (to those left)",
                (false, true, _)
                    if self.containment.as_ref().is_some_and(|c| {
                        c.backend == crate::process::containment::Backend::Container
                    }) =>
                {
                    " (container)"
                }
                (false, true, _) if self.cgroup.is_none() => " (tree)",
                (false, true, _) => " (cgroup)",
                (false, false, true) => " (group)",
                (false, false, false) => "",
            };
            let reached = match s.reached {
                Some(n) if s.to_cgroup || s.to_rest => format!(" reached {n}"),
                _ => String::new(),
            };
            timed.push((s.at, format!("{}{group}{reached} {}", s.signal, Ms(s.at))));
        }
        for s in &self.skipped {
            let part = format!("{} {} skipped: ignored by the server", s.signal, Ms(s.at));
            timed.push((s.at, part));
        }
        if let Some(at) = self.exited {
            let status = self
                .status
                .as_ref()
                .map(describe_status)
                .unwrap_or_else(|| "status lost".into());
            let default = match self.default_action {
                true => ": default action, no handler ran",
                false => "",
            };
            let oom = self.cgroup.as_ref().and_then(|cg| cg.limits.as_ref());
            let oom = match oom.and_then(|l| l.result) {
                Some(result) => format!(": {result}"),
                None => String::new(),
            };
            timed.push((
                at,
                format!(
                    "exited {} ({status}{oom}, ended by {}{default})",
                    Ms(at),
                    self.ended_by
                ),
            ));
        }
        if let Some(at) = self.reaped {
            timed.push((at, format!("reaped {}", Ms(at))));
        }
        timed.sort_by_key(|&(at, _)| at);
        let mut parts: Vec<String> = timed.into_iter().map(|(_, part)| part).collect();
        if self.exited.is_none() && self.pid.is_some() {
            parts.push(format!("not exited ({})", self.ended_by));
        }
        match &self.memory_release {
            Some(MemoryRelease::Released { took }) => parts.push(format!(
                "memory released in {:.1}ms",
                took.as_secs_f64() * 1000.0
            )),
            Some(MemoryRelease::Skipped { reason }) => {
                parts.push(format!("no memory release ({reason})"))
            }
            Some(MemoryRelease::Unfinished) => parts.push("memory release still running".into()),
            None => {}
        }
        if self.handed_to_reaper {
            parts.push("handed to background reaper".into());
        }
        if let Some(notify) = &self.notify {
            parts.extend(notify.watchdog.first().cloned());
        }
        if !self.escaped.is_empty() {
            parts.push(format!(
                "escaped the group (setsid), still running {:?}",
                self.escaped
            ));
        }
        if let Some(cg) = &self.cgroup {
            parts.push(match (cg.removed, cg.members_left) {
                (true, _) => format!("cgroup {} emptied and removed", cg.path.display()),
                (false, 0) if !self.handed_to_reaper => format!(
                    "cgroup {} emptied but not removed (see the notes)",
                    cg.path.display()
                ),
                (false, n) => format!(
                    "cgroup {} still has {n} member(s); the reaper removes it once empty",
                    cg.path.display()
                ),
            });
        }
        if let Some(limits) = self.cgroup.as_ref().and_then(|cg| cg.limits.as_ref()) {
            parts.push(limits.to_string());
        }
        parts.extend(self.containment.as_ref().and_then(|c| c.described()));
        if let Some(why) = &self.containment_fallback {
            parts.push(format!("not contained ({why}): process group only"));
        }
        if !self.group_survivors.is_empty() {
            parts.push(format!("group survivors {:?}", self.group_survivors));
        }
        if self.socket_may_be_held {
            parts.push("socket may still be held by a descendant".into());
        }
        write!(
            f,
            " {}; total {:.1}ms",
            parts.join(", "),
            self.total.as_secs_f64() * 1000.0
        )
    }
}
