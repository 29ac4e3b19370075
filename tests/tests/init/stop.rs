//! The engine's stop done within a budget: a server that ignores `TERM` ends by the budget,
//! daemons it double-forked are gone when init exits, the report says 0 processes are left,
//! a second stop signal skips a rung, and the ready file comes and goes. Each runs with a
//! cgroup for CMD (the default, where one can be made) and with `--no-contain` (the sweep of
//! the PID namespace, or of init's descendants, alone).

use std::process::Stdio;
use std::time::{Duration, Instant};

use childguard_tests::init::*;
use childguard_tests::*;

use super::{err, term_and_expect};

/// With and without a cgroup for CMD.
const CONTAIN: [&[&str]; 2] = [&[], &["--no-contain"]];

/// The margin over the budget a stop may take on a loaded machine: from the test's `kill` to
/// its `wait` returning there are the KILL's delivery, the cgroup emptying, the reaps, the
/// namespace's end and `unshare`'s exit, each a wake-up that a machine with two CPU hogs and
/// every other test of this binary running may delay. Budget + slack stays below the 10 s a
/// default engine grace would give, which is what the test tells apart.
const SLACK: Duration = Duration::from_secs(6);

/// A server that ignores TERM (and so does the sleep it waits for), as PID 1: the first TERM
/// climbs the ladder fitted to a 2 s budget, so it ends by KILL after ~2 s — not at the
/// engine's KILL — and nothing is left.
#[test]
fn a_server_that_ignores_term_ends_within_the_budget() {
    if !pid_namespaces("a_server_that_ignores_term_ends_within_the_budget") {
        return;
    }
    // Two ways to the KILL within the budget: by default the TERM rung is skipped (the
    // server ignores TERM: `SigIgn`), so KILL goes out at once and the report says so; with
    // `NOSKIP` the TERM grace, scaled to the budget, is waited out first.
    for (ladder, skipped) in [("TERM:8s,KILL:1s", true), ("NOSKIP,TERM:8s,KILL:1s", false)] {
        for name in NAMES {
            for contain in CONTAIN {
                let args = [
                    contain,
                    &[
                        "--ladder",
                        ladder,
                        "--stop-budget",
                        "2s",
                        "--",
                        "sh",
                        "-c",
                        "trap '' TERM; sleep 1000 & wait",
                    ],
                ]
                .concat();
                let child = name.as_pid1(&args).stderr(Stdio::piped()).spawn().unwrap();
                let init = init_under_unshare(&child);
                await_descendants(init, 2);
                let sent = Instant::now();
                send(init, libc::SIGTERM);
                let o = child.wait_with_output().unwrap();
                let took = sent.elapsed();
                let e = err(&o);
                let what = format!("{name:?} {contain:?} {ladder}");
                assert_eq!(o.status.code(), Some(128 + libc::SIGKILL), "{what}: {e}");
                if skipped {
                    // Skipped, and the KILL sent at once — not after the 2 s TERM grace. The
                    // offsets are not compared with 0: a loaded machine may preempt the close
                    // between its start and the skip.
                    let term = rung_ms(&e, "TERM");
                    let kill = rung_ms(&e, "KILL");
                    assert!(
                        e.contains("ms skipped: ignored by the server")
                            && term.is_some_and(|t| t < 1000.0)
                            && kill.is_some_and(|k| k < 1000.0),
                        "{what}: TERM at {term:?} ms, KILL at {kill:?} ms: {e}"
                    );
                } else {
                    // The TERM grace was waited out (the ladder, not an immediate KILL)…
                    assert!(!e.contains("skipped"), "{what}: {e}");
                    assert!(took >= Duration::from_millis(1900), "{what}: {took:?} {e}");
                }
                // …and the KILL came by the budget, not by an engine 10 s later.
                assert!(
                    took < Duration::from_secs(2) + SLACK,
                    "{what}: {took:?} {e}"
                );
                assert!(e.contains("0 processes left"), "{what}: {e}");
            }
        }
    }
}

