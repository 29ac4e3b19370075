//! Restarts (issue 32 item 1): a server that crashes twice then stays up is restarted twice and
//! each start has its own socket; a crash loop gives up after the limit, naming the exits and
//! their output; a close during the delay, during a start's readiness wait, or while running
//! ends everything at once with nothing left; exit 0 is not restarted on failure; a panicking
//! `make` gives up. Every step waits for a fact (a line read, a file written, a generation),
//! never for a time.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use childguard::{
    Capture, ChildHandle, ErrorKind, Ready, Restart, RestartPolicy, SocketMode, Supervisor,
};
use childguard_tests::{eventually, is_alive, ladder, scratch};

/// Counts its starts in `$1` (its pid in `$1.pidN`, written first), says `start N pid P` on its socket, then waits for a word:
/// `crash` makes it say so on stderr and exit 3; anything else (or EOF) keeps it running.
const COUNTED: &str = r#"n=$(($(cat "$1" 2>/dev/null || echo 0) + 1)); echo $$ > "$1.pid$n"; echo $n > "$1"
echo "start $n pid $$"
read word
if [ "$word" = crash ]; then echo "crash $n" >&2; exit 3; fi
exec sleep 1000"#;

fn counted_builder(counter: &Path) -> childguard::Builder {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", COUNTED, "sh"]).arg(counter);
    ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .capture(Capture::stderr())
        .ladder(ladder("TERM:2s,KILL:5s"))
}

fn fresh(name: &str) -> PathBuf {
    let path = scratch(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// Reads the running generation's `start N pid P` line from its socket.
fn greeting(sup: &Supervisor) -> (u64, u32) {
    let socket: UnixStream = sup
        .with_current(|h| h.socket().expect("socket").try_clone().expect("clone"))
        .expect("a generation runs");
    let mut line = String::new();
    BufReader::new(socket).read_line(&mut line).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!((words[0], words[2]), ("start", "pid"), "{line}");
    (words[1].parse().unwrap(), words[3].parse().unwrap())
}

fn say(sup: &Supervisor, word: &str) {
    sup.with_current(|h| writeln!(h.socket().unwrap(), "{word}").unwrap())
        .expect("a generation runs");
}

#[test]
fn a_server_that_crashes_twice_then_stays_up_is_restarted_twice_with_a_new_socket_each_time() {
    let counter = fresh("sup-twice");
    let c = counter.clone();
    let restart = Restart::new(RestartPolicy::OnFailure)
        .delay(Duration::from_millis(10), Duration::from_millis(50))
        .limit(5, Duration::from_secs(60));
    let sup = Supervisor::start(move || counted_builder(&c), restart).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    sup.on_change(move |g| s.lock().unwrap().push(g));
    let mut pids = Vec::new();
    for generation in 1..=3u64 {
        assert_eq!(
            sup.wait_for_start(generation - 1, Duration::from_secs(30))
                .unwrap(),
            generation
        );
        let (n, pid) = greeting(&sup);
        assert_eq!(n, generation, "the start's own socket");
        pids.push(pid);
        if generation < 3 {
            say(&sup, "crash");
        }
    }
    assert_eq!(sup.restarts(), 2);
    assert_eq!(
        *seen.lock().unwrap(),
        vec![2, 3],
        "on_change for each restart"
    );
    let exits = sup.exits();
    assert_eq!(exits.len(), 2, "{exits:?}");
    for (i, exit) in exits.iter().enumerate() {
        assert_eq!(exit.status.and_then(|s| s.code()), Some(3), "{exit}");
        assert!(exit
            .output_tail
            .as_deref()
            .unwrap_or("")
            .contains(&format!("crash {}", i + 1)));
    }
    let report = sup.close().unwrap();
    assert_eq!(report.restarts, 2);
    assert_eq!(
        report.previous.len(),
        2,
        "the crashed generations were closed (reaped)"
    );
    assert!(report.last.is_some() && report.gave_up.is_none());
    for pid in pids {
        assert!(!is_alive(pid), "generation pid {pid} left");
    }
}

/// Each exit names the output its start wrote before it exited, in every one of several crash
/// loops: the exit (a pidfd) and the last output (a pipe) are sources of the same loop, and a
/// round may hand the exit over first; the supervisor reads the pipes before it records the
/// exit (without that, some exits had no tail: the Python suite's crash-loop test failed on a
/// message with none).
#[test]
fn a_crash_loop_gives_up_after_the_limit_naming_the_exits_and_their_output() {
    for round in 0..10 {
        let restart = Restart::new(RestartPolicy::OnFailure)
            .delay(Duration::ZERO, Duration::ZERO)
            .limit(3, Duration::from_secs(60));
        let make = || {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", "echo boom-$$ >&2; exit 7"]);
            ChildHandle::builder(cmd).capture(Capture::stderr())
        };
        let sup = Supervisor::start(make, restart).unwrap();
        let mut after = 0;
        let e = loop {
            match sup.wait_for_start(after, Duration::from_secs(30)) {
                Ok(g) => after = g,
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), ErrorKind::CrashLoop, "{e}");
        let text = e.to_string();
        assert!(
            text.contains("3 starts within") && text.contains("exit 7"),
            "{text}"
        );
        assert_eq!(
            text.matches("boom-").count(),
            3,
            "round {round}: a tail per exit: {text}"
        );
        assert!(sup.ended());
        let exits = sup.exits();
        assert_eq!(exits.len(), 3, "{exits:?}");
        for exit in &exits {
            assert!(
                exit.output_tail
                    .as_deref()
                    .is_some_and(|t| t.contains("boom-")),
                "round {round}: an exit without its output: {exits:?}"
            );
        }
        let report = sup.close().unwrap();
        assert_eq!(report.restarts, 2);
        assert!(report.gave_up.is_some_and(|g| g.contains("exit 7")));
    }
}

#[test]
fn a_close_during_the_delay_ends_it_at_once() {
    let counter = fresh("sup-delay");
    let c = counter.clone();
    let restart =
        Restart::new(RestartPolicy::Always).delay(Duration::from_secs(30), Duration::from_secs(30));
    let sup = Supervisor::start(move || counted_builder(&c), restart).unwrap();
    let (_, pid) = greeting(&sup);
    say(&sup, "crash");
    assert!(
        eventually(Duration::from_secs(30), || sup.exits().len() == 1),
        "the crash was not seen"
    );
    let began = Instant::now();
    let report = sup.close().unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "took {:?}",
        began.elapsed()
    );
    assert!(report.last.is_none(), "nothing ran during the delay");
    assert_eq!(report.restarts, 0);
    assert!(!is_alive(pid));
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap().trim(),
        "1",
        "no second start"
    );
}

