//! More of what tini does than tini's own tests check: every catchable signal forwarded, CMD
//! owning the terminal, verbosity 0, and the informational options.

use std::process::Stdio;
use std::time::Duration;

use childguard_tests::init::*;
use childguard_tests::*;

use super::{err, term_and_expect};

/// Signals other than the stop signals are forwarded too (tini forwards every catchable one):
/// HUP, QUIT, WINCH, USR1, ALRM, CONT, PIPE and a real-time one each reach CMD's handler, one
/// after the other, each acknowledged before the next is sent.
#[test]
fn every_catchable_signal_is_forwarded() {
    let signals = [
        ("HUP", libc::SIGHUP),
        ("QUIT", libc::SIGQUIT),
        ("WINCH", libc::SIGWINCH),
        ("USR1", libc::SIGUSR1),
        ("ALRM", libc::SIGALRM),
        ("PIPE", libc::SIGPIPE),
        ("URG", libc::SIGURG),
    ];
    for name in NAMES {
        let dir = fresh_dir(&format!("init-forward-{name:?}"));
        let (up, log) = (dir.join("up"), dir.join("log"));
        let mut script = String::new();
        for (sig, _) in signals {
            script.push_str(&format!("trap 'echo {sig} >> {}' {sig}; ", log.display()));
        }
        script.push_str(&format!(
            "echo > {}; n=0; while [ $n -lt 1200 ]; do n=$((n+1)); sleep 0.05; done",
            up.display()
        ));
        let child = name
            .command(&["-s", "--", "sh", "-c", &script])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert!(
            eventually(Duration::from_secs(30), || up.exists()),
            "{name:?}: not up"
        );
        for (i, (sig, signo)) in signals.iter().enumerate() {
            send(child.id(), *signo);
            let seen = || std::fs::read_to_string(&log).unwrap_or_default();
            assert!(
                eventually(Duration::from_secs(30), || seen().lines().count() > i),
                "{name:?}: SIG{sig} never reached CMD; CMD saw {:?}",
                seen()
            );
            assert_eq!(seen().lines().nth(i), Some(*sig), "{name:?}");
        }
        term_and_expect(child, 128 + libc::SIGTERM, &format!("{name:?}"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// At a terminal, CMD's process group is the terminal's foreground group (tini's
/// `isolate_child`): its `tpgid` is its own group, which it leads. So a `^C` typed there
/// reaches CMD from the terminal driver, not through init.
#[test]
fn at_a_terminal_cmd_owns_the_foreground() {
    for name in NAMES {
        let argv: Vec<String> = name
            .argv()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        // Fields 1, 5 and 8 of /proc/$$/stat: pid, pgrp, tpgid ("sh" has no space).
        let script = "trap 'echo got-INT; exit 7' INT; set -- $(cat /proc/$$/stat); \
                      echo \"ids $1 $5 $8\"; echo ready; \
                      n=0; while [ $n -lt 1200 ]; do n=$((n+1)); sleep 0.05; done";
        let mut full: Vec<&str> = argv.iter().map(String::as_str).collect();
        full.extend(["-s", "--", "sh", "-c", script]);
        let Some(run) = childguard_tests::terminal::at_a_terminal(
            "at_a_terminal_cmd_owns_the_foreground",
            &full,
            &["ready"],
        ) else {
            return;
        };
        let ids: Vec<&str> = run
            .output
            .lines()
            .find_map(|l| l.trim().strip_prefix("ids "))
            .unwrap_or_else(|| panic!("{name:?}: no ids line: {}", run.output))
            .split_whitespace()
            .collect();
        assert_eq!(ids.len(), 3, "{name:?}: {}", run.output);
        assert_eq!(
            ids[0], ids[1],
            "{name:?}: CMD does not lead its group: {}",
            run.output
        );
        assert_eq!(
            ids[1], ids[2],
            "{name:?}: CMD's group is not the foreground: {}",
            run.output
        );
        assert!(run.output.contains("got-INT"), "{name:?}: {}", run.output);
        assert_eq!(run.exit, 7, "{name:?}: {}", run.output);
    }
}

/// `TINI_VERBOSITY=0` silences the warnings (tini's `PRINT_WARNING` needs verbosity > 0), and
/// `-w`'s lines with them.
#[test]
fn verbosity_0_silences_warnings() {
    for name in NAMES {
        let o = name
            .command(&["-w", "--", "sh", "-c", "(true &); sleep 0.2"])
            .env("TINI_VERBOSITY", "0")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{name:?}: {}", err(&o));
        assert_eq!(err(&o), "", "{name:?}");
    }
}

/// `--version` (as the only argument, as tini), `-h` and `-l` print on stdout and exit 0.
#[test]
fn version_help_and_license_exit_0() {
    for name in NAMES {
        for (arg, needle) in [("--version", "init"), ("-h", "-e CODE"), ("-l", "MIT")] {
            let o = name.command(&[arg]).output().unwrap();
            assert_eq!(o.status.code(), Some(0), "{name:?} {arg}: {}", err(&o));
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.contains(needle), "{name:?} {arg}: {out}");
        }
    }
}

/// Contained, a CMD that exits with its cgroup empty is closed without the event loop's
/// thread: nothing waits on the cgroup, and the loop starts its thread on the first wait
/// (`core/event_loop.rs`), so `init -- true` runs one thread. CMD prints its own cgroup (the
/// precondition: it was contained) and its parent's threads.
#[test]
fn a_contained_cmd_that_exits_alone_costs_no_loop_thread() {
    for name in NAMES {
        let o = name
            .command(&[
                "--",
                "sh",
                "-c",
                "grep '^0::' /proc/self/cgroup; cat /proc/$PPID/task/*/comm",
            ])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{name:?}: {}", err(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        let mut lines = out.lines();
        let cgroup = lines.next().unwrap_or_default();
        assert!(
            cgroup.contains("/childguard-"),
            "{name:?}: precondition: CMD in a cgroup of its own, got {out:?}: {}",
            err(&o)
        );
        let threads: Vec<&str> = lines.collect();
        assert_eq!(threads.len(), 1, "{name:?}: init's threads: {threads:?}");
    }
}
