//! Running `cg-signal-driver` (a process of its own for faults that would disturb the test
//! process) and reading what it printed.

use std::process::Command;

use crate::bin;

/// Runs `cg-signal-driver MODE` and returns its stdout, asserting it exited 0 and ended clean:
/// the reaper drained, no child of the driver left (alive or zombie).
///
/// The driver leads a process group of its own, so that its watchdog (in modes where a step
/// may hang) can kill it together with its children — which would otherwise hold the output
/// pipes open and keep this call waiting.
pub fn driver(mode: &str) -> String {
    driver_with(&[mode])
}

/// [`driver`] with arguments after the mode.
pub fn driver_with(args: &[&str]) -> String {
    use std::os::unix::process::CommandExt;
    let mode = args.join(" ");
    let out = Command::new(bin("cg-signal-driver"))
        .args(args)
        .process_group(0)
        .output()
        .expect("running cg-signal-driver");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "cg-signal-driver {mode}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("DRAINED true") && stdout.contains("END children=0 "),
        "cg-signal-driver {mode} left something behind:\n{stdout}"
    );
    stdout
}

/// `KEY=value` from a driver line.
pub fn value<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The first line that starts with `WORD tag=TAG` (or `WORD TAG`), or a panic showing `out`.
pub fn line<'a>(out: &'a str, word: &str, tag: &str) -> &'a str {
    out.lines()
        .find(|l| {
            l.starts_with(&format!("{word} tag={tag} ")) || l.starts_with(&format!("{word} {tag} "))
        })
        .unwrap_or_else(|| panic!("no `{word} {tag}` line:\n{out}"))
}

/// The JSON report the driver printed as `REPORT tag {…}`.
pub fn driver_report(stdout: &str, tag: &str) -> serde_json::Value {
    let prefix = format!("REPORT {tag} ");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no report {tag}:\n{stdout}"));
    serde_json::from_str(line).expect("report JSON")
}

/// The signal names of a report's `signals`, in order.
pub fn signal_names(report: &serde_json::Value) -> Vec<String> {
    report["signals"]
        .as_array()
        .map(|signals| {
            signals
                .iter()
                .filter_map(|s| s["signal"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
