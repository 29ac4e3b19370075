//! `childguard probe` without `--ready` (issue 34 item 1): each run waits for the server to
//! *settle* — a listening socket seen and its `SigIgn`/`SigCgt` unchanged for a while — before
//! its signal, says what it waited for, and warns when the settle timeout passed first.
//! Signalled while starting, a server meets the kernel's default action and the probe would
//! recommend `KILL` alone (redis did).
//!
//! A missing server fails the test naming the Debian package, unless
//! `CHILDGUARD_SKIP_PEERS=1`.

use childguard::{Ladder, Signal};
use childguard_tests::probe::*;
use childguard_tests::*;

const INSTALL: &str = "apt-get install -y redis-server (or run tests/run.sh)";

fn runs(report: &serde_json::Value) -> Vec<&serde_json::Value> {
    report["signals"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["runs"].as_array().unwrap())
        .collect()
}

/// Every run settled by the rule (a listener on `socket`, masks quiet), and the report says so.
fn assert_settled_on(report: &serde_json::Value, server: &str, socket: &str) {
    let settle = report["settle"].as_str().expect("settle");
    let expected = format!(
        " for {server} to settle: listening on a unix socket ({socket}), signal dispositions \
         unchanged for "
    );
    assert!(
        settle.starts_with("waited ") && settle.contains(&expected),
        "{settle}"
    );
    assert!(report["settle_warning"].is_null(), "{report}");
    for run in runs(report) {
        let settle = &run["settle"];
        assert_eq!(settle["settled"], true, "{run}");
        assert_eq!(
            settle["listener"],
            format!("listening on a unix socket ({socket})"),
            "{run}"
        );
        assert!(settle["unchanged_ms"].as_f64().unwrap() >= 300.0, "{run}");
    }
}

#[test]
fn redis_probe_without_ready_waits_for_it_to_settle_and_recommends_term_first() {
    let test = "redis_probe_without_ready_waits_for_it_to_settle_and_recommends_term_first";
    let redis = require_peer!(peer(
        test,
        "redis-server",
        &["/usr/bin", "/usr/local/bin"],
        INSTALL
    ));
    let dir = ScratchDir::new("probe-redis-settle");
    let socket = dir.file("redis.sock");
    let mut args = vec!["--runs", "2", "--window", "3s"];
    args.extend(["--signals", "HUP,INT,TERM,QUIT", "--"]);
    let server = redis_on(&redis, &socket, &dir.0);
    args.extend(strs(&server));
    let report = probe_json(&args, &socket);
    assert_settled_on(&report, "redis-server", &socket);
    let ladder = recommended(&report);
    let signals = signals_of(&ladder);
    assert_eq!(signals.first(), Some(&Signal::TERM), "{ladder}");
    assert_eq!(signals.last(), Some(&Signal::KILL), "{ladder}");
    assert_eq!(
        Some(&Signal::TERM),
        signals_of(&Ladder::redis()).first(),
        "preset {}",
        Ladder::redis()
    );
    // redis's handlers, installed by then: TERM and INT caught, HUP ignored.
    assert_eq!(dispositions(&report, "TERM"), ["caught", "caught"]);
    assert_eq!(dispositions(&report, "INT"), ["caught", "caught"]);
    assert_eq!(dispositions(&report, "HUP"), ["ignored", "ignored"]);
    for run in result(&report, "TERM")["runs"].as_array().unwrap() {
        assert_eq!(run["exit_code"], 0, "{run}");
    }
}

/// `sh` sleeps before it execs slowserver, which installs its handlers, then listens: a signal
/// sent while `sh` sleeps would meet `sh`'s default action. The wait ends on the listener.
#[test]
fn a_server_slow_to_install_its_handlers_is_signalled_once_settled() {
    let dir = ScratchDir::new("probe-settle-slow");
    let socket = dir.file("slow.sock");
    let log = dir.file("slow.log");
    let slow = bin("cg-slowserver").display().to_string();
    let script = format!(
        "rm -f '{socket}'; sleep 0.5; exec '{slow}' --ignore-eof --log '{log}' --listen '{socket}'"
    );
    let report = probe_json(
        &[
            "--runs",
            "2",
            "--window",
            "3s",
            "--signals",
            "TERM",
            "--",
            "sh",
            "-c",
            &script,
        ],
        &socket,
    );
    assert_settled_on(&report, "sh", &socket);
    for run in runs(&report) {
        assert!(
            run["settle"]["waited_ms"].as_f64().unwrap() >= 500.0,
            "{run}"
        );
    }
    assert_eq!(dispositions(&report, "TERM"), ["caught", "caught"]);
    assert_eq!(recommended(&report).to_string(), "TERM:2s,KILL:5s");
    // slowserver's handler ran in both runs.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        logged.lines().filter(|l| *l == "TERM").count(),
        2,
        "{logged}"
    );
}

/// No listener ever: each run waits the whole settle timeout, then the probe goes on and
/// warns that its recommendation is a guess.
#[test]
fn a_server_that_never_listens_is_probed_after_the_settle_timeout_with_a_warning() {
    let dir = ScratchDir::new("probe-settle-none");
    let log = dir.file("quiet.log");
    let slow = bin("cg-slowserver").display().to_string();
    let output = probe(
        &[
            "--runs",
            "1",
            "--window",
            "3s",
            "--signals",
            "TERM",
            "--settle-timeout",
            "700ms",
            "--",
            &slow,
            "--ignore-eof",
            "--log",
            &log,
        ],
        &log,
    );
    let out = String::from_utf8_lossy(&output.stdout);
    eprintln!("{out}");
    assert_eq!(output.status.code(), Some(0), "{out}{}", stderr(&output));
    let warning = out
        .lines()
        .find(|l| l.starts_with("WARNING: "))
        .unwrap_or_else(|| panic!("no warning in {out}"));
    assert!(
        warning.starts_with("WARNING: in 1 of 1 run(s) waited ")
            && warning.contains(
                " s (the settle timeout) for cg-slowserver to settle: signal dispositions \
                 unchanged for ",
            )
            && warning.contains(
                ", no listening socket seen: the recommendation may be wrong; pass --ready",
            ),
        "{warning}"
    );
    assert!(out.contains("recommended ladder: TERM:2s,KILL:5s"), "{out}");
    // The wait ran to the timeout (from the spawn), however late the reading that saw it.
    let waited: f64 = warning["WARNING: in 1 of 1 run(s) waited ".len()..]
        .split(' ')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no time in {warning}"));
    assert!(waited >= 0.7, "{warning}");
}

#[test]
fn a_server_exiting_while_starting_fails_the_probe_with_its_output() {
    let dir = ScratchDir::new("probe-settle-exit");
    let mark = dir.file("mark");
    let script = format!("echo 'no config at {mark}' >&2; exit 4");
    let output = probe(&["--runs", "1", "--", "sh", "-c", &script], &mark);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(125), "{err}");
    assert!(
        err.contains("probe of HUP, run 1 of 1: the server exited while starting, before any signal (exit status: 4)"),
        "{err}"
    );
    assert!(err.contains(&format!("no config at {mark}")), "{err}");
    assert!(output.stdout.is_empty());
}
