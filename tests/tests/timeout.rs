//! `childguard timeout` against the behaviour coreutils' own tests ask of `timeout(1)`
//! (coreutils `tests/timeout/*.sh` and `timeout-blocked.pl`, HEAD): one test per case, written
//! here from what each case checks (no text of those GPL tests is copied). The binary runs
//! under the name `timeout` (a symlink to `cg-childguard`), which is how it is selected.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use childguard_tests::*;

/// `timeout`: a symlink to the CLI, in a directory of its own.
fn timeout_bin() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = scratch("timeout-bin");
        std::fs::create_dir_all(&dir).unwrap();
        let link = dir.join("timeout");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(bin("cg-childguard"), &link).unwrap();
        link
    })
    .clone()
}

fn timeout(args: &[&str]) -> Output {
    Command::new(timeout_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running timeout")
}

/// Runs `script` with `sh -c`, `$T` being our `timeout`.
fn sh(script: &str) -> Output {
    Command::new("sh")
        .args(["-c", script])
        .env("T", timeout_bin())
        .stdin(Stdio::null())
        .output()
        .expect("sh")
}

fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

fn err(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn out(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

// ---- timeout.sh ----

#[test]
fn a_command_that_finishes_in_time_gives_its_status() {
    for interval in ["10", "1d", "0"] {
        assert_eq!(code(&timeout(&[interval, "true"])), Some(0), "{interval}");
    }
    assert_eq!(code(&timeout(&["10", "sh", "-c", "exit 2"])), Some(2));
}

#[test]
fn a_timeout_gives_124() {
    let o = timeout(&[".1", "sleep", "10"]);
    assert_eq!(code(&o), Some(124), "{}", err(&o));
}

#[test]
fn preserve_status_gives_the_commands_status_instead() {
    let o = timeout(&["--preserve-status", ".1", "sleep", "10"]);
    assert_eq!(code(&o), Some(128 + libc::SIGTERM), "{}", err(&o));
}

/// `-s0` sends nothing, so only the `-k` KILL ends it: 137, not 124 — with and without
/// `--foreground`.
#[test]
fn signal_zero_then_kill_after_gives_137() {
    for extra in [&[][..], &["--foreground"]] {
        let mut args = extra.to_vec();
        args.extend(["-s0", "-k1", ".1", "sleep", "10"]);
        let start = Instant::now();
        let o = timeout(&args);
        assert_eq!(code(&o), Some(137), "{args:?}: {}", err(&o));
        assert!(
            start.elapsed() >= Duration::from_secs(1),
            "KILL only after -k"
        );
    }
}

#[test]
fn an_ignored_sigchld_does_not_matter() {
    let o = sh("trap '' CHLD; exec \"$T\" 10 true");
    assert_eq!(code(&o), Some(0), "{}", err(&o));
}

/// A child the command's shell had before it became timeout (here: a setsid'd sleep) ending
/// first does not end the wait, and the command is still timed out and killed (the group's
/// TERM ends its `sleep` too: 5 s leave the .5 s timeout ample time to fire first).
#[test]
fn an_inherited_child_exiting_does_not_confuse_the_wait() {
    let o = sh(
        "out=$(setsid sleep .1 & exec \"$T\" .5 sh -c 'sleep 5; echo foo'); \
                echo \"status=$? out=$out\"",
    );
    assert_eq!(out(&o).trim(), "status=124 out=", "{}", err(&o));
}

#[test]
fn verbose_names_each_signal_sent() {
    for opt in ["-v", "--verbose"] {
        let o = timeout(&[opt, "-s0", "-k", ".1", ".1", "sleep", "10"]);
        assert_eq!(code(&o), Some(137));
        assert_eq!(
            err(&o),
            "timeout: sending signal 0 to command 'sleep'\n\
             timeout: sending signal KILL to command 'sleep'\n",
            "{opt}"
        );
    }
}

/// `-v` with stderr a pipe nobody reads: still 124 (a failed message is no failure).
#[test]
fn verbose_to_a_closed_pipe_still_gives_124() {
    let status = scratch("timeout-closed-pipe.status");
    let o = Command::new("sh")
        .args(["-c", "{ \"$T\" -v .1 sleep 10 2>&1; echo $? >\"$S\"; } | :"])
        .env("T", timeout_bin())
        .env("S", &status)
        .stdin(Stdio::null())
        .output()
        .expect("sh");
    let got = std::fs::read_to_string(&status).unwrap_or_default();
    let _ = std::fs::remove_file(&status);
    assert_eq!(got.trim(), "124", "{}", err(&o));
}

/// Started with SIGPIPE ignored, the command inherits that: `yes` into a closed pipe reports
/// "Broken pipe" instead of dying of SIGPIPE.
#[test]
fn an_ignored_sigpipe_reaches_the_command() {
    let o = sh("(trap '' PIPE && \"$T\" 10 yes | :) 2>&1");
    assert!(out(&o).contains("Broken pipe"), "{}{}", out(&o), err(&o));
}

// ---- timeout-parameters.sh ----

#[test]
fn bad_parameters_give_125() {
    for args in [
        &["invalid", "sleep", "0"][..],
        &[" -0.1", "sleep", "0"],
        &[" -1e-10000", "sleep", "0"],
        &["--kill-after=invalid", "1", "sleep", "0"],
        &["42D", "sleep", "0"],
        &["--signal=invalid", "1", "sleep", "0"],
    ] {
        let o = timeout(args);
        assert_eq!(code(&o), Some(125), "{args:?}: {}", err(&o));
        assert!(err(&o).contains("timeout --help"), "{args:?}: {}", err(&o));
    }
}

#[test]
fn fractional_intervals_are_accepted() {
    for interval in ["10.34", "9.999999999"] {
        assert_eq!(
            code(&timeout(&[interval, "sleep", "0"])),
            Some(0),
            "{interval}"
        );
    }
}

#[test]
fn an_underflowing_interval_is_the_smallest_timeout() {
    assert_eq!(code(&timeout(&["1e-10000", "sleep", "10"])), Some(124));
}

#[test]
fn cannot_invoke_is_126_and_not_found_is_127() {
    assert_eq!(code(&timeout(&["10", "."])), Some(126));
    let o = timeout(&["10", "no_such_command_childguard"]);
    assert_eq!(code(&o), Some(127), "{}", err(&o));
}

// ---- timeout-large-parameters.sh ----

#[test]
fn huge_intervals_mean_no_timeout() {
    let o = timeout(&["9223372036854775808", "sleep", "0.5"]);
    assert_eq!(
        code(&o),
        Some(0),
        "time_t overflow timed out at once: {}",
        err(&o)
    );
    for interval in [
        "18446744073709551616",
        "9223372036854775808d",
        "2.34e+5d",
        "1.18973149535723176502e+4932",
    ] {
        let o = timeout(&[interval, "sleep", "0"]);
        assert_eq!(code(&o), Some(0), "{interval}: {}", err(&o));
    }
    let o = timeout(&["--", "-1.18973149535723176502e+4932", "sleep", "0"]);
    assert_eq!(code(&o), Some(125));
}

// ---- timeout-group.sh ----

/// A command script that touches `received` when USR1 arrives, `running` once started.
fn usr1_script(dir: &std::path::Path) -> PathBuf {
    let script = dir.join("cmd.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ntrap 'touch received; exit' USR1\ntouch running\n\
         n=$1; while [ ! -e received ] && [ $n -gt 0 ]; do sleep 0.1; n=$((n-1)); done\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

/// `--foreground`: the command stays in the caller's group, so a signal to that whole group
/// reaches it (here USR1 to a setsid'd shell's group).
#[test]
fn foreground_leaves_the_command_in_the_callers_group() {
    let dir = fresh_dir("timeout-fg");
    let script = usr1_script(&dir);
    let o = Command::new("setsid")
        .args(["-w", "sh", "-c"])
        .arg(format!(
            "\"$T\" -v --foreground 25 '{}' 200 & \
             while [ ! -e running ]; do sleep 0.05; done; /bin/kill -USR1 -- -$$; wait",
            script.display()
        ))
        .env("T", timeout_bin())
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("setsid");
    assert!(dir.join("received").exists(), "{}", err(&o));
}

/// timeout SIGKILLed: the command still gets the `-s` signal (PR_SET_PDEATHSIG).
#[test]
fn a_killed_timeout_sends_its_signal_to_the_command() {
    let dir = fresh_dir("timeout-pdeath");
    let script = usr1_script(&dir);
    let mut t = Command::new(timeout_bin())
        .args(["-sUSR1", "25"])
        .arg(&script)
        .arg("200")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || dir.join("running").exists()),
        "the command never started"
    );
    sigkill(t.id());
    t.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || dir.join("received").exists()),
        "the command never got USR1 after timeout was KILLed"
    );
}

/// An ALRM sent to timeout is its timeout firing: the outer `timeout -sALRM` of a nested pair
/// times the inner out, which sends USR1 to the command; the outer exits 124.
#[test]
fn alrm_is_the_timeout_firing_even_when_nested() {
    let dir = fresh_dir("timeout-alrm");
    let script = usr1_script(&dir);
    let start = Instant::now();
    let mut t = Command::new(timeout_bin())
        .args(["-sALRM", "30"])
        .arg(timeout_bin())
        .args(["-sUSR1", "25"])
        .arg(&script)
        .arg("200")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || dir.join("running").exists()),
        "the command never started"
    );
    let kill = Command::new("kill")
        .args(["-ALRM", &t.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = t.wait().unwrap();
    assert_eq!(status.code(), Some(124));
    assert!(dir.join("received").exists());
    assert!(start.elapsed() < Duration::from_secs(20));
}

// ---- init-parent.sh ----

/// As pid 1 of a new pid namespace (where its parent is "init" already), timeout still runs
/// and times out its command.
#[test]
fn timeout_as_pid_1_of_a_namespace() {
    let o = Command::new("unshare")
        .args(["--pid", "--fork"])
        .arg(timeout_bin())
        .args([".1", "sleep", "10"])
        .stdin(Stdio::null())
        .output()
        .expect("unshare (util-linux) is needed for this test");
    assert_eq!(code(&o), Some(124), "{}", err(&o));
}

// ---- timeout-blocked.pl ----

/// Started with SIGALRM blocked, timeout still times out (its timer is not a signal).
#[test]
fn a_blocked_sigalrm_does_not_stop_the_timeout() {
    let o = Command::new("python3")
        .args([
            "-c",
            "import os, signal, sys\n\
             signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])\n\
             os.execv(sys.argv[1], ['timeout', '.1', 'sleep', '10'])",
        ])
        .arg(timeout_bin())
        .stdin(Stdio::null())
        .output()
        .expect("python3 is needed for this test");
    assert_eq!(code(&o), Some(124), "{}", err(&o));
}

// ---- the command line ----

#[test]
fn argv0_timeout_and_the_subcommand_are_the_same_program() {
    let o = Command::new(bin("cg-childguard"))
        .args(["timeout", "-s", "KILL", ".1", "sleep", "10"])
        .output()
        .unwrap();
    assert_eq!(code(&o), Some(137), "{}", err(&o));
    let o = timeout(&["--help"]);
    assert_eq!(code(&o), Some(0));
    assert!(out(&o).contains("--kill-after"));
    assert_eq!(code(&timeout(&["--version"])), Some(0));
}
