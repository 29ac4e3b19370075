//! Issue 14 against real databases: postgres (as the unprivileged `postgres` user, a temporary
//! data directory made by `initdb`, Unix socket only) and redis (a Unix socket, no port).
//! `Ready::Notify` makes the first query succeed; `STOPPING=1` is in the report after TERM;
//! `Output` and `Connect` on redis; a missing data directory's log line in the spawn error.
//!
//! A missing server fails with the command that installs it, unless `CHILDGUARD_SKIP_PEERS=1`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use childguard::{Capture, ChildHandle, ErrorKind, Ladder, Ready, Signal};
use childguard_tests::postgres::{self, Cluster};
use childguard_tests::*;

const INSTALL: &str = "apt-get install -y postgresql redis-server (or run tests/run.sh)";

/// `Some(path)` of a server binary, `None` only when skipping was asked for; else a panic that
/// says what to install.
fn find(test: &str, name: &str, candidates: Vec<PathBuf>) -> Option<PathBuf> {
    postgres::find_peer(test, name, candidates, INSTALL)
}

fn pg_tool(test: &str, tool: &str) -> Option<PathBuf> {
    postgres::pg_tool(test, tool, INSTALL)
}

fn redis(test: &str) -> Option<PathBuf> {
    let candidates = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"]
        .iter()
        .map(PathBuf::from)
        .collect();
    find(test, "redis-server", candidates)
}

