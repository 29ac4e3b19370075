//! The probe's output: a table for people, or one JSON object (`--json`) whose key
//! `recommended_ladder` holds the ladder text — that key is the contract.

use std::fmt::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use serde_json::{json, Value};

use super::measure::RunResult;
use super::recommend::{
    self, Recommendation, SignalResult, CONVENTIONAL, GRACE_FLOOR, GRACE_MULTIPLE, KILL_FLOOR,
};
use super::settle::{self, Settled};
use super::ProbeOptions;
use childguard::Signal;

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

fn status_text(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(s)) => format!(
            "signal {}",
            childguard::Signal::from_raw(s).map_or_else(|| s.to_string(), |s| s.to_string())
        ),
        _ => "?".into(),
    }
}

/// How the server was contained, in words (from the first run; all runs are made alike).
fn containment(results: &[SignalResult]) -> String {
    let first = results.iter().flat_map(|r| &r.runs).next();
    match first {
        Some(RunResult {
            cgroup: Some(dir), ..
        }) => format!("contained: a cgroup of its own ({})", parent_of(dir)),
        Some(RunResult {
            fallback: Some(why),
            ..
        }) => format!(
            "NOT contained (no cgroup: {why}); a process group instead — what is left in the \
             cgroup is not measured"
        ),
        _ => "NOT contained (no cgroup); a process group instead — what is left in the cgroup \
              is not measured"
            .into(),
    }
}

fn parent_of(dir: &std::path::Path) -> String {
    dir.parent().map_or_else(
        || dir.display().to_string(),
        |p| format!("under {}", p.display()),
    )
}

/// SERVER's program name, as the settle line names it.
fn server_name(options: &ProbeOptions) -> String {
    let program = std::path::Path::new(&options.command[0]);
    program
        .file_name()
        .unwrap_or(program.as_os_str())
        .to_string_lossy()
        .into_owned()
}

/// Without `--ready`: what the runs waited for before their signal (the slowest run's wait,
/// and the range over the runs), and a warning when a run could only guess.
fn settle_lines(
    options: &ProbeOptions,
    results: &[SignalResult],
) -> (Option<String>, Option<String>) {
    let settled: Vec<&Settled> = results
        .iter()
        .flat_map(|r| &r.runs)
        .filter_map(|r| r.settled.as_ref())
        .collect();
    let Some(slowest) = settled.iter().max_by_key(|s| s.waited) else {
        return (None, None);
    };
    let server = server_name(options);
    let fastest = settled.iter().map(|s| s.waited).min().unwrap_or_default();
    let line = format!(
        "{} (the slowest of {} run(s); the fastest waited {:.2} s)",
        slowest.describe(&server),
        settled.len(),
        fastest.as_secs_f64()
    );
    let guesses: Vec<&&Settled> = settled.iter().filter(|s| !s.sure).collect();
    let warning = guesses.first().map(|first| {
        format!(
            "in {} of {} run(s) {}: the recommendation may be wrong; pass --ready (e.g. \
             unix:PATH, tcp:HOST:PORT, notify), or a longer --settle-timeout",
            guesses.len(),
            settled.len(),
            first.describe(&server)
        )
    });
    (Some(line), warning)
}

fn rule() -> String {
    let order: Vec<String> = CONVENTIONAL.iter().map(|s| s.to_string()).collect();
    format!(
        "clean = exited within the window by its own hand (an exit code, or its handler \
         re-raised the signal), nothing left in its cgroup, in every run; graces {GRACE_MULTIPLE}x \
         the slowest exit rounded up to whole seconds, at least {}s (KILL: at least {}s); \
         fastest first, equal graces in the order {}",
        GRACE_FLOOR.as_secs(),
        KILL_FLOOR.as_secs(),
        order.join(",")
    )
}

