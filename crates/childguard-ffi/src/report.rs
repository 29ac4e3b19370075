//! `cg_report`: the close report as a C struct, and as JSON.

use std::ffi::{c_char, CString};
use std::os::unix::process::ExitStatusExt;

use childguard::{CloseReport, Ending, MemoryRelease};

use crate::error::{guard, Failure};
use crate::ptr;

/// A rung the close skipped because the child ignored its signal (`cg_builder_skip_ignored`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cg_skipped_rung {
    /// The rung's signal number.
    pub signal: i32,
    /// When it was due and skipped, in ms since the close began.
    pub at_ms: f64,
    /// The rung's index in the ladder.
    pub rung: usize,
}

/// What ended the child, as the close saw it.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum cg_ending {
    /// The handle had no child.
    CG_ENDING_NO_CHILD = 0,
    /// The child had already exited when the close began.
    CG_ENDING_BEFORE_CLOSE = 1,
    /// The child exited after a `cg_kill()` (`ended_by_signal` says which signal).
    CG_ENDING_KILL = 2,
    /// The child exited on its own after the socket was shut down, before any signal.
    CG_ENDING_EOF = 3,
    /// The child exited after ladder rung `ended_by_rung` (signal `ended_by_signal`).
    CG_ENDING_RUNG = 4,
    /// The child outlived the last rung; the background reaper owns it now.
    CG_ENDING_OUTLIVED = 5,
    /// The close returned early; the background reaper climbs the rest and reaps.
    CG_ENDING_IN_BACKGROUND = 6,
    /// An ending this version of the C API does not know (see `summary`).
    CG_ENDING_OTHER = 7,
}

/// What became of the `process_mrelease(2)` after a `SIGKILL` rung.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum cg_memory_release {
    /// Not asked for (no `SIGKILL` rung, or a small child).
    CG_MEMORY_RELEASE_NONE = 0,
    /// Released; the call took `memory_release_ms`.
    CG_MEMORY_RELEASE_RELEASED = 1,
    /// Skipped or failed harmlessly; `memory_release_reason` says why.
    CG_MEMORY_RELEASE_SKIPPED = 2,
    /// Still running when the close returned (a helper thread finishes it).
    CG_MEMORY_RELEASE_UNFINISHED = 3,
}

/// One signal the close sent.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct cg_sent_signal {
    /// The signal number (`SIGTERM` …).
    pub signal: i32,
    /// When, in milliseconds since the close began.
    pub at_ms: f64,
    /// The ladder rung it belongs to (0-based).
    pub rung: usize,
    /// Sent to the whole process group.
    pub to_group: bool,
    /// Sent to every process in the child's cgroup.
    pub to_cgroup: bool,
    /// How many processes it reached, or -1 when not known (a process group).
    pub reached: i64,
}

