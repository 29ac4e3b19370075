//! Black-box tests of the `childguard` CLI (issue 7): the built binary (`cg-childguard`) runs
//! slowserver (`cg-slowserver`), which logs the signals it receives.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use childguard_tests::command::{on_path, stderr};
use childguard_tests::*;

fn childguard(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("cg-childguard"));
    cmd.args(args).stdin(Stdio::null());
    cmd
}

fn slow() -> String {
    bin("cg-slowserver").display().to_string()
}

/// `childguard run RUN_ARGS -- slowserver SLOW_ARGS --ignore-eof`: slowserver gets /dev/null as
/// stdin, and must not take that EOF for the end.
fn run_slow(run_args: &[&str], slow_args: &[&str]) -> Command {
    let slow = slow();
    let mut args = vec!["run"];
    args.extend_from_slice(run_args);
    args.push("--");
    args.push(&slow);
    args.extend_from_slice(slow_args);
    args.push("--ignore-eof");
    childguard(&args)
}

/// [`run_slow`] with slowserver logging the signals it gets to the scratch file `name`.
fn run_logged(name: &str, run_args: &[&str], slow_args: &[&str]) -> (Command, Log) {
    let log = Log(log_path(name));
    let mut with_log = vec!["--log", log.0.to_str().unwrap()];
    with_log.extend_from_slice(slow_args);
    (run_slow(run_args, &with_log), log)
}

/// Runs to completion; returns the output and how long it took.
fn run(cmd: &mut Command) -> (Output, Duration) {
    let start = Instant::now();
    let output = cmd.output().expect("running cg-childguard");
    (output, start.elapsed())
}

fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

/// childguard exited with `wanted` (its stderr in the message if not).
#[track_caller]
fn assert_code(output: &Output, wanted: i32) {
    assert_eq!(code(output), Some(wanted), "{}", stderr(output));
}

/// The `--report json` line on stderr.
fn json_report(output: &Output) -> serde_json::Value {
    json_in(&stderr(output))
}

/// The `--report json` line in `err`.
fn json_in(err: &str) -> serde_json::Value {
    let line = err
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON report on stderr: {err:?}"));
    serde_json::from_str(line).expect("report JSON")
}

fn signals_in(report: &serde_json::Value) -> Vec<String> {
    report["signals"]
        .as_array()
        .expect("signals array")
        .iter()
        .map(|s| s["signal"].as_str().unwrap().to_string())
        .collect()
}

/// A slowserver signal log in a scratch file, removed on drop.
struct Log(PathBuf);

impl Log {
    /// The whole log, as written.
    fn text(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }

    /// The signals slowserver logged, without the `CONT` that follows every catchable rung.
    fn signals(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| *l != "CONT")
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Starts childguard with stdout piped and waits for slowserver's READY line on it (so
/// childguard's signal handlers are in place). Returns the child and the READY line.
fn start_until_ready(cmd: &mut Command) -> (Child, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("spawning");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .expect("READY line");
    assert!(line.starts_with("READY "), "expected READY, got {line:?}");
    (child, line)
}

/// The process a `pid=` or `grandchild=` value of a READY line names, pinned.
fn pin_field(ready: &str, key: &str) -> Pin {
    let pid = ready
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {ready:?}"));
    Pin::new(pid)
}

fn send(signal: &str, child: &Child) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill(1)");
    assert!(status.success());
}