fn command_text(options: &ProbeOptions) -> String {
    options
        .command
        .iter()
        .map(|a| quoted(&a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A word as a shell would need it: as it is when plain, else in single quotes.
fn quoted(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    match plain {
        true => word.to_string(),
        false => format!("'{}'", word.replace('\'', "'\\''")),
    }
}

/// The human table.
pub fn table(
    options: &ProbeOptions,
    results: &[SignalResult],
    rec: &Recommendation,
    inherited: &[Signal],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "probe of: {}", command_text(options));
    if !inherited.is_empty() {
        let _ = writeln!(out, "WARNING: {}", inherited_warning(inherited));
    }
    let (settle, settle_warning) = settle_lines(options, results);
    if let Some(warning) = &settle_warning {
        let _ = writeln!(out, "WARNING: {warning}");
    }
    let ready: Vec<&str> = options.ready.iter().map(|(t, _)| t.as_str()).collect();
    let _ = writeln!(
        out,
        "ready: {}; client: {}; {} run(s) per signal; window {} after the signal",
        if ready.is_empty() {
            format!(
                "no --ready: settled (a listener, signal dispositions unchanged for {} ms; \
                 --settle-timeout {})",
                settle::QUIET.as_millis(),
                humantime::format_duration(options.settle_timeout)
            )
        } else {
            ready.join(" and ")
        },
        options.client.as_ref().map_or("none", |(t, _)| t.as_str()),
        options.runs,
        humantime::format_duration(options.window)
    );
    if let Some(settle) = &settle {
        let _ = writeln!(out, "{settle}");
    }
    let _ = writeln!(out, "{}", containment(results));
    let _ = writeln!(
        out,
        "\n| signal | disposition | outcome | exit time median / max | status | kept serving | STOPPING=1 | left in cgroup at exit / after | clean |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for r in results {
        let per_run = |f: &dyn Fn(&RunResult) -> String| -> String {
            let mut seen: Vec<String> = Vec::new();
            for run in &r.runs {
                let v = f(run);
                if !seen.contains(&v) {
                    seen.push(v);
                }
            }
            seen.join(" / ")
        };
        let times = match (r.median, r.max) {
            (Some(m), Some(x)) => format!("{} / {} ms", ms(m), ms(x)),
            _ => "—".into(),
        };
        let exited = r.runs.iter().filter(|x| x.status.is_some()).count();
        let times = match exited == r.runs.len() {
            true => times,
            false => format!("{times} ({exited} of {} exited)", r.runs.len()),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.signal,
            per_run(&|x| x.disposition.word().into()),
            r.verdict,
            times,
            per_run(&|x| x.status.map_or("running".into(), status_text)),
            per_run(&|x| match (x.status, x.kept_serving) {
                (Some(_), _) => "—".into(),
                (None, Some(true)) => "yes".into(),
                (None, Some(false)) => "no".into(),
                (None, None) => "not re-checkable".into(),
            }),
            per_run(&|x| match x.stopping {
                Some(true) => "yes".into(),
                Some(false) => "no".into(),
                None => "—".into(),
            }),
            per_run(&|x| match (&x.cgroup, x.status) {
                (None, _) => "not contained".into(),
                (Some(_), None) => "—".into(),
                (Some(_), Some(_)) => format!("{} / {}", x.left_at_exit, x.left_after_settle),
            }),
            if r.clean { "yes" } else { "no" },
        );
    }
    let _ = writeln!(out, "\nrecommended ladder: {}", rec.ladder);
    if rec.clean.is_empty() {
        let _ = writeln!(out, "no signal ended it cleanly: KILL alone");
    }
    let _ = writeln!(out, "({})", rule());
    out
}

fn run_json(signal: childguard::Signal, run: &RunResult) -> Value {
    let (outcome, clean) = recommend::outcome(signal, run);
    json!({
        "settle": run.settled.as_ref().map(|s| json!({
            "waited_ms": ms(s.waited),
            "unchanged_ms": ms(s.unchanged),
            "listener": s.listener.as_ref().map(|l| l.describe()),
            "changes": s.changes,
            "settled": s.sure,
        })),
        "disposition": run.disposition.word(),
        "outcome": outcome,
        "clean": clean,
        "exited": run.status.is_some(),
        "exit_ms": run.exited_after.map(ms),
        "status": run.status.map(status_text),
        "exit_code": run.status.and_then(|s| s.code()),
        "exit_signal": run.status.and_then(|s| s.signal()),
        "kept_serving": run.kept_serving,
        "stopping": run.stopping,
        "cgroup": run.cgroup.as_ref().map(|p| p.display().to_string()),
        "left_in_cgroup_at_exit": run.cgroup.as_ref().and(run.status).map(|_| run.left_at_exit),
        "left_in_cgroup_after": run.cgroup.as_ref().and(run.status).map(|_| run.left_after_settle),
        "kill_close_ms": run.kill_close.map(ms),
        "left_after_close": run.left_after_close,
    })
}

fn inherited_warning(inherited: &[Signal]) -> String {
    let names: Vec<String> = inherited.iter().map(|s| s.to_string()).collect();
    format!(
        "childguard itself runs with {} ignored (SigIgn; e.g. started as a shell's background \
         job `… &`, which ignores INT and QUIT): the server inherits that unless it installs a \
         handler, so what is measured for {} may not be what a service manager would see",
        names.join(","),
        if names.len() == 1 { "it" } else { "them" }
    )
}

/// The JSON object (one line).
pub fn json(
    options: &ProbeOptions,
    results: &[SignalResult],
    rec: &Recommendation,
    inherited: &[Signal],
) -> String {
    let signals: Vec<Value> = results
        .iter()
        .map(|r| {
            json!({
                "signal": r.signal.to_string(),
                "clean": r.clean,
                "verdict": r.verdict,
                "median_ms": r.median.map(ms),
                "max_ms": r.max.map(ms),
                "grace_s": r.grace.map(|g| g.as_secs()),
                "runs": r.runs.iter().map(|run| run_json(r.signal, run)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let contained = results
        .iter()
        .flat_map(|r| &r.runs)
        .next()
        .is_some_and(|r| r.cgroup.is_some());
    let (settle, settle_warning) = settle_lines(options, results);
    let value = json!({
        "server": options.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
        "ready": options.ready.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        "client": options.client.as_ref().map(|(t, _)| t.as_str()),
        "settle_timeout_ms": options.ready.is_empty().then(|| ms(options.settle_timeout)),
        "settle": settle,
        "settle_warning": settle_warning,
        "runs": options.runs,
        "window_ms": ms(options.window),
        "contained": contained,
        "containment": containment(results),
        "signals": signals,
        "clean_signals": rec.clean.iter().map(|(s, _)| s.to_string()).collect::<Vec<_>>(),
        "recommended_ladder": rec.ladder,
        "kill_grace_s": rec.kill_grace.as_secs(),
        "rule": rule(),
        "inherited_ignored": inherited.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        "warning": (!inherited.is_empty()).then(|| inherited_warning(inherited)),
    });
    format!("{value}\n")
}