/// The timeline of one close (from `cg_close()`). Times are milliseconds since the close
/// began; -1 means "did not happen".
///
/// Ownership: the report and everything its pointers point to belong to the library until
/// `cg_report_free()`, which frees them all; pointers are NULL when there is nothing (a
/// `*_len` of 0 may come with a NULL array). Read-only: do not write to it.
/// Thread-safety: a report is immutable; any number of threads may read it and call
/// `cg_report_json()` on it at once, but none while another frees it.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug)]
pub struct cg_report {
    /// The report as one line, e.g. `nbdkit[4242]: shutdown +0.0ms, HUP +0.1ms, exited
    /// +1.2ms (exit 0, ended by rung 0 HUP), reaped +1.3ms; total 1.3ms`.
    pub summary: *const c_char,
    /// The program spawned (NULL: a socket-only handle).
    pub program: *const c_char,
    /// The child's pid (-1: none).
    pub pid: i32,
    /// What ended the child.
    pub ended_by: cg_ending,
    /// With `CG_ENDING_KILL` / `CG_ENDING_RUNG`: the signal; 0 otherwise.
    pub ended_by_signal: i32,
    /// With `CG_ENDING_RUNG`: the rung's index; -1 otherwise.
    pub ended_by_rung: i64,
    /// The exit code if the child exited normally, else -1.
    pub exit_code: i32,
    /// The signal that killed the child, else 0.
    pub exit_signal: i32,
    /// Whether the exit status is known (`exit_code`/`exit_signal` are meaningful).
    pub status_known: bool,
    /// When `shutdown(SHUT_RDWR)` was done on the socket (-1: no socket).
    pub shutdown_ms: f64,
    /// When the exit was seen (-1: not seen).
    pub exited_ms: f64,
    /// When the child was reaped (-1: not by the close).
    pub reaped_ms: f64,
    /// How long the close took.
    pub total_ms: f64,
    /// The signals sent by the ladder (and `cg_kill` rungs resumed), in order.
    pub signals: *const cg_sent_signal,
    /// How many `signals`.
    pub signals_len: usize,
    /// The child outlived the last rung (e.g. uninterruptible sleep).
    pub outlived_ladder: bool,
    /// The child (or its group) was handed to the background reaper.
    pub handed_to_reaper: bool,
    /// A descendant may still hold the socket (see the Rust docs of `CloseReport`).
    pub socket_may_be_held: bool,
    /// Members of the child's process group still alive when the close returned.
    pub group_survivors: *const u32,
    /// How many `group_survivors`.
    pub group_survivors_len: usize,
    /// Descendants that left the group (`setsid`) and were still alive at the end.
    pub escaped: *const u32,
    /// How many `escaped`.
    pub escaped_len: usize,
    /// The memory release after a `SIGKILL` rung.
    pub memory_release: cg_memory_release,
    /// With `CG_MEMORY_RELEASE_RELEASED`: how long the call took; -1 otherwise.
    pub memory_release_ms: f64,
    /// With `CG_MEMORY_RELEASE_SKIPPED`: why; NULL otherwise.
    pub memory_release_reason: *const c_char,
    /// With `cg_builder_capture`: the tail of the child's output (NULL without capture).
    pub output_tail: *const c_char,
    /// With containment: the child's cgroup directory (NULL: not contained).
    pub cgroup_path: *const c_char,
    /// Whether the close removed the cgroup.
    pub cgroup_removed: bool,
    /// Processes still in the cgroup when the close returned.
    pub cgroup_members_left: usize,
    /// Rungs skipped because the child ignored their signal (`skipped_len` entries; NULL when
    /// none), in ladder order: nothing was sent for them and their grace was not spent.
    pub skipped: *const cg_skipped_rung,
    /// Number of entries in `skipped`.
    pub skipped_len: usize,
    /// The child died of the signal of the rung that ended it, which it had no handler for:
    /// the kernel's default action ended it, no handler ran (`summary` says so too).
    pub default_action: bool,
    /// With `cg_builder_limit`: the limits in systemd's spelling (`"MemoryMax=64M
    /// TasksMax=50"`); NULL without limits.
    pub limits: *const c_char,
    /// The kernel's OOM killer killed a process of the cgroup (systemd's result `oom-kill`).
    pub oom_kill: bool,
    /// How many processes the OOM killer killed in the cgroup.
    pub oom_kills: u64,
    /// The most memory the cgroup used, in bytes; 0: not counted (no memory limit).
    pub memory_peak: u64,
    /// Forks refused at the tasks limit; 0 without one.
    pub tasks_max_hits: u64,
}

/// A report as allocated: the C view first (so a `*mut cg_report` is a `*mut Owned`), then the
/// memory its pointers point into, and the Rust report for `cg_report_json`. Heap buffers do
/// not move when the `Owned` is boxed, so the pointers stay valid until it is dropped.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Owned {
    public: cg_report,
    strings: Vec<CString>,
    signals: Vec<cg_sent_signal>,
    skipped: Vec<cg_skipped_rung>,
    survivors: Vec<u32>,
    escaped: Vec<u32>,
    report: CloseReport,
}