fn log_path(name: &str) -> PathBuf {
    let path = scratch(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// A scratch file for childguard's stderr, removed on drop: CMD, when it outlives childguard,
/// would hold a pipe open.
struct ErrFile(PathBuf);

impl ErrFile {
    fn new(name: &str) -> Self {
        Self(log_path(name))
    }

    fn create(&self) -> std::fs::File {
        std::fs::File::create(&self.0).unwrap()
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }
}

impl Drop for ErrFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The must-show (`--timeout 200ms`: exits 124 after ≈ 300 ms), with a 2 s timeout:
/// slowserver must have set HUP to SIG_IGN before HUP comes, and a start-up slower than 200 ms
/// (a loaded machine) would let HUP kill it. The report shows HUP, then KILL.
#[test]
fn timeout_climbs_hup_then_kill_and_exits_124() {
    // --no-skip-ignored: the ignored HUP is sent and its grace spent (skipped: skip_ignored.rs).
    let (output, took) = run(&mut run_slow(
        &[
            "--timeout",
            "2s",
            "--no-skip-ignored",
            "--ladder",
            "HUP:100ms,KILL",
            "--report",
            "json",
        ],
        &["--ignore", "HUP"],
    ));
    assert_code(&output, 124);
    // At least the timeout and HUP's grace. The upper bound leaves 5 s for a loaded machine;
    // a KILL that did not come at HUP's 100 ms grace (a grace misread, or no KILL for the
    // HUP-ignoring server) would take 100 s or never end.
    assert!(
        took >= Duration::from_millis(2050) && took < Duration::from_secs(7),
        "took {took:?}"
    );
    let report = json_report(&output);
    assert_eq!(signals_in(&report), ["HUP", "KILL"], "{report}");
    assert_eq!(report["ended_by"]["kind"], "rung", "{report}");
    assert_eq!(report["ended_by"]["index"], 1, "{report}");
    assert_eq!(report["status"]["signal"], 9, "{report}");
    let kill_at = report["signals"][1]["at_ms"].as_f64().unwrap();
    assert!(kill_at >= 100.0, "KILL only after HUP's grace: {report}");
}

#[test]
fn exit_code_is_cmds_own() {
    let slow = slow();
    for wanted in [0, 3, 42] {
        let n = wanted.to_string();
        let (output, _) = run(&mut childguard(&[
            "run",
            "--",
            &slow,
            "--exit-immediately",
            &n,
        ]));
        assert_code(&output, wanted);
    }
}

#[test]
fn died_of_signal_n_is_128_plus_n() {
    let (output, _) = run(&mut childguard(&["run", "--", "sh", "-c", "kill -USR1 $$"]));
    assert_code(&output, 128 + libc::SIGUSR1);
}

#[test]
fn without_a_trigger_it_waits_like_timeout() {
    let (output, took) = run(&mut childguard(&[
        "run",
        "--timeout",
        "10s",
        "--report",
        "text",
        "sh",
        "-c",
        "sleep 0.2; exit 7",
    ]));
    assert_code(&output, 7);
    assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(5));
    let err = stderr(&output);
    assert!(
        err.contains("exit 7") && err.contains("before close"),
        "{err}"
    );
}

#[test]
fn not_found_is_127() {
    let (output, _) = run(&mut childguard(&[
        "run",
        "--",
        "/nonexistent/childguard-cmd",
    ]));
    assert_eq!(code(&output), Some(127));
    assert!(stderr(&output).contains("/nonexistent/childguard-cmd"));
}

/// A file without execute permission is "Permission denied" (126), as from a shell, whether
/// it is a script or no program at all.
#[test]
fn not_executable_is_126() {
    for (name, content, says) in [
        ("not-executable", "#!/bin/sh\nexit 0\n", None),
        ("mode-644", "just text\n", Some("Permission denied")),
    ] {
        let path = scratch(name);
        std::fs::write(&path, content).unwrap();
        let (output, _) = run(&mut childguard(&["run", "--", path.to_str().unwrap()]));
        let _ = std::fs::remove_file(&path);
        assert_code(&output, 126);
        if let Some(says) = says {
            assert!(stderr(&output).contains(says), "{}", stderr(&output));
        }
    }
}

/// Usage errors exit 125 and name what was wrong; timeout(1)'s `-s` and `-k` get a hint at
/// the ladder instead of a bare "unknown option".
#[test]
fn usage_errors_are_125_and_name_the_argument() {
    let cases: &[(&[&str], &str, bool)] = &[
        (&["run", "--bogus", "--", "true"], "--bogus", true),
        (&["run", "--ladder", "HUP:1x", "--", "true"], "HUP:1x", true),
        (&["run", "--timeout", "soon", "--", "true"], "soon", true),
        (&["run", "--report", "xml", "--", "true"], "xml", true),
        (&["run", "--activate=", "--", "true"], "--activate", true),
        (&["run"], "missing CMD", true),
        (&["walk"], "walk", true),
        (
            &["run", "-s", "TERM", "1", "true"],
            "--ladder INT:5s,KILL",
            false,
        ),
        (
            &["run", "-k", "5", "1", "true"],
            "--ladder TERM:5s,KILL",
            false,
        ),
        (&["run", "--signal=INT", "1", "true"], "first rung", false),
        (&["run", "--kill-after=1", "1", "true"], "last rung", false),
    ];
    for (args, needle, points_at_help) in cases {
        let (output, _) = run(&mut childguard(args));
        assert_eq!(code(&output), Some(125), "{args:?}");
        let err = stderr(&output);
        assert!(err.contains(needle), "{args:?}: {err}");
        if *points_at_help {
            assert!(
                err.contains("--help"),
                "{args:?} should point at --help: {err}"
            );
        }
    }
}

/// `--help` and `run --help` have examples and the exit codes; `run --version` the version.
#[test]
fn help_has_examples_and_exit_codes() {
    let (output, _) = run(&mut childguard(&["--help"]));
    assert_eq!(code(&output), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("Examples:"));
    let (output, _) = run(&mut childguard(&["run", "--help"]));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(code(&output), Some(0));
    for needle in [
        "Examples:",
        "124",
        "125",
        "126",
        "127",
        "--ladder",
        "--preserve-status",
    ] {
        assert!(text.contains(needle), "run --help lacks {needle}");
    }
    let (output, _) = run(&mut childguard(&["run", "--version"]));
    assert_code(&output, 0);
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("childguard "));
}

