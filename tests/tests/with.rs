//! `childguard with` (issue 15, item 4): servers started and made ready, a command run against
//! them, every server closed after; a server dying early fails the run with its output tail.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use childguard_tests::command::{childguard, childguard_within, exited_saying, on_path, stderr};
use childguard_tests::*;

/// redis on a Unix socket in a private directory: ready when the socket accepts, the client
/// runs, and afterwards no redis is left serving on it.
#[test]
fn redis_is_ready_for_the_client_and_closed_after() {
    if !on_path(
        "redis_is_ready_for_the_client_and_closed_after",
        "redis-server",
        "apt-get install redis-server",
    ) {
        return;
    }
    let dir = fresh_dir("with-redis");
    let sock = dir.join("redis.sock");
    let sock_s = sock.to_str().unwrap();
    let ready = format!("unix:{sock_s}");
    let dir_s = dir.to_str().unwrap();
    // `with --ready unix:SOCK -- redis-server … -- CMD…`
    let with_redis = |cmd: &[&str]| {
        let mut args = vec![
            "with",
            "--ready",
            &ready,
            "--",
            "redis-server",
            "--port",
            "0",
            "--unixsocket",
            sock_s,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir_s,
            "--",
        ];
        args.extend(cmd);
        childguard(&args)
    };
    let o = with_redis(&["redis-cli", "-s", sock_s, "ping"]);
    exited_saying(&o, 0, &[]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "PONG",
        "{}",
        stderr(&o)
    );
    // Closed: nothing accepts on the socket any more (redis removes it on HUP's shutdown).
    assert!(
        std::os::unix::net::UnixStream::connect(&sock).is_err(),
        "redis still serving after the run"
    );
    // The command's own status is passed on.
    let o = with_redis(&["sh", "-c", "exit 7"]);
    exited_saying(&o, 7, &[]);
}

/// A server that exits before it is ready fails the run at once (125) with its output tail,
/// and CMD never runs.
#[test]
fn a_server_dying_before_ready_fails_at_once_with_its_output() {
    fails_without_running_cmd(
        "with-cmd-ran",
        &[
            "--ready",
            "unix:/nonexistent/childguard-with.sock",
            "--",
            "sh",
            "-c",
            "echo boom-before-ready >&2; exit 3",
        ],
        // At once.
        Duration::from_secs(10),
        &["boom-before-ready"],
        "CMD ran without a ready server",
    );
}

/// `with SERVERS… -- touch MARKER`, which must fail (125) within `bound`, saying each of
/// `needles`, and never run CMD (`why`: what running it would mean).
fn fails_without_running_cmd(
    name: &str,
    servers: &[&str],
    bound: Duration,
    needles: &[&str],
    why: &str,
) {
    let marker = scratch(name);
    let _ = std::fs::remove_file(&marker);
    let mut args = vec!["with"];
    args.extend(servers);
    args.extend(["--", "touch", marker.to_str().unwrap()]);
    let o = childguard_within(bound, &args);
    exited_saying(&o, 125, needles);
    assert!(!marker.exists(), "{why}");
}

/// Runs whose servers decide how they end, each within a generous bound (or none) and with
/// its exit code and what its stderr must say:
///
/// - a server that exits while CMD runs ends the run at once (125), with its output tail;
/// - two servers, each with its own readiness; both closed after;
/// - `--ready-any`: the first condition that holds. The server never sends `READY=1`; its
///   line makes it ready, long before the 60 s readiness timeout a wait for `READY=1` would
///   reach (the 30 s bound).
#[test]
fn runs_end_as_their_servers_and_conditions_say() {
    /// One run: what follows `with`, a bound on its length (s) if any, its exit code, and
    /// what its stderr says.
    struct Run {
        case: &'static str,
        args: &'static [&'static str],
        within: Option<u64>,
        code: i32,
        says: &'static [&'static str],
    }
    let cases = [
        Run {
            case: "a server dying while the command runs fails the run",
            args: &[
                "--ready",
                "line:server-started",
                "--",
                "sh",
                "-c",
                "echo server-started; sleep 0.3; exit 4",
                "--",
                "sleep",
                "60",
            ],
            within: Some(30),
            code: 125,
            says: &["exited while CMD ran", "server-started"],
        },
        Run {
            case: "two servers, then the command",
            args: &[
                "--ready",
                "line:one",
                "--",
                "sh",
                "-c",
                "echo one; exec sleep 60",
                "--then",
                "--ready",
                "line:two",
                "--",
                "sh",
                "-c",
                "echo two; exec sleep 60",
                "--",
                "true",
            ],
            within: None,
            code: 0,
            says: &[],
        },
        Run {
            case: "--ready-any is ready by the first condition that holds",
            args: &[
                "--ready-any",
                "notify",
                "--ready-any",
                "line:server-up",
                "--ready-timeout",
                "60s",
                "--",
                "sh",
                "-c",
                "echo server-up; exec sleep 60",
                "--",
                "true",
            ],
            within: Some(30),
            code: 0,
            says: &[],
        },
    ];
    for Run {
        case,
        args,
        within,
        code,
        says,
    } in cases
    {
        let mut argv = vec!["with"];
        argv.extend(args);
        let began = Instant::now();
        let o = childguard(&argv);
        let took = began.elapsed();
        if let Some(bound) = within {
            assert!(
                took < Duration::from_secs(bound),
                "{case}: took {took:?}: {}",
                stderr(&o)
            );
        }
        assert_eq!(o.status.code(), Some(code), "{case}: {}", stderr(&o));
        for needle in says {
            assert!(
                stderr(&o).contains(needle),
                "{case}: {needle:?} not in: {}",
                stderr(&o)
            );
        }
    }
}