/// A C string of `text`, cut at a NUL if it has one (a program's output may).
fn c_string(text: &str) -> CString {
    let end = text.find('\0').unwrap_or(text.len());
    CString::new(&text[..end]).unwrap_or_default()
}

fn ms(d: Option<std::time::Duration>) -> f64 {
    d.map_or(-1.0, |d| d.as_secs_f64() * 1000.0)
}

impl Owned {
    /// Builds the C report and gives it to the caller.
    pub(crate) fn give(report: CloseReport) -> *mut cg_report {
        let mut strings = Vec::new();
        let mut keep = |text: Option<&str>| -> *const c_char {
            match text {
                None => std::ptr::null(),
                Some(text) => {
                    let s = c_string(text);
                    let p = s.as_ptr();
                    strings.push(s);
                    p
                }
            }
        };
        let summary = keep(Some(&report.to_string()));
        let program = keep(report.program.as_deref());
        let output_tail = keep(report.output_tail.as_deref());
        let (memory_release, memory_release_ms, memory_release_reason) =
            match &report.memory_release {
                None => (
                    cg_memory_release::CG_MEMORY_RELEASE_NONE,
                    -1.0,
                    std::ptr::null(),
                ),
                Some(MemoryRelease::Released { took }) => (
                    cg_memory_release::CG_MEMORY_RELEASE_RELEASED,
                    took.as_secs_f64() * 1000.0,
                    std::ptr::null(),
                ),
                Some(MemoryRelease::Skipped { reason }) => (
                    cg_memory_release::CG_MEMORY_RELEASE_SKIPPED,
                    -1.0,
                    keep(Some(reason)),
                ),
                Some(_) => (
                    cg_memory_release::CG_MEMORY_RELEASE_UNFINISHED,
                    -1.0,
                    std::ptr::null(),
                ),
            };
        let cgroup_text = report
            .cgroup
            .as_ref()
            .map(|cg| cg.path.to_string_lossy().into_owned());
        let cgroup_path = keep(cgroup_text.as_deref());
        let limits = report.cgroup.as_ref().and_then(|cg| cg.limits.clone());
        let limits_text = keep(limits.as_ref().map(|l| l.limits.to_string()).as_deref());
        let (ended_by, ended_by_signal, ended_by_rung) = match report.ended_by {
            Ending::NoChild => (cg_ending::CG_ENDING_NO_CHILD, 0, -1),
            Ending::BeforeClose => (cg_ending::CG_ENDING_BEFORE_CLOSE, 0, -1),
            Ending::Kill { signal } => (cg_ending::CG_ENDING_KILL, signal.as_raw(), -1),
            Ending::Eof => (cg_ending::CG_ENDING_EOF, 0, -1),
            Ending::Rung { index, signal } => (
                cg_ending::CG_ENDING_RUNG,
                signal.as_raw(),
                i64::try_from(index).unwrap_or(i64::MAX),
            ),
            Ending::Outlived => (cg_ending::CG_ENDING_OUTLIVED, 0, -1),
            Ending::InBackground => (cg_ending::CG_ENDING_IN_BACKGROUND, 0, -1),
            _ => (cg_ending::CG_ENDING_OTHER, 0, -1),
        };
        let signals: Vec<cg_sent_signal> = report
            .signals
            .iter()
            .map(|s| cg_sent_signal {
                signal: s.signal.as_raw(),
                at_ms: s.at.as_secs_f64() * 1000.0,
                rung: s.rung,
                to_group: s.to_group,
                to_cgroup: s.to_cgroup,
                reached: s
                    .reached
                    .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX)),
            })
            .collect();
        let skipped: Vec<cg_skipped_rung> = report
            .skipped
            .iter()
            .map(|s| cg_skipped_rung {
                signal: s.signal.as_raw(),
                at_ms: s.at.as_secs_f64() * 1000.0,
                rung: s.rung,
            })
            .collect();
        let survivors = report.group_survivors.clone();
        let escaped = report.escaped.clone();
        let array = |len: usize, p: *const u32| if len == 0 { std::ptr::null() } else { p };
        let public = cg_report {
            summary,
            program,
            pid: report.pid.and_then(|p| i32::try_from(p).ok()).unwrap_or(-1),
            ended_by,
            ended_by_signal,
            ended_by_rung,
            exit_code: report.status.and_then(|s| s.code()).unwrap_or(-1),
            exit_signal: report.status.and_then(|s| s.signal()).unwrap_or(0),
            status_known: report.status.is_some(),
            shutdown_ms: ms(report.shutdown),
            exited_ms: ms(report.exited),
            reaped_ms: ms(report.reaped),
            total_ms: report.total.as_secs_f64() * 1000.0,
            signals: if signals.is_empty() {
                std::ptr::null()
            } else {
                signals.as_ptr()
            },
            signals_len: signals.len(),
            outlived_ladder: report.outlived_ladder,
            handed_to_reaper: report.handed_to_reaper,
            socket_may_be_held: report.socket_may_be_held,
            group_survivors: array(survivors.len(), survivors.as_ptr()),
            group_survivors_len: survivors.len(),
            escaped: array(escaped.len(), escaped.as_ptr()),
            escaped_len: escaped.len(),
            memory_release,
            memory_release_ms,
            memory_release_reason,
            output_tail,
            cgroup_path,
            cgroup_removed: report.cgroup.as_ref().is_some_and(|cg| cg.removed),
            cgroup_members_left: report.cgroup.as_ref().map_or(0, |cg| cg.members_left),
            skipped: if skipped.is_empty() {
                std::ptr::null()
            } else {
                skipped.as_ptr()
            },
            skipped_len: skipped.len(),
            default_action: report.default_action,
            limits: limits_text,
            oom_kill: limits
                .as_ref()
                .is_some_and(|l| l.result == Some("oom-kill")),
            oom_kills: limits.as_ref().map_or(0, |l| l.oom_kills),
            memory_peak: limits.as_ref().and_then(|l| l.memory_peak).unwrap_or(0),
            tasks_max_hits: limits.as_ref().and_then(|l| l.tasks_max_hits).unwrap_or(0),
        };
        let owned = ptr::give(Owned {
            public,
            strings,
            signals,
            skipped,
            survivors,
            escaped,
            report,
        });
        // `public` is the first field of a #[repr(C)] struct: same address.
        owned.cast::<cg_report>()
    }
}