#[test]
fn a_close_during_a_restarts_readiness_wait_ends_it_at_once_with_nothing_left() {
    let counter = fresh("sup-ready");
    let c = counter.clone();
    let starts = Arc::new(AtomicU32::new(0));
    let make = move || {
        let builder = counted_builder(&c);
        match starts.fetch_add(1, Ordering::SeqCst) {
            0 => builder,
            // A readiness that never comes: the restart waits in it.
            _ => builder
                .ready(Ready::output("never printed"))
                .ready_timeout(Duration::from_secs(60)),
        }
    };
    let restart = Restart::new(RestartPolicy::Always).delay(Duration::ZERO, Duration::ZERO);
    let sup = Supervisor::start(make, restart).unwrap();
    let (_, first) = greeting(&sup);
    say(&sup, "crash");
    assert!(
        eventually(Duration::from_secs(30), || std::fs::read_to_string(
            &counter
        )
        .is_ok_and(|n| n.trim() == "2")),
        "the restart did not begin"
    );
    let began = Instant::now();
    let report = sup.close().unwrap();
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "took {:?}",
        began.elapsed()
    );
    assert!(report.last.is_none(), "the second start never became ready");
    assert_eq!(report.restarts, 0);
    assert!(!is_alive(first));
    let second: u32 = std::fs::read_to_string(format!("{}.pid2", counter.display()))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !is_alive(second),
        "the start broken off ({second}) was left"
    );
}

#[test]
fn on_failure_does_not_restart_a_clean_exit() {
    let make = || ChildHandle::builder(Command::new("true"));
    let sup = Supervisor::start(make, Restart::new(RestartPolicy::OnFailure)).unwrap();
    let e = sup.wait_for_start(1, Duration::from_secs(30)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Wait, "{e}");
    assert!(e.to_string().contains("does not restart"), "{e}");
    assert!(sup.ended());
    assert_eq!(sup.exits()[0].status.and_then(|s| s.code()), Some(0));
    let report = sup.close().unwrap();
    assert_eq!(report.restarts, 0);
    assert_eq!(report.exits.len(), 1);
}