/// The offset in ms of the first rung sending `signal` in a stop report (`TERM +0.0ms
/// skipped…`, `KILL (cgroup) reached 2 +0.2ms`): the `+…ms` after the signal's name.
fn rung_ms(report: &str, signal: &str) -> Option<f64> {
    let stop = report
        .lines()
        .find(|l| l.contains(": stop: ") && l.contains('['))?;
    let rest = &stop[stop.find(&format!(" {signal} "))? + signal.len() + 2..];
    let plus = &rest[rest.find('+')? + 1..];
    plus[..plus.find("ms")?].parse().ok()
}

/// CMD double-forks two daemons — one `setsid`, one ignoring TERM — then runs on. Not PID 1
/// (`-s`), so a survivor would outlive init and be seen: at the stop both are swept (the one
/// ignoring TERM by the KILL rung, its TERM skipped), init exits with CMD's 143, and the report
/// names them.
#[test]
fn double_forked_daemons_are_gone_at_the_stop() {
    for name in NAMES {
        for contain in CONTAIN {
            let dir = scratch(&format!("init-daemons-{name:?}-{}", contain.len()));
            std::fs::create_dir_all(&dir).unwrap();
            let (a, b) = (dir.join("a"), dir.join("b"));
            for f in [&a, &b] {
                let _ = std::fs::remove_file(f);
            }
            let script = format!(
                "(setsid sleep 1000 & echo $! > {a}.t; mv {a}.t {a}); \
                 (sh -c \"trap '' TERM; exec sleep 1001\" & echo $! > {b}.t; mv {b}.t {b}); \
                 exec sleep 1002",
                a = a.display(),
                b = b.display()
            );
            let args = [
                contain,
                &["-s", "--stop-budget", "2s", "--", "sh", "-c", &script],
            ]
            .concat();
            let child = name.command(&args).stderr(Stdio::piped()).spawn().unwrap();
            assert!(eventually(Duration::from_secs(30), || a.exists() && b.exists()));
            let pid = |f: &std::path::Path| -> u32 {
                std::fs::read_to_string(f).unwrap().trim().parse().unwrap()
            };
            // Exec'd: `setsid` is `sleep` now, and the other ignores TERM as `sleep`.
            let (da, db) = (await_exec(pid(&a), "sleep"), await_exec(pid(&b), "sleep"));
            // Re-parented to init (the subreaper) once their subshells exit.
            assert!(eventually(Duration::from_secs(30), || {
                proc_ppid(da) == Some(child.id()) && proc_ppid(db) == Some(child.id())
            }));
            send(child.id(), libc::SIGTERM);
            let o = child.wait_with_output().unwrap();
            let e = err(&o);
            assert_eq!(
                o.status.code(),
                Some(128 + libc::SIGTERM),
                "{name:?} {contain:?}: {e}"
            );
            assert!(
                !is_alive(da) && !is_alive(db),
                "{name:?} {contain:?}: daemons left: {e}"
            );
            assert!(e.contains("0 processes left"), "{name:?} {contain:?}: {e}");
            if contain.is_empty() {
                assert!(
                    e.contains("(cgroup)") || e.contains("swept"),
                    "{name:?}: {e}"
                );
            } else {
                assert!(
                    e.contains(&format!("{da} (sleep) after TERM")),
                    "{name:?}: {e}"
                );
                assert!(
                    e.contains(&format!("{db} (sleep) after KILL")),
                    "{name:?}: {e}"
                );
                // The sweep is the library's climb: the TERM that `db` ignores is skipped for
                // it (KILL at once), not waited out.
                let db_line = e.split("; ").find(|p| p.contains(&format!("{db} (sleep)")));
                assert!(
                    db_line.is_some_and(|p| p.contains("(TERM skipped (ignored))")),
                    "{name:?}: {e}"
                );
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// As PID 1 with `--no-contain`: everything left in the namespace is swept — a `setsid`
/// daemon that ignores TERM too — and the report counts 0 left before init exits (after
/// which the kernel would kill the namespace anyway: the report is what shows it was us).
#[test]
fn as_pid1_the_whole_namespace_is_swept() {
    if !pid_namespaces("as_pid1_the_whole_namespace_is_swept") {
        return;
    }
    for name in NAMES {
        let script = "(setsid sh -c \"trap '' TERM; exec sleep 1000\" &); exec sleep 1001";
        let args = [
            "--no-contain",
            "--stop-budget",
            "2s",
            "--",
            "sh",
            "-c",
            script,
        ];
        let child = name.as_pid1(&args).stderr(Stdio::piped()).spawn().unwrap();
        let init = init_under_unshare(&child);
        // Both exec'd: the daemon ignores TERM as `sleep` now.
        await_named_descendants(init, "sleep", 2);
        send(init, libc::SIGTERM);
        let o = child.wait_with_output().unwrap();
        let e = err(&o);
        assert_eq!(o.status.code(), Some(128 + libc::SIGTERM), "{name:?}: {e}");
        assert!(e.contains("(sleep) after KILL"), "{name:?}: {e}");
        assert!(e.contains("0 processes left"), "{name:?}: {e}");
    }
}

/// A second TERM skips to the next rung: with a 60 s TERM grace, a CMD that traps TERM and
/// runs on is KILLed as soon as the second TERM comes.
#[test]
fn a_second_stop_signal_skips_to_the_next_rung() {
    for name in NAMES {
        let dir = scratch(&format!("init-skip-{name:?}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (up, got) = (dir.join("up"), dir.join("got"));
        for f in [&up, &got] {
            let _ = std::fs::remove_file(f);
        }
        let script = format!(
            "trap 'echo > {g}' TERM; echo > {u}; while :; do sleep 0.05; done",
            g = got.display(),
            u = up.display()
        );
        let args = [
            "-s",
            "--ladder",
            "TERM:60s,KILL:1s",
            "--stop-budget",
            "61s",
            "--",
            "sh",
            "-c",
            &script,
        ];
        let child = name.command(&args).stderr(Stdio::piped()).spawn().unwrap();
        // The trap is set once `up` exists.
        assert!(
            eventually(Duration::from_secs(30), || up.exists()),
            "{name:?}: CMD not up"
        );
        send(child.id(), libc::SIGTERM);
        assert!(
            eventually(Duration::from_secs(30), || got.exists()),
            "{name:?}: no TERM"
        );
        let second = Instant::now();
        term_and_expect(child, 128 + libc::SIGKILL, &format!("{name:?}"));
        assert!(
            second.elapsed() < Duration::from_secs(30),
            "{name:?}: {:?}",
            second.elapsed()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `--ready unix:PATH --ready-file F`: F appears once CMD accepts, and is gone when CMD gets
/// its first signal (CMD checks from its TERM handler, and says so in a file).
#[test]
fn the_ready_file_appears_when_ready_and_goes_at_the_stop() {
    for name in NAMES {
        let dir = fresh_dir(&format!("init-ready-{name:?}"));
        let (sock, ready, seen) = (dir.join("s"), dir.join("ready"), dir.join("seen"));
        let server = format!(
            "import os, signal, socket, sys, time\n\
             def stop(*_):\n    open({seen:?}, 'w').write(str(os.path.exists({ready:?})))\n    sys.exit(0)\n\
             signal.signal(signal.SIGTERM, stop)\n\
             time.sleep(0.3)\n\
             s = socket.socket(socket.AF_UNIX); s.bind({sock:?}); s.listen()\n\
             while True: time.sleep(1)\n",
            seen = seen.to_str().unwrap(),
            ready = ready.to_str().unwrap(),
            sock = sock.to_str().unwrap(),
        );
        let unix = format!("unix:{}", sock.display());
        let ready_arg = ready.to_str().unwrap();
        let args = [
            "-s",
            "--ready",
            &unix,
            "--ready-file",
            ready_arg,
            "--",
            "python3",
            "-c",
            &server,
        ];
        let child = name.command(&args).stderr(Stdio::piped()).spawn().unwrap();
        assert!(
            eventually(Duration::from_secs(30), || ready.exists()),
            "{name:?}: no ready file"
        );
        term_and_expect(child, 0, &format!("{name:?}"));
        assert_eq!(std::fs::read_to_string(&seen).unwrap(), "False", "{name:?}");
        assert!(!ready.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
