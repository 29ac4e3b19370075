//! Issue 23 item 3: `Ready::exec` — `pg_isready` against a real postgres, a probe that never
//! passes (its output in the error), a probe that overruns (killed and reaped), the server
//! exiting while a probe runs, and bad input.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, ErrorKind, ExecCheck, Ready};
use childguard_tests::postgres::{pg_tool, Cluster, INSTALL_POSTGRES};
use childguard_tests::*;

/// `pg_isready`: on PATH (postgresql-client) or beside the server.
fn pg_isready(test: &str) -> Option<PathBuf> {
    let on_path = PathBuf::from("/usr/bin/pg_isready");
    if on_path.is_file() {
        return Some(on_path);
    }
    pg_tool(test, "pg_isready", INSTALL_POSTGRES)
}

/// slowserver on stdin `/dev/null`, running until it is closed.
fn idle_server() -> std::process::Command {
    let mut cmd = slowserver(&["--ignore-eof"]);
    cmd.stdin(Stdio::null());
    cmd
}

#[test]
fn pg_isready_says_when_postgres_accepts() {
    let test = "pg_isready_says_when_postgres_accepts";
    let Some(cluster) = Cluster::new(test) else {
        return;
    };
    let Some(postgres) = pg_tool(test, "postgres", INSTALL_POSTGRES) else {
        return;
    };
    let Some(isready) = pg_isready(test) else {
        return;
    };
    let run = cluster.root.join("run");
    let probe = Ready::exec([
        isready.as_os_str(),
        "-h".as_ref(),
        run.as_os_str(),
        "-U".as_ref(),
        "postgres".as_ref(),
    ])
    .unwrap();
    let mut cmd = cluster.command(&postgres, "data");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let handle = ChildHandle::builder(cmd)
        .ready(probe)
        .ready_timeout(Duration::from_secs(60))
        .ladder(ladder("INT:10s,KILL:1s"))
        .spawn()
        .unwrap_or_else(|e| panic!("postgres not ready by pg_isready: {e}"));
    // Ready means it serves now: one query, no retry.
    let out = cluster.psql("select 40 + 2");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "42",
        "psql right after ready: {out:?}"
    );
    let report = handle.close().unwrap();
    assert!(report.status.is_some(), "{report}");
}

#[test]
fn a_probe_that_never_passes_puts_its_output_in_the_error() {
    let probe = Ready::exec([
        "sh",
        "-c",
        "echo probing-out-42; echo probing-err-43 >&2; exit 2",
    ])
    .unwrap();
    let began = Instant::now();
    let e = ChildHandle::builder(idle_server())
        .ready(probe)
        .ready_timeout(Duration::from_secs(4))
        .ladder(ladder("KILL:1s"))
        .spawn()
        .expect_err("the probe never passes");
    assert_eq!(e.kind(), ErrorKind::Ready, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("not ready after 4s")
            && text.contains("the probe `sh -c")
            && text.contains("exited with exit status: 2")
            && text.contains("probing-out-42")
            && text.contains("probing-err-43"),
        "{text}"
    );
    assert!(began.elapsed() < Duration::from_secs(10));
}

/// A probe that runs past its attempt timeout is killed and reaped by its close, and tried
/// again: each run appends its pid, and every one is gone when the spawn returns. The error
/// says the last run was killed, and which bound ended it.
#[test]
fn a_probe_that_overruns_is_killed_and_reaped() {
    let pid_file = scratch("probe-pid");
    let script = format!("echo $$ >> {}; exec sleep 60", pid_file.display());
    let check = ExecCheck::new(["sh", "-c", &script])
        .unwrap()
        .attempt_timeout(Duration::from_millis(200));
    let e = ChildHandle::builder(idle_server())
        .ready(check.into())
        .ready_timeout(Duration::from_secs(3))
        .ladder(ladder("KILL:1s"))
        .spawn()
        .expect_err("the probe never passes");
    let text = e.to_string();
    // The last run the ready timeout cut short says less than the finished one before it,
    // which the error keeps.
    assert!(
        text.contains("still running after 200ms (the attempt timeout), killed"),
        "{text}"
    );
    let pids: Vec<u32> = std::fs::read_to_string(&pid_file)
        .expect("the probe wrote its pid")
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    // 3 s of 200 ms runs: the attempt timeout ended the first ones, not the ready timeout.
    assert!(pids.len() >= 2, "one run only: {pids:?}");
    for pid in pids {
        // Reaped by the time the spawn returned: not our child, not a zombie.
        assert!(!is_our_child(pid), "probe {pid} is still our child");
    }
    let _ = std::fs::remove_file(&pid_file);
}

/// The server exits while a probe runs (the probe would run 60 s): the wait ends at the
/// exit, which the error names.
#[test]
fn the_server_exiting_while_a_probe_runs_ends_the_wait() {
    let check = ExecCheck::new(["sleep", "60"])
        .unwrap()
        .attempt_timeout(Duration::from_secs(60));
    spawn_fails_as_the_child_exits(
        ChildHandle::builder(sh("sleep 0.3; exit 4"))
            .ready(check.into())
            .ready_timeout(Duration::from_secs(60)),
        4,
        Duration::from_secs(30),
    );
}

#[test]
fn bad_probes_are_refused_naming_them() {
    let empty: [&str; 0] = [];
    let e = Ready::exec(empty).unwrap_err().to_string();
    assert!(e.contains("empty argv"), "{e}");
    let e = Ready::exec(["", "-x"]).unwrap_err().to_string();
    assert!(e.contains("empty program name") && e.contains("-x"), "{e}");
    // A program that does not exist fails the spawn at once, naming the probe.
    let began = Instant::now();
    let e = ChildHandle::builder(idle_server())
        .ready(Ready::exec(["/nonexistent/probe-xyz", "ping"]).unwrap())
        .ready_timeout(Duration::from_secs(60))
        .ladder(ladder("KILL:1s"))
        .spawn()
        .expect_err("no such probe");
    let text = e.to_string();
    assert!(
        text.contains("starting the probe") && text.contains("/nonexistent/probe-xyz"),
        "{text}"
    );
    assert!(began.elapsed() < Duration::from_secs(30));
}