#[test]
fn a_make_that_panics_gives_up_instead_of_hanging() {
    let calls = Arc::new(AtomicU32::new(0));
    let make = move || {
        if calls.fetch_add(1, Ordering::SeqCst) > 0 {
            panic!("no builder this time");
        }
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 1"]);
        ChildHandle::builder(cmd)
    };
    let sup = Supervisor::start(
        make,
        Restart::new(RestartPolicy::Always).delay(Duration::ZERO, Duration::ZERO),
    )
    .unwrap();
    let e = sup.wait_for_start(1, Duration::from_secs(30)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CrashLoop, "{e}");
    assert!(e.to_string().contains("panicked"), "{e}");
    drop(sup.close().unwrap());
}

#[test]
fn the_cli_restarts_on_failure_until_a_clean_exit_and_gives_up_on_a_crash_loop() {
    use childguard_tests::command::{childguard_within, stderr};
    let counter = fresh("sup-cli");
    let script = format!(
        "n=$(($(cat {c} 2>/dev/null || echo 0) + 1)); echo $n > {c}; [ $n -le 2 ] && exit 1; exit 0",
        c = counter.display()
    );
    let o = childguard_within(
        Duration::from_secs(30),
        &[
            "run",
            "--restart",
            "on-failure",
            "--restart-delay",
            "10ms..50ms",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(
        e.contains("start 3") && e.contains("restarted 2 time(s)"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(&counter).unwrap().trim(), "3");
    let o = childguard_within(
        Duration::from_secs(30),
        &[
            "run",
            "--restart",
            "always",
            "--restart-delay",
            "0",
            "--restart-limit",
            "3/60s",
            "--",
            "sh",
            "-c",
            "exit 5",
        ],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "{e}");
    assert!(
        e.contains("gave up: 3 starts within 60s") && e.contains("exit 5"),
        "{e}"
    );
    for (args, why) in [
        (
            &["run", "--restart", "sometimes", "--", "true"][..],
            "expected no, on-failure or always",
        ),
        (
            &[
                "run",
                "--restart",
                "always",
                "--restart-limit",
                "0/1s",
                "--",
                "true",
            ],
            "at least 1",
        ),
        (
            &[
                "run",
                "--restart",
                "always",
                "--restart-delay",
                "5s..1s",
                "--",
                "true",
            ],
            "below",
        ),
        (
            &["run", "--restart-delay", "1s", "--", "true"],
            "need --restart",
        ),
    ] {
        let o = childguard_tests::command::childguard(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(125), "{e}");
        assert!(e.contains(why), "{why:?} not in {e}");
    }
}

#[test]
fn the_tokio_face_awaits_a_restart_and_closes() {
    let counter = fresh("sup-tokio");
    let c = counter.clone();
    let restart = Restart::new(RestartPolicy::OnFailure).delay(Duration::ZERO, Duration::ZERO);
    childguard_tests::multi_thread_runtime().block_on(async move {
        let sup = Supervisor::start(move || counted_builder(&c), restart).unwrap();
        let (n, first) = greeting(&sup);
        assert_eq!(n, 1);
        say(&sup, "crash");
        let generation = sup
            .wait_for_start_async(1, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(generation, 2);
        let (n, second) = greeting(&sup);
        assert_eq!(n, 2);
        let report = sup.close_async().await.unwrap();
        assert_eq!(report.restarts, 1);
        assert!(!is_alive(first) && !is_alive(second));
    });
}

#[test]
fn with_restarts_a_crashed_server_while_cmd_runs_and_ends_the_run_when_it_gives_up() {
    use childguard_tests::command::{childguard_within, stderr};
    let counter = fresh("sup-with");
    let server = format!(
        "n=$(($(cat {c} 2>/dev/null || echo 0) + 1)); echo $n > {c}; [ $n -le 2 ] && exit 1; \
         exec sleep 1000",
        c = counter.display()
    );
    // CMD waits until the third start has happened (a fact in the counter file), then ends.
    let cmd = format!(
        "while [ \"$(cat {c})\" != 3 ]; do sleep 0.01; done; echo third",
        c = counter.display()
    );
    let o = childguard_within(
        Duration::from_secs(60),
        &[
            "with",
            "--restart",
            "on-failure",
            "--restart-delay",
            "10ms",
            "--",
            "sh",
            "-c",
            &server,
            "--",
            "sh",
            "-c",
            &cmd,
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "third");
    let o = childguard_within(
        Duration::from_secs(60),
        &[
            "with",
            "--restart",
            "always",
            "--restart-delay",
            "0",
            "--restart-limit",
            "3/60s",
            "--",
            "sh",
            "-c",
            "echo oops; exit 4",
            "--",
            "sleep",
            "60",
        ],
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(125), "{e}");
    assert!(
        e.contains("gave up: 3 starts within 60s") && e.contains("oops"),
        "{e}"
    );
}