/// The report as JSON (the Rust `CloseReport`'s serde form: times in `*_ms` fields, `ended_by`
/// as `{"kind": "rung", "index": 0, "signal": "TERM"}`, `status` as `{"code", "signal"}` …).
///
/// Returns NULL on error (NULL report). Ownership: the string is the caller's; free it with
/// `cg_string_free()`. Thread-safety: any number of threads at once on the same report.
#[no_mangle]
pub extern "C" fn cg_report_json(report: *const cg_report) -> *mut c_char {
    guard(
        "cg_report_json",
        |_| std::ptr::null_mut(),
        || {
            let owned = ptr::borrow_report(report, "report")?;
            let json = serde_json::to_string(&owned.report).map_err(|e| {
                Failure::new(
                    crate::error::cg_status::CG_ERR_OTHER,
                    format!("serialising: {e}"),
                )
            })?;
            Ok(ptr::give_string(c_string(&json)))
        },
    )
}

/// Frees a string returned by `cg_report_json()`. NULL is a no-op.
///
/// Thread-safety: any thread, once per string.
#[no_mangle]
pub extern "C" fn cg_string_free(s: *mut c_char) {
    guard(
        "cg_string_free",
        |_| (),
        || {
            ptr::free_string(s);
            Ok(())
        },
    )
}