/// slowserver logs what it receives: the rungs arrive in ladder order. The ladder starts when
/// our end of childguard's stdin closes, after slowserver's READY line, so its handlers are in
/// place (a `--timeout` could fire before them, and the default USR1 would kill it).
#[test]
fn ladder_order_as_the_server_sees_it() {
    let (mut cmd, log) = run_logged(
        "order.log",
        &["--stop-on-stdin-eof", "--ladder", "USR1:1s,TERM:2s,KILL"],
        &[],
    );
    cmd.stdin(Stdio::piped()).stderr(Stdio::piped());
    let (mut child, _) = start_until_ready(&mut cmd);
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    assert_code(&output, 128 + libc::SIGTERM);
    assert_eq!(log.signals(), ["USR1", "TERM"]);
}

#[test]
fn preserve_status_gives_cmds_status_after_a_timeout() {
    let (output, _) = run(&mut run_slow(
        &[
            "--timeout",
            "100ms",
            "--ladder",
            "TERM:2s",
            "--preserve-status",
        ],
        &[],
    ));
    assert_code(&output, 128 + libc::SIGTERM);
}

#[test]
fn stdin_eof_starts_the_ladder() {
    let (mut cmd, log) = run_logged(
        "stdin.log",
        &["--stop-on-stdin-eof", "--ladder", "TERM:2s,KILL"],
        &[],
    );
    cmd.stdin(Stdio::piped());
    let (mut child, _) = start_until_ready(&mut cmd);
    // CMD got /dev/null (EOF at once) and ignores it: nothing happens while our stdin is open.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        child.try_wait().unwrap().is_none(),
        "stopped before stdin closed"
    );
    assert!(log.signals().is_empty());
    let closed = Instant::now();
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    // Generous for a loaded machine; a ladder that did not start at EOF would never end.
    assert!(
        closed.elapsed() < Duration::from_secs(5),
        "{:?}",
        closed.elapsed()
    );
    assert_eq!(log.signals(), ["TERM"]);
}

/// SIGTERM sent to childguard reaches CMD first, in place of the default ladder's HUP.
#[test]
fn a_signal_to_childguard_is_forwarded_as_the_first_rung() {
    let (mut cmd, log) = run_logged("forward.log", &["--report", "json"], &[]);
    cmd.stderr(Stdio::piped());
    let (child, _) = start_until_ready(&mut cmd);
    send("TERM", &child);
    let output = child.wait_with_output().unwrap();
    assert_code(&output, 128 + libc::SIGTERM);
    assert_eq!(log.signals(), ["TERM"]);
    let report = json_report(&output);
    assert_eq!(signals_in(&report), ["TERM"], "{report}");
}