/// `--ready` twice: every one must hold. The line comes, `READY=1` never does: the run fails
/// at the readiness timeout, naming what never came, and CMD does not run.
#[test]
fn ready_given_twice_waits_for_both() {
    fails_without_running_cmd(
        "with-all-cmd-ran",
        &[
            "--ready",
            "notify",
            "--ready",
            "line:server-up",
            "--ready-timeout",
            "2s",
            "--",
            "sh",
            "-c",
            "echo server-up; exec sleep 60",
        ],
        // The 2 s readiness timeout and the close.
        Duration::from_secs(30),
        &["READY=1"],
        "CMD ran although READY=1 never came",
    );
}

/// `--end WORD`: a server's arguments run up to WORD, so `--` and `--then` among them reach the
/// server intact (`env -- …`, `runuser -u pg -- postgres …`, `sh -c '…' arg -- arg`); after
/// WORD, `--then` starts another server and `--` CMD, as without `--end`.
#[test]
fn a_servers_own_double_dash_reaches_it_with_end() {
    let argv_file = scratch("with-end-argv");
    let _ = std::fs::remove_file(&argv_file);
    let argv_s = argv_file.to_str().unwrap();
    let script = format!("printf '%s\\n' \"$@\" > '{argv_s}'; echo server-up; exec sleep 60");
    let o = childguard(&[
        "with",
        "--ready",
        "line:server-up",
        "--end",
        "END",
        "--",
        "env",
        "--",
        "sh",
        "-c",
        &script,
        "sh",
        "a",
        "--",
        "b",
        "--then",
        "c",
        "END",
        "--then",
        "--ready",
        "line:two",
        "--",
        "sh",
        "-c",
        "echo two; exec sleep 60",
        "--",
        "cat",
        argv_s,
    ]);
    exited_saying(&o, 0, &[]);
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "a\n--\nb\n--then\nc\n",
        "the server's arguments as it got them; {}",
        stderr(&o)
    );
    let _ = std::fs::remove_file(&argv_file);
}

/// A signal while the servers start (a Ctrl-C during a slow start-up) ends the run before
/// CMD: the server starting is closed once it is up, CMD never runs, exit 128+N. The server
/// is ready only when the test writes its fifo, after childguard said it got the signal.
#[test]
fn a_signal_while_the_servers_start_ends_the_run_without_cmd() {
    let dir = fresh_dir("with-start-signal");
    let fifo = dir.join("go");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let marker = dir.join("cmd-ran");
    let script = format!(
        "echo server-starting; read x < '{}'; echo server-up; exec sleep 60",
        fifo.display()
    );
    let mut child = Command::new(bin("cg-childguard"))
        .args([
            "with",
            "--ready",
            "line:server-up",
            "--",
            "sh",
            "-c",
            &script,
            "--",
        ])
        .arg("touch")
        .arg(&marker)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning cg-childguard");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let mut wait_for = |text: &str| {
        for line in lines.by_ref() {
            let line = line.unwrap_or_default();
            seen.push_str(&line);
            seen.push('\n');
            if line.contains(text) {
                return;
            }
        }
        panic!("childguard's stderr ended before {text:?}:\n{seen}");
    };
    wait_for("server-starting");
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill(1)");
    assert!(sent.success());
    wait_for("received SIGINT while starting the servers");
    // Now the server may become ready.
    std::fs::write(&fifo, "go\n").expect("writing the fifo");
    let status = child.wait().expect("waiting for cg-childguard");
    assert_eq!(status.code(), Some(128 + libc::SIGINT));
    assert!(!marker.exists(), "CMD ran after the signal");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_name_the_problem() {
    for (args, needle) in [
        (&["with"][..], "missing"),
        (
            &["with", "--ready", "bogus:x", "--", "a", "--", "b"],
            "bogus:x",
        ),
        (&["with", "--", "a"], "missing `-- CMD`"),
        (&["with", "--ready"], "--ready needs a value"),
        (
            &[
                "with",
                "--ready",
                "notify",
                "--ready-any",
                "line:x",
                "--",
                "a",
                "--",
                "b",
            ][..],
            "cannot be mixed",
        ),
        (
            &[
                "with", "--ready", "line:x", "--ready", "line:y", "--", "a", "--", "b",
            ][..],
            "at most one line:TEXT",
        ),
        (
            &["with", "--end", "END", "--", "a", "--", "b"][..],
            "never reach `END`",
        ),
        (
            &["with", "--end", "--", "--", "a", "--", "b"][..],
            "invalid value for --end",
        ),
        (
            &["with", "--end", "END", "--", "a", "END", "b"][..],
            "comes `-- CMD` or `--then`, not \"b\"",
        ),
        (
            &["with", "--end", "END", "--", "a", "END"][..],
            "missing `-- CMD` after `END`",
        ),
    ] {
        let o = childguard(args);
        assert_eq!(o.status.code(), Some(125), "{args:?}");
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
}