#[test]
fn postgres_notify_ready_first_query_succeeds_and_term_reports_stopping() {
    let test = "postgres_notify_ready_first_query_succeeds_and_term_reports_stopping";
    let postgres = require_peer!(pg_tool(test, "postgres"));
    let cluster = require_peer!(Cluster::new(test));
    let began = Instant::now();
    let handle = ChildHandle::builder(cluster.command(&postgres, "data"))
        .ready(Ready::Notify)
        .notify_owner(cluster.uid, cluster.gid)
        .capture(Capture::stderr())
        .ready_timeout(Duration::from_secs(60))
        .ladder(ladder("TERM:20s,QUIT:5s,KILL:2s"))
        .spawn()
        .expect("postgres with Ready::Notify");
    let ready_after = began.elapsed();
    let out = cluster.psql("select 40 + 2");
    assert!(
        out.status.success(),
        "the first query after spawn() failed: {}\nserver log: {:?}",
        String::from_utf8_lossy(&out.stderr),
        handle.output_tail()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
    let report = handle.close().unwrap();
    eprintln!("postgres ready after {ready_after:?}; closed: {report}");
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    let notify = report.notify.as_ref().expect("a notify report");
    assert!(
        notify.stopping.is_some(),
        "no STOPPING=1 after TERM: {notify:?}"
    );
    assert!(notify.ignored.is_empty(), "{notify:?}");
    let tail = report.output_tail.as_deref().unwrap_or_default();
    assert!(tail.contains("database system is shut down"), "{tail}");
}

/// `Ladder::postgres()`: its first rung, INT, is the fast shutdown — it ends postgres even
/// with a client connected (the smart shutdown, TERM, would wait for that client).
#[test]
fn postgres_preset_fast_shutdown_ends_it_with_a_client_connected() {
    let test = "postgres_preset_fast_shutdown_ends_it_with_a_client_connected";
    let postgres = require_peer!(pg_tool(test, "postgres"));
    let cluster = require_peer!(Cluster::new(test));
    let handle = ChildHandle::builder(cluster.command(&postgres, "data"))
        .ready(Ready::Notify)
        .notify_owner(cluster.uid, cluster.gid)
        .capture(Capture::stderr())
        .ready_timeout(Duration::from_secs(60))
        .ladder(Ladder::postgres())
        .spawn()
        .expect("postgres with Ready::Notify");
    // A client that stays connected, idle, through the close.
    let mut client = cluster
        .psql_command(&["-q"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("psql");
    let mut stdin = client.stdin.take().unwrap();
    writeln!(stdin, "select 'connected';").unwrap();
    stdin.flush().unwrap();
    let mut out = client.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !String::from_utf8_lossy(&seen).contains("connected") {
        assert_eq!(out.read(&mut byte).unwrap(), 1, "psql ended early");
        seen.push(byte[0]);
    }
    let report = handle.close().unwrap();
    eprintln!("postgres preset with a client: {report}");
    assert_eq!(report.ended_by, rung(0, Signal::INT), "{report}");
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    let tail = report.output_tail.as_deref().unwrap_or_default();
    assert!(tail.contains("fast shutdown request"), "{tail}");
    drop(stdin);
    let _ = client.wait();
}

#[test]
fn postgres_on_a_missing_data_dir_fails_the_spawn_with_its_log_line() {
    let test = "postgres_on_a_missing_data_dir_fails_the_spawn_with_its_log_line";
    let postgres = require_peer!(pg_tool(test, "postgres"));
    let (uid, gid) = postgres::postgres_user();
    let root = scratch("pg-missing");
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::chown(&root, Some(uid), Some(gid)).unwrap();
    let cluster = Cluster { root, uid, gid };
    let err = ChildHandle::builder(cluster.command(&postgres, "no-such-data"))
        .ready(Ready::Notify)
        .notify_owner(uid, gid)
        .capture(Capture::stderr())
        .spawn()
        .expect_err("postgres cannot start without its data directory");
    assert_eq!(err.kind(), ErrorKind::Ready);
    let text = err.to_string();
    assert!(
        text.contains("exited during start-up with exit status: 2"),
        "{text}"
    );
    let tail = err.output_tail().expect("the server's log line");
    assert!(tail.contains("no-such-data"), "{tail}");
    assert!(text.contains("last output:"), "{text}");
}

/// A redis on a Unix socket only (`--port 0`), persisting nothing.
fn redis_command(redis: &Path, dir: &Path, socket: &Path, supervised: bool) -> Command {
    let mut cmd = Command::new(redis);
    cmd.args(["--port", "0", "--unixsocket"])
        .arg(socket)
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(dir);
    if supervised {
        cmd.args(["--supervised", "systemd"]);
    }
    cmd
}

fn ping(socket: &Path) -> std::io::Result<String> {
    let mut conn = UnixStream::connect(socket)?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.write_all(b"PING\r\n")?;
    let mut reply = [0u8; 7];
    conn.read_exact(&mut reply)?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

fn redis_dir(name: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("redis.sock");
    (dir, socket)
}

#[test]
fn redis_notify_ready_ping_succeeds_and_term_reports_stopping() {
    let redis = require_peer!(redis(
        "redis_notify_ready_ping_succeeds_and_term_reports_stopping"
    ));
    let (dir, socket) = redis_dir("redis-notify");
    let handle = ChildHandle::builder(redis_command(&redis, &dir, &socket, true))
        .ready(Ready::Notify)
        .capture(Capture::both())
        // The preset: TERM (save and exit) first.
        .ladder(Ladder::redis())
        .spawn()
        .expect("redis with Ready::Notify");
    assert_eq!(
        ping(&socket).expect("PING right after spawn()"),
        "+PONG\r\n"
    );
    let report = handle.close().unwrap();
    assert_eq!(report.ended_by, rung(0, Signal::TERM), "{report}");
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    let notify = report.notify.as_ref().unwrap();
    assert!(
        notify.stopping.is_some(),
        "no STOPPING=1 after TERM: {notify:?}"
    );
    assert!(notify.status.is_some(), "redis sends STATUS=: {notify:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// redis ready on its log line (`Ready::Output`), and on its unix socket (`Ready::Connect`,
/// its output captured): a PING right after `spawn()` is answered; TERM ends it.
#[test]
fn redis_ready_on_its_log_line_and_on_its_unix_socket() {
    let redis = require_peer!(redis("redis_ready_on_its_log_line_and_on_its_unix_socket"));
    for kind in ["output", "connect"] {
        let (dir, socket) = redis_dir(&format!("redis-{kind}"));
        let builder = ChildHandle::builder(redis_command(&redis, &dir, &socket, false))
            .ladder(ladder("TERM:10s,KILL:2s"));
        let builder = match kind {
            "output" => builder.ready(Ready::output("ready to accept connections")),
            _ => builder
                .ready(Ready::connect(socket.as_path()))
                .capture(Capture::both()),
        };
        let handle = builder
            .spawn()
            .unwrap_or_else(|e| panic!("redis ready by {kind}: {e}"));
        assert_eq!(
            ping(&socket).expect("PING right after spawn()"),
            "+PONG\r\n",
            "{kind}"
        );
        let report = handle.close().unwrap();
        assert_eq!(report.ended_by, rung(0, Signal::TERM), "{kind}: {report}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Issue 22: `runuser -u postgres -- postgres …` — runuser forks and waits, so `READY=1` comes
/// from its child, not from the main pid. Ready under the default `NotifyAccess::All` (a
/// descendant); under `Main` it is refused, and the ready timeout's error says by whom.
#[test]
fn postgres_under_runuser_is_ready_by_default_and_main_refuses_its_ready() {
    let test = "postgres_under_runuser_is_ready_by_default_and_main_refuses_its_ready";
    let postgres = require_peer!(pg_tool(test, "postgres"));
    let runuser = require_peer!(find(
        test,
        "runuser",
        vec!["/usr/sbin/runuser".into(), "/sbin/runuser".into()]
    ));
    let cluster = require_peer!(Cluster::new(test));
    let command = || {
        let mut cmd = Command::new(&runuser);
        cmd.args(["-u", "postgres", "--"])
            .arg(&postgres)
            .args(["-D", "data", "-c", "listen_addresses=", "-c"])
            .arg(format!(
                "unix_socket_directories={}",
                cluster.root.join("run").display()
            ))
            .args(["-c", "fsync=off"])
            .current_dir(&cluster.root)
            .env("LC_ALL", "C");
        cmd
    };
    let handle = ChildHandle::builder(command())
        .ready(Ready::Notify)
        .notify_owner(cluster.uid, cluster.gid)
        .process_group(true)
        .capture(Capture::stderr())
        .ready_timeout(Duration::from_secs(60))
        .ladder(ladder("TERM:20s,QUIT:5s,KILL:2s"))
        .spawn()
        .expect("postgres under runuser with Ready::Notify (default NotifyAccess::All)");
    let out = cluster.psql("select 40 + 2");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42", "{out:?}");
    let report = handle.close().unwrap();
    let notify = report.notify.as_ref().expect("a notify report");
    assert!(notify.ignored.is_empty(), "{notify:?}");

    let err = ChildHandle::builder(command())
        .ready(Ready::Notify)
        .notify_access(childguard::NotifyAccess::Main)
        .notify_owner(cluster.uid, cluster.gid)
        .process_group(true)
        .ready_timeout(Duration::from_secs(10))
        .ladder(ladder("TERM:20s,QUIT:5s,KILL:2s"))
        .spawn()
        .expect_err("under Main, postgres (runuser's child) must not make it ready");
    assert_eq!(err.kind(), ErrorKind::Ready, "{err}");
    assert!(
        err.to_string()
            .contains("ignored on NOTIFY_SOCKET: a datagram from pid")
            && err.to_string().contains("not the main process"),
        "{err}"
    );
}

/// Issue 23 item 4: the report keeps redis's *last* `STATUS=`: with a save point, redis says
/// "Saving the final RDB snapshot" on TERM, after its start-up "Ready to accept connections".
#[test]
fn redis_last_status_is_its_shutdown_one() {
    let redis = require_peer!(redis("redis_last_status_is_its_shutdown_one"));
    let (dir, socket) = redis_dir("redis-status");
    let mut cmd = redis_command(&redis, &dir, &socket, true);
    cmd.args(["--save", "3600 1"]);
    let handle = ChildHandle::builder(cmd)
        .ready(Ready::Notify)
        .ladder(Ladder::redis())
        .spawn()
        .expect("redis with Ready::Notify");
    let report = handle.close().unwrap();
    let notify = report.notify.as_ref().unwrap();
    assert_eq!(
        notify.status.as_deref(),
        Some("Saving the final RDB snapshot"),
        "{notify:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 23 item 4: redis never sends `WATCHDOG=1`, so a watchdog closes it once ready, with
/// its ladder (TERM: redis saves nothing here and exits 0) — a real server through the miss.
#[test]
fn redis_under_a_watchdog_it_does_not_feed_is_closed_with_its_ladder() {
    let redis = require_peer!(redis(
        "redis_under_a_watchdog_it_does_not_feed_is_closed_with_its_ladder"
    ));
    let (dir, socket) = redis_dir("redis-watchdog");
    let handle = ChildHandle::builder(redis_command(&redis, &dir, &socket, true))
        .ready(Ready::Notify)
        .watchdog(Duration::from_millis(300))
        .ladder(Ladder::redis())
        .spawn()
        .expect("redis with Ready::Notify");
    let pin = pidfd(handle.id().unwrap());
    assert!(
        exited_within(&pin, Duration::from_secs(30)),
        "the watchdog did not close redis"
    );
    let miss = handle.watchdog_missed().expect("a miss");
    assert!(
        !miss.triggered && miss.at >= Duration::from_millis(300),
        "{miss:?}"
    );
    let report = handle.close().unwrap();
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    let notify = report.notify.as_ref().unwrap();
    assert!(notify.stopping.is_some(), "{notify:?}");
    assert_noted(&notify.watchdog, "watchdog: sent TERM");
    let _ = std::fs::remove_dir_all(&dir);
}