/// A second Ctrl-C cuts the current rung's grace short: KILL at once, not after 30 s.
#[test]
fn a_second_ctrl_c_skips_to_the_next_rung() {
    // --no-skip-ignored: the forwarded INT is sent although ignored (its CONT is what we see).
    let (mut cmd, log) = run_logged(
        "skip.log",
        &["--no-skip-ignored", "--ladder", "HUP:30s,KILL:5s"],
        &["--ignore", "INT"],
    );
    let (mut child, _) = start_until_ready(&mut cmd);
    send("INT", &child);
    // The forwarded INT is ignored (so not logged), but the CONT that follows it is.
    let cont_seen = eventually(Duration::from_secs(5), || log.text().contains("CONT"));
    assert!(cont_seen, "the forwarded INT never arrived");
    let second = Instant::now();
    send("INT", &child);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGKILL));
    assert!(
        second.elapsed() < Duration::from_secs(3),
        "{:?}",
        second.elapsed()
    );
}

/// `--group`: the rungs reach a grandchild in CMD's group; nothing survives. The ladder starts
/// when our end of childguard's stdin closes, after READY: a `--timeout` could fire before
/// the READY line or before we looked at the grandchild.
#[test]
fn group_takes_the_grandchild_along() {
    let mut cmd = run_slow(
        &[
            "--group",
            "--stop-on-stdin-eof",
            "--ladder",
            "TERM:2s,KILL",
            "--report",
            "json",
        ],
        &["--fork-grandchild"],
    );
    cmd.stdin(Stdio::piped()).stderr(Stdio::piped());
    let (mut child, ready) = start_until_ready(&mut cmd);
    let grandchild = pin_field(&ready, "grandchild=");
    assert!(grandchild.pid != 0 && is_alive(grandchild.pid));
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    assert_code(&output, 128 + libc::SIGTERM);
    let report = json_report(&output);
    assert_eq!(report["signals"][0]["to_group"], true, "{report}");
    assert_eq!(report["group_survivors"], serde_json::json!([]), "{report}");
    assert!(
        grandchild.gone_within(Duration::from_secs(10)),
        "grandchild {} survived",
        grandchild.pid
    );
}

/// SIGKILL childguard (no chance to climb anything) and CMD still goes: it gets the first
/// rung's signal from the kernel, by default and with `--exit-with-parent` (which insists).
#[test]
fn cmd_goes_when_childguard_is_killed() {
    for (name, run_args, logged) in [
        (
            "pdeathsig.log",
            &["--ladder", "INT:1s,KILL"][..],
            &["INT"][..],
        ),
        ("exit-with-parent.log", &["--exit-with-parent"], &["HUP"]),
    ] {
        let (mut cmd, log) = run_logged(name, run_args, &[]);
        let (mut child, ready) = start_until_ready(&mut cmd);
        let cmd_pin = pin_field(&ready, "pid=");
        send("KILL", &child);
        child.wait().unwrap();
        // Generous: the kernel's parent-death signal is sent at once, but CMD must be
        // scheduled to die of it. Without it CMD would run on forever (--ignore-eof).
        assert!(
            cmd_pin.gone_within(Duration::from_secs(10)),
            "{run_args:?}: CMD {} outlived a SIGKILLed childguard",
            cmd_pin.pid
        );
        assert_eq!(log.signals(), logged, "{run_args:?}");
    }
}

#[test]
fn demo_prints_a_timeline_fast() {
    let (output, took) = run(&mut childguard(&["demo"]));
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(code(&output), Some(0), "{out}{}", stderr(&output));
    for needle in ["Close timeline:", "SIGHUP sent", "reaped"] {
        assert!(out.contains(needle), "demo output lacks {needle:?}:\n{out}");
    }
    // The estimate is the 10 s read's time left when the close began: ≈ 9.9 s, less on a
    // loaded machine (the demo's 50 ms settle sleep may run long), never the 10 s itself.
    let estimate: f64 = out
        .split_once("waitpid-only close: ≈ ")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no waitpid-only estimate:\n{out}"));
    assert!(
        (5.0..10.0).contains(&estimate),
        "estimate {estimate}:\n{out}"
    );
    assert!(took < Duration::from_secs(5), "the demo took {took:?}");
}

