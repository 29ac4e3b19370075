//! A terminal's Ctrl-C reaches CMD once (issue 22, item 6). Under a real pseudo-terminal
//! (tests/src/terminal.rs: the tty driver itself sends `SIGINT` to the foreground process
//! group when `^C` is typed), CMD — `cg-int-counter`, which counts every `SIGINT` delivered to
//! it — shares childguard's group and gets the terminal's copy; childguard must not forward
//! another. A `kill -INT` sent to childguard alone, and a CMD in a group of its own (which the
//! terminal does not reach), still get exactly one: the forwarded copy.
//!
//! The kernel merges a second `SIGINT` that arrives while the first is still pending, so the
//! old double delivery could hide in a single press (`cg-int-counter` spins while it awaits a
//! `^C` to make that rare): the tests press `^C` several times (each once CMD said it handled
//! the previous one) so that it cannot.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use childguard_tests::terminal::at_a_terminal;
use childguard_tests::*;

fn childguard() -> String {
    bin("cg-childguard").display().to_string()
}

fn counter() -> String {
    bin("cg-int-counter").display().to_string()
}

fn out_path(name: &str) -> PathBuf {
    let path = scratch(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// The signals `cg-int-counter` wrote to `out`, one `INT kernel` / `INT user` / … a line.
fn counted(out: &Path, context: &str) -> Vec<String> {
    let text = std::fs::read_to_string(out).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the counter never finished)\n{context}",
            out.display()
        )
    });
    let _ = std::fs::remove_file(out);
    text.lines().map(str::to_string).collect()
}

/// The cues for `presses` presses of `^C` to a counter tagged `tag`: ready, then each INT.
fn cues(tag: &str, presses: usize) -> Vec<String> {
    std::iter::once(format!("{tag}-ready"))
        .chain((1..presses).map(|n| format!("{tag}-got {n} INT")))
        .collect()
}

/// `childguard with` at a terminal: eight `^C`, eight INTs at CMD (old code: a forwarded copy
/// on top of most of them). The server leads its own process group, so the terminal does not
/// reach it, and childguard forwards nothing to it: all it gets is its ladder's HUP.
#[test]
fn with_a_terminals_ctrl_c_reaches_cmd_once() {
    const PRESSES: usize = 8;
    let cmd_out = out_path("ctrl-c-with-cmd");
    let server_out = out_path("ctrl-c-with-server");
    let (cg, counter) = (childguard(), counter());
    let presses = PRESSES.to_string();
    let argv = [
        cg.as_str(),
        "with",
        "--ready",
        "line:server-ready",
        "--",
        &counter,
        server_out.to_str().unwrap(),
        "--tag",
        "server",
        "--",
        &counter,
        cmd_out.to_str().unwrap(),
        "--expect",
        &presses,
        "--settle",
        "500",
        "--tag",
        "cmd",
    ];
    let cues = cues("cmd", PRESSES);
    let cues: Vec<&str> = cues.iter().map(String::as_str).collect();
    let test = "with_a_terminals_ctrl_c_reaches_cmd_once";
    let Some(run) = at_a_terminal(test, &argv, &cues) else {
        return;
    };
    let got = counted(&cmd_out, &run.output);
    assert_eq!(
        got,
        vec!["INT kernel"; PRESSES],
        "{PRESSES} ^C at the terminal: CMD must get exactly the terminal's {PRESSES} SIGINTs \
         (a `INT user` is childguard's forwarded copy)\n{}",
        run.output
    );
    assert_eq!(run.sent, PRESSES, "{}", run.output);
    assert_eq!(run.exit, 0, "{}", run.output);
    assert_eq!(
        counted(&server_out, &run.output),
        ["HUP user"],
        "the server got something besides its ladder's HUP\n{}",
        run.output
    );
}

/// `childguard run` at a terminal: its CMD shares childguard's group too. One `^C` each run
/// (a second one would climb to the next rung); five runs. The ladder still starts: its first
/// rung becomes a `0` rung (CMD has the grace to act on its own copy), the report says why.
#[test]
fn run_a_terminals_ctrl_c_reaches_cmd_once() {
    let (cg, counter) = (childguard(), counter());
    for attempt in 0..5 {
        let out = out_path("ctrl-c-run");
        let argv = [
            cg.as_str(),
            "run",
            "--ladder",
            "INT:60s,KILL",
            "--report",
            "text",
            "--",
            &counter,
            out.to_str().unwrap(),
            "--settle",
            "500",
        ];
        let test = "run_a_terminals_ctrl_c_reaches_cmd_once";
        let Some(run) = at_a_terminal(test, &argv, &["int-counter-ready"]) else {
            return;
        };
        assert_eq!(run.sent, 1, "{}", run.output);
        let got = counted(&out, &run.output);
        assert_eq!(
            got,
            ["INT kernel"],
            "run {attempt}: one ^C must reach CMD once (a `INT user` is childguard's forwarded \
             copy)\n{}",
            run.output
        );
        assert_eq!(run.exit, 0, "{}", run.output);
        assert!(
            run.output
                .contains("from the terminal, which sent it to CMD too: not forwarded")
                && run.output.contains("ladder 0:60s,KILL"),
            "the report names the terminal's signal and the 0 rung\n{}",
            run.output
        );
    }
}

/// A CMD that childguard put in a process group of its own (`run --group`; `timeout`'s
/// default) is not in the terminal's foreground group, so the terminal's `^C` reaches only
/// childguard: the forwarded copy is the one CMD gets, once.
#[test]
fn a_cmd_in_its_own_group_gets_the_forwarded_ctrl_c_once() {
    let (cg, counter) = (childguard(), counter());
    for how in [
        &["run", "--group", "--ladder", "INT:60s,KILL", "--"][..],
        &["timeout", "60"],
    ] {
        let out = out_path("ctrl-c-group");
        let mut argv = vec![cg.as_str()];
        argv.extend_from_slice(how);
        argv.extend([counter.as_str(), out.to_str().unwrap(), "--settle", "500"]);
        let test = "a_cmd_in_its_own_group_gets_the_forwarded_ctrl_c_once";
        let Some(run) = at_a_terminal(test, &argv, &["int-counter-ready"]) else {
            return;
        };
        assert_eq!(run.sent, 1, "{how:?}: {}", run.output);
        let got = counted(&out, &run.output);
        assert_eq!(got, ["INT user"], "{how:?}\n{}", run.output);
        assert_eq!(run.exit, 0, "{how:?}: {}", run.output);
    }
}

/// No terminal: `kill -INT <childguard>` (a script, a CI runner) reaches childguard alone,
/// and CMD gets exactly the forwarded copy — each of three times.
#[test]
fn with_kill_int_without_a_tty_reaches_cmd_once() {
    const KILLS: usize = 3;
    let out = out_path("kill-int-with");
    let mut child = Command::new(bin("cg-childguard"))
        .args(["with", "--", "sleep", "120", "--"])
        .arg(bin("cg-int-counter"))
        .arg(&out)
        .args(["--expect", &KILLS.to_string(), "--settle", "500"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning cg-childguard");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next_line = || lines.next().and_then(Result::ok).unwrap_or_default();
    assert_eq!(next_line(), "int-counter-ready");
    for n in 1..=KILLS {
        let status = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .expect("kill(1)");
        assert!(status.success());
        assert_eq!(next_line(), format!("int-counter-got {n} INT"));
    }
    let output = child.wait_with_output().expect("waiting for cg-childguard");
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert_eq!(counted(&out, &err), vec!["INT user"; KILLS], "{err}");
}
