//! Helpers of `tests/tests/probe.rs`: running `childguard probe` (the `cg-childguard` binary)
//! and checking it left nothing, and reading its `--json` report.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use childguard::{Ladder, Signal};

use crate::cgroups::own_cgroup_dir;
use crate::postgres::find_peer;
use crate::{bin, is_alive, proc_state};

pub fn peer(test: &str, name: &str, dirs: &[&str], install: &str) -> Option<PathBuf> {
    let candidates = dirs.iter().map(|d| Path::new(d).join(name)).collect();
    find_peer(test, name, candidates, install)
}

pub fn probe_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("cg-childguard"));
    cmd.arg("probe").args(args).stdin(Stdio::null());
    cmd
}

/// Runs a probe to completion, then checks that it left nothing: no process whose command
/// line holds `mark` (a path unique to the test), no cgroup the probe made.
pub fn probe(args: &[&str], mark: &str) -> Output {
    let child = probe_command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running cg-childguard probe");
    let probe_pid = child.id();
    let output = child.wait_with_output().unwrap();
    let mine = format!("childguard-{probe_pid}-");
    let cgroups: Vec<String> = std::fs::read_dir(own_cgroup_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&mine))
        .collect();
    assert!(cgroups.is_empty(), "the probe left cgroups {cgroups:?}");
    let left = processes_with(mark);
    assert!(left.is_empty(), "the probe left processes {left:?}");
    output
}

/// Live processes whose command line contains `mark`, but for the probe's guardian (`cgguard/…`,
/// forked from the probe without exec, so with its command line), which ends on its own
/// once it has seen the probe exit and removed what it guarded.
pub fn processes_with(mark: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if cmdline.contains(mark)
            && !comm.starts_with("cgguard/")
            && is_alive(pid)
            && proc_state(pid) != Some('Z')
        {
            found.push((pid, cmdline));
        }
    }
    found
}

/// `probe --json ARGS`, run with [`probe`] (its processes marked by `mark`), which must exit 0:
/// its report, printed too (for a failing test's log).
pub fn probe_json(args: &[&str], mark: &str) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let output = probe(&all, mark);
    let report = json(&output);
    eprintln!("{report:#}");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    report
}

/// The command line of redis-server `redis` serving only the unix socket `socket` (no TCP
/// port), saving nothing, in `dir`.
pub fn redis_on(redis: &Path, socket: &str, dir: &Path) -> Vec<String> {
    let args = [
        "--port",
        "0",
        "--unixsocket",
        socket,
        "--save",
        "",
        "--appendonly",
        "no",
    ];
    std::iter::once(redis.display().to_string())
        .chain(args.map(String::from))
        .chain(["--dir".into(), dir.display().to_string()])
        .collect()
}

/// `strings` borrowed, for an argument list.
pub fn strs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The `--json` object on stdout.
pub fn json(output: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(out.trim()).unwrap_or_else(|e| {
        panic!(
            "probe output is not one JSON object ({e}): {out}\nstderr: {}",
            stderr(output)
        )
    })
}

pub fn recommended(report: &serde_json::Value) -> Ladder {
    let text = report["recommended_ladder"]
        .as_str()
        .expect("recommended_ladder");
    text.parse()
        .unwrap_or_else(|e| panic!("{text:?} does not parse: {e}"))
}

pub fn signals_of(ladder: &Ladder) -> Vec<Signal> {
    ladder.rungs().iter().map(|r| r.signal).collect()
}

pub fn clean_signals(report: &serde_json::Value) -> Vec<String> {
    report["clean_signals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// The per-signal object for `name`.
pub fn result<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["signals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["signal"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report}"))
}

pub fn dispositions(report: &serde_json::Value, name: &str) -> Vec<String> {
    result(report, name)["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["disposition"].as_str().unwrap().to_string())
        .collect()
}

/// slowserver listening on `socket`, started fresh each run: it does not remove a socket file
/// left by the run before (one `KILL`ed cannot), so `sh` does, then execs it (the same pid).
pub fn slowserver_on(socket: &str, flags: &str) -> Vec<String> {
    let slow = bin("cg-slowserver").display().to_string();
    let script =
        format!("rm -f '{socket}'; exec '{slow}' {flags} --ignore-eof --listen '{socket}'");
    vec!["--".into(), "sh".into(), "-c".into(), script]
}

pub fn assert_contained(report: &serde_json::Value) {
    assert_eq!(report["contained"], true, "{}", report["containment"]);
}