/// `--activate` with nbdkit: the socket path comes first on stdout, a client gets nbdkit's
/// greeting there, and a TERM to childguard stops nbdkit (socket shut down first) and removes
/// the socket.
#[test]
fn activate_serves_nbdkit_on_the_printed_path() {
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    let test = "activate_serves_nbdkit_on_the_printed_path";
    if !on_path(test, "nbdkit", "apt-get install -y nbdkit") {
        return;
    }
    let mut cmd = childguard(&[
        "run",
        "--activate=nbd",
        "--ladder",
        "HUP:2s,KILL",
        "--report",
        "json",
        "--",
        "nbdkit",
        "-f",
        "memory",
        "1M",
    ]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawning");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .expect("socket path line");
    let path = PathBuf::from(line.trim_end());
    assert!(
        path.is_absolute(),
        "first stdout line is not a path: {line:?}"
    );
    let mut client = UnixStream::connect(&path).expect("connecting to the printed path");
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut magic = [0u8; 8];
    client.read_exact(&mut magic).expect("NBD greeting");
    assert_eq!(&magic, b"NBDMAGIC");
    drop(client);
    send("TERM", &child);
    let output = child.wait_with_output().unwrap();
    let report = json_report(&output);
    assert!(report["shutdown_ms"].is_number(), "{report}");
    assert_eq!(signals_in(&report), ["TERM"], "{report}");
    assert!(report["status"].is_object(), "{report}");
    assert!(!path.exists(), "{} left behind", path.display());
}

// ---- issue 15, item 2: `childguard run` fixed ----

/// What [`supervise_slow`] saw: childguard's status and stderr, and whether CMD was still
/// running when childguard had exited.
struct Supervised {
    /// CMD's pid.
    pid: u32,
    status: std::process::ExitStatus,
    err: String,
    left: bool,
}

/// Starts `cmd` (childguard running slowserver) with stderr to a file, waits for READY, calls
/// `act`, then waits for childguard. CMD still running afterwards is killed: a childguard that
/// dies early must not leave the test waiting for a pipe CMD holds open.
fn supervise_slow(cmd: &mut Command, name: &str, act: impl FnOnce(&mut Child)) -> Supervised {
    let err = ErrFile::new(&format!("{name}.err"));
    cmd.stderr(err.create());
    let (mut child, ready) = start_until_ready(cmd);
    // Pinned while it surely runs (before `act`): once childguard has reaped it, its pid may
    // be another process's.
    let cmd_pin = pin_field(&ready, "pid=");
    act(&mut child);
    let status = child.wait().unwrap();
    let left = !cmd_pin.gone_within(Duration::ZERO);
    Supervised {
        pid: cmd_pin.pid,
        status,
        err: err.text(),
        left,
    }
}

/// stderr that cannot be written (full, or a pipe nobody reads) is no reason to panic: the
/// supervision goes on and the exit status is the timeout's.
#[test]
fn a_full_or_closed_stderr_is_not_fatal() {
    let args = [
        "run",
        "--report",
        "text",
        "--timeout",
        ".1",
        "--",
        "sleep",
        "10",
    ];
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let (output, _) = run(childguard(&args).stderr(full));
    assert_eq!(code(&output), Some(124), "stderr /dev/full");
    // A pipe whose read end is closed before childguard writes (as in `… 2>&1 | :`).
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let (output, _) = run(childguard(&args).stderr(writer));
    assert_eq!(code(&output), Some(124), "stderr a closed pipe");
    // Help and usage errors to a full stdout/stderr: failure codes, not 101.
    let full = || {
        std::fs::File::options()
            .write(true)
            .open("/dev/full")
            .unwrap()
    };
    let (output, _) = run(childguard(&["run", "--help"]).stdout(full()));
    assert_eq!(code(&output), Some(125), "help to /dev/full");
    let (output, _) = run(childguard(&["run", "--bogus"]).stderr(full()));
    assert_eq!(code(&output), Some(125), "usage error to /dev/full");
    let (output, _) = run(childguard(&["demo"]).stdout(full()));
    assert_eq!(code(&output), Some(0), "demo to /dev/full");
}

/// Durations too long for the clock mean "no timeout in practice", in every form GNU accepts.
#[test]
fn huge_timeouts_saturate() {
    for huge in [
        "9223372036854775808",
        "10000000000000000000",
        "9223372036854775808d",
        "2.34e+5d",
        "1.189731495357231765e+4932",
        "inf",
    ] {
        let (output, _) = run(&mut childguard(&[
            "run",
            "--timeout",
            huge,
            "--",
            "sh",
            "-c",
            "sleep 0.2; exit 3",
        ]));
        assert_eq!(code(&output), Some(3), "{huge}: {}", stderr(&output));
    }
}

/// `1e-10000` underflows to zero, but means the smallest positive timeout, not "none".
#[test]
fn an_underflowing_timeout_is_the_smallest_one() {
    let (output, took) = run(&mut childguard(&[
        "run",
        "--timeout",
        "1e-10000",
        "--ladder",
        "KILL",
        "--",
        "sleep",
        "10",
    ]));
    assert_eq!(code(&output), Some(124), "{}", stderr(&output));
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// `0:GRACE` is a rung that sends nothing (timeout's `-s 0`): CMD gets no signal and no CONT
/// until the next rung.
#[test]
fn a_signal_zero_rung_sends_nothing_and_waits() {
    let (mut cmd, log) = run_logged(
        "zero-rung.log",
        &[
            "--timeout",
            "100ms",
            "--ladder",
            "0:300ms,KILL",
            "--report",
            "json",
        ],
        &[],
    );
    let (output, _) = run(&mut cmd);
    assert_code(&output, 124);
    let report = json_report(&output);
    assert_eq!(signals_in(&report), ["0", "KILL"], "{report}");
    let kill_at = report["signals"][1]["at_ms"].as_f64().unwrap();
    assert!(
        kill_at >= 300.0,
        "KILL only after the 0 rung's grace: {report}"
    );
    // Nothing reached CMD for the 0 rung: no signal and no CONT. The next rung is KILL (not
    // logged, and followed by no CONT), so anything in the log is the 0 rung's.
    assert_eq!(log.text(), "", "the 0 rung reached CMD");
}

/// The SigIgn mask CMD starts with, from /proc/self/status, when childguard is started by a
/// shell that ran `prelude` first.
fn sigign_of_cmd(prelude: &str) -> u64 {
    let cg = bin("cg-childguard");
    let script = format!(
        "{prelude} exec '{}' run -- grep SigIgn /proc/self/status",
        cg.display()
    );
    let (output, _) = run(Command::new("sh").args(["-c", &script]));
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(code(&output), Some(0), "{out}{}", stderr(&output));
    let hex = out
        .trim()
        .strip_prefix("SigIgn:")
        .unwrap_or_else(|| panic!("no SigIgn line: {out:?}"));
    u64::from_str_radix(hex.trim(), 16).expect("SigIgn hex")
}

/// CMD starts with the SIGPIPE disposition childguard was started with (std would reset it).
#[test]
fn cmd_inherits_the_sigpipe_disposition() {
    let pipe_bit = 1u64 << (libc::SIGPIPE - 1);
    assert_ne!(
        sigign_of_cmd("trap '' PIPE;") & pipe_bit,
        0,
        "ignored stays ignored"
    );
    assert_eq!(
        sigign_of_cmd("trap - PIPE;") & pipe_bit,
        0,
        "default stays default"
    );
}

/// QUIT, USR1 and USR2 sent to childguard are forwarded as the first rung (they used to kill
/// childguard and leave CMD running): the report lists the forwarded signal first.
#[test]
fn quit_usr1_usr2_are_forwarded() {
    for (name, signo) in [
        ("QUIT", libc::SIGQUIT),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
    ] {
        let (mut cmd, _log) = run_logged(
            &format!("forward-{name}.log"),
            &["--ladder", "HUP:200ms,TERM:5s,KILL", "--report", "json"],
            &[],
        );
        let run = supervise_slow(&mut cmd, name, |child| send(name, child));
        assert!(!run.left, "{name}: CMD left running: {}", run.err);
        let report = json_in(&run.err);
        let sent = signals_in(&report);
        assert_eq!(sent[0], name, "{report}");
        // slowserver dies of QUIT and USR2 (default action), logs USR1 and goes on to TERM.
        let wanted = if signo == libc::SIGUSR1 {
            libc::SIGTERM
        } else {
            signo
        };
        assert_eq!(run.status.code(), Some(128 + wanted), "{name}: {report}");
    }
}

/// Caught signals that are not forwarded (ALRM, XCPU, a real-time one) climb the ladder as
/// written: CMD gets HUP, the default ladder's first rung. With `--on-signal ladder` even a
/// TERM to childguard does (postgres' INT first), instead of replacing the first rung.
#[test]
fn other_caught_signals_climb_the_ladder_as_written() {
    let [alrm, xcpu, rt] =
        [libc::SIGALRM, libc::SIGXCPU, libc::SIGRTMIN() + 1].map(|n| n.to_string());
    let cases: [(&str, &[&str], &str, i32); 4] = [
        (&alrm, &["--report", "json"], "HUP", libc::SIGHUP),
        (&xcpu, &["--report", "json"], "HUP", libc::SIGHUP),
        (&rt, &["--report", "json"], "HUP", libc::SIGHUP),
        (
            "TERM",
            &[
                "--on-signal",
                "ladder",
                "--ladder",
                "INT:5s,KILL",
                "--report",
                "json",
            ],
            "INT",
            libc::SIGINT,
        ),
    ];
    for (signal, run_args, first, died_of) in cases {
        let (mut cmd, log) = run_logged(&format!("ladder-{signal}.log"), run_args, &[]);
        let run = supervise_slow(&mut cmd, "ladder-signal", |child| send(signal, child));
        assert!(!run.left, "{signal}: CMD left running: {}", run.err);
        assert_eq!(
            run.status.code(),
            Some(128 + died_of),
            "{signal}: {}",
            run.err
        );
        assert_eq!(signals_in(&json_in(&run.err)), [first], "{signal}");
        assert_eq!(log.signals(), [first], "{signal}");
    }
}

/// CMD outlives the ladder: childguard waits (bounded, saying so) and then names the pid it
/// leaves — it never exits claiming a reaper that dies with it. The ladder starts when our end
/// of childguard's stdin closes, after READY (a `--timeout` could send TERM before slowserver
/// ignores it); then there is no status to pass on: 125.
#[test]
fn outliving_the_ladder_names_the_pid_left() {
    let mut cmd = run_slow(
        &["--stop-on-stdin-eof", "--ladder", "TERM:100ms"],
        &["--ignore", "TERM"],
    );
    cmd.stdin(Stdio::piped());
    let run = supervise_slow(&mut cmd, "outlived", |child| {
        drop(child.stdin.take());
    });
    let err = &run.err;
    assert_eq!(run.status.code(), Some(125), "{err}");
    assert!(err.contains("waiting up to 1s"), "{err}");
    assert!(
        err.contains(&format!("left behind unreaped as pid {}", run.pid)),
        "{err}"
    );
    assert!(run.left, "the pid named is the one still running: {err}");
}

/// …and a CMD that exits during that wait is reaped: nothing is left, nothing is claimed.
/// slowserver lingers 3 s after TERM: 1 s past the 2 s grace, 1 s before the end of the 2 s
/// wait that follows (the last grace again), so either side may run late by a second. The
/// ladder starts after READY (stdin EOF), once its TERM handler is in place.
#[test]
fn outliving_the_ladder_briefly_is_waited_for() {
    let mut cmd = run_slow(
        &["--stop-on-stdin-eof", "--ladder", "TERM:2s"],
        &["--slow-exit", "3s"],
    );
    cmd.stdin(Stdio::piped());
    let run = supervise_slow(&mut cmd, "outlived-briefly", |child| {
        drop(child.stdin.take());
    });
    let err = &run.err;
    assert!(err.contains("waiting up to 2s"), "{err}");
    assert!(!err.contains("left behind"), "{err}");
    assert!(err.contains("exited after the ladder"), "{err}");
    assert_eq!(run.status.code(), Some(125), "{err}");
    assert!(!run.left, "CMD still ran when childguard exited: {err}");
}

/// Started with `HUP`, `INT` and `TERM` ignored (as under `nohup` in a background job),
/// childguard still receives them — it reads its signals from a `signalfd`, where a blocked
/// signal is queued whatever its disposition — and CMD starts with all three at their default,
/// as when childguard's handlers replaced the inherited `SIG_IGN`: a `TERM` to childguard ends
/// CMD through the ladder, and CMD's `SigIgn` names none of them.
/// Linux: `run` reads its signals on the thread that waits (a `signalfd` in its `poll`), with
/// no thread of its own for them; the signal still starts the ladder at once.
#[cfg(target_os = "linux")]
#[test]
fn signals_are_read_by_the_waiting_thread_not_a_thread_of_their_own() {
    let mut child = childguard(&["run", "--ladder", "TERM:5s,KILL", "--"])
        .args(["sh", "-c", "echo READY; exec sleep 30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut ready = String::new();
    out.read_line(&mut ready).expect("READY line");
    assert_eq!(ready.trim(), "READY");
    let tasks = std::fs::read_dir(format!("/proc/{}/task", child.id())).expect("its tasks");
    let names: Vec<String> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect();
    assert!(
        !names.iter().any(|n| n.starts_with("childguard-sig")),
        "a signal thread runs: {names:?}"
    );
    let sent = Instant::now();
    send("TERM", &child);
    let output = child.wait_with_output().unwrap();
    // Generous: the ladder's TERM ends `sleep` at once; its 5 s grace is the bound's reason.
    assert!(
        sent.elapsed() < Duration::from_secs(4),
        "the TERM did not start the ladder: {:?}\n{}",
        sent.elapsed(),
        stderr(&output)
    );
    assert_ne!(code(&output), Some(0), "{}", stderr(&output));
}

#[test]
fn signals_ignored_at_start_still_reach_childguard_and_not_cmd() {
    let script = "grep SigIgn /proc/self/status; echo READY; exec sleep 30";
    let mut cmd = Command::new(bin("cg-sigconf"));
    cmd.args(["--ignore", "1", "--ignore", "2", "--ignore", "15", "--"])
        .arg(bin("cg-childguard"))
        .args(["run", "--ladder", "TERM:5s,KILL", "--", "sh", "-c", script])
        .stderr(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().expect("spawning");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut sig_ign = String::new();
    out.read_line(&mut sig_ign).expect("SigIgn line");
    let mask = u64::from_str_radix(
        sig_ign
            .trim()
            .strip_prefix("SigIgn:")
            .unwrap_or_else(|| panic!("expected SigIgn, got {sig_ign:?}"))
            .trim(),
        16,
    )
    .unwrap();
    for (name, signo) in [("HUP", 1), ("INT", 2), ("TERM", 15)] {
        assert_eq!(
            mask & (1 << (signo - 1)),
            0,
            "CMD starts with {name} ignored: {sig_ign}"
        );
    }
    let mut ready = String::new();
    out.read_line(&mut ready).expect("READY line");
    assert_eq!(ready.trim(), "READY");
    let sent = Instant::now();
    send("TERM", &child);
    let output = child.wait_with_output().unwrap();
    // Generous: the ladder's TERM ends `sleep` at once; its 5 s grace is the bound's reason.
    assert!(
        sent.elapsed() < Duration::from_secs(4),
        "childguard did not act on the TERM ignored at its start: {:?}\n{}",
        sent.elapsed(),
        stderr(&output)
    );
    assert_ne!(code(&output), Some(0), "{}", stderr(&output));
}
