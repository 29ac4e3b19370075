//! `childguard probe` (issue 23 item 2) against real servers and the slowserver fixture: what
//! it measures, the ladder it recommends (checked against our presets), that nothing is left
//! behind (no process, no cgroup), and its usage errors.
//!
//! A missing server fails the test naming the Debian package, unless
//! `CHILDGUARD_SKIP_PEERS=1`.

use childguard::{Ladder, Signal};
use childguard_tests::postgres::{pg_tool, Cluster, INSTALL_POSTGRES};
use childguard_tests::probe::*;
use childguard_tests::*;

const INSTALL: &str = "apt-get install -y redis-server qemu-utils libnbd-bin (or run tests/run.sh)";

#[test]
fn redis_probe_recommends_term_first_and_kill_last_as_the_preset() {
    let test = "redis_probe_recommends_term_first_and_kill_last_as_the_preset";
    let redis = require_peer!(peer(
        test,
        "redis-server",
        &["/usr/bin", "/usr/local/bin"],
        INSTALL
    ));
    let dir = ScratchDir::new("probe-redis");
    let socket = dir.file("redis.sock");
    let ready = format!("unix:{socket}");
    let mut args = vec!["--runs", "2", "--window", "3s", "--ready", &ready, "--"];
    let server = redis_on(&redis, &socket, &dir.0);
    args.extend(strs(&server));
    let report = probe_json(&args, &socket);
    assert_contained(&report);
    let ladder = recommended(&report);
    let signals = signals_of(&ladder);
    assert_eq!(signals.first(), Some(&Signal::TERM), "{ladder}");
    assert_eq!(signals.last(), Some(&Signal::KILL), "{ladder}");
    // Our preset: the same first signal, and KILL last.
    let preset = signals_of(&Ladder::redis());
    assert_eq!(
        preset.first(),
        signals.first(),
        "preset {}",
        Ladder::redis()
    );
    // HUP: in SigIgn, so marked ignored and never recommended.
    assert_eq!(dispositions(&report, "HUP"), ["ignored", "ignored"]);
    assert!(!signals.contains(&Signal::HUP), "{ladder}");
    // TERM: exit 0 in every run, nothing left in the cgroup.
    let term = result(&report, "TERM");
    for run in term["runs"].as_array().unwrap() {
        assert_eq!(run["exit_code"], 0, "{run}");
        assert_eq!(run["left_in_cgroup_after"], 0, "{run}");
        assert!(run["left_after_close"].is_null(), "{run}");
    }
}

#[test]
fn qemu_nbd_probe_agrees_with_the_preset() {
    let test = "qemu_nbd_probe_agrees_with_the_preset";
    let qemu_nbd = require_peer!(peer(
        test,
        "qemu-nbd",
        &["/usr/bin", "/usr/local/bin"],
        INSTALL
    ));
    require_peer!(peer(
        test,
        "nbdinfo",
        &["/usr/bin", "/usr/local/bin"],
        INSTALL
    ));
    let dir = ScratchDir::new("probe-qemu-nbd");
    let disk = dir.file("disk.raw");
    std::fs::write(&disk, vec![0u8; 1 << 20]).unwrap();
    let socket = dir.file("nbd.sock");
    // Ready after one whole NBD session: a connection closed before its handshake (what
    // `unix:` makes) leaves qemu-nbd deaf to signals until it is handled (docs/servers.md).
    let ready = format!("exec:nbdinfo --can connect 'nbd+unix:///?socket={socket}'");
    let report = probe_json(
        &[
            "--runs",
            "2",
            "--window",
            "3s",
            "--signals",
            "HUP,INT,TERM,QUIT",
            "--ready",
            &ready,
            "--",
            qemu_nbd.to_str().unwrap(),
            "-k",
            &socket,
            "-f",
            "raw",
            "-t",
            &disk,
        ],
        &socket,
    );
    assert_contained(&report);
    let ladder = recommended(&report);
    let signals = signals_of(&ladder);
    assert_eq!(signals.last(), Some(&Signal::KILL), "{ladder}");
    // Every signal of our preset (HUP, TERM, then KILL) is one the probe found clean, and
    // recommended; QUIT (no handler: its default action kills it) is not.
    let preset = Ladder::qemu_nbd();
    let clean = clean_signals(&report);
    for signal in signals_of(&preset) {
        if signal != Signal::KILL {
            assert!(
                clean.contains(&signal.to_string()),
                "preset {preset}: {signal} not clean"
            );
            assert!(
                signals.contains(&signal),
                "preset {preset}: {signal} not in {ladder}"
            );
        }
    }
    assert_eq!(dispositions(&report, "QUIT"), ["default", "default"]);
    assert!(!signals.contains(&Signal::QUIT), "{ladder}");
}

#[test]
fn slowserver_ignoring_signals_gets_them_marked_ignored_and_not_recommended() {
    let dir = ScratchDir::new("probe-slowserver");
    let socket = dir.file("slow.sock");
    let ready = format!("unix:{socket}");
    let mut args = vec!["--runs", "2", "--window", "3s"];
    args.extend(["--signals", "HUP,INT,TERM,USR2", "--ready", &ready]);
    // With --log, slowserver handles HUP, TERM and INT (logs, then re-raises the signal).
    let log = dir.file("slow.log");
    let server = slowserver_on(&socket, &format!("--ignore HUP,USR2 --log '{log}'"));
    args.extend(strs(&server));
    let report = probe_json(&args, &socket);
    for name in ["HUP", "USR2"] {
        assert_eq!(
            dispositions(&report, name),
            ["ignored", "ignored"],
            "{name}"
        );
        let verdict = result(&report, name)["verdict"].as_str().unwrap();
        assert!(verdict.starts_with("ignored"), "{name}: {verdict}");
        assert_eq!(result(&report, name)["clean"], false);
    }
    assert_eq!(clean_signals(&report), ["TERM", "INT"]);
    assert_eq!(recommended(&report).to_string(), "TERM:2s,INT:2s,KILL:5s");
}

#[test]
fn a_server_no_signal_ends_cleanly_exits_3_with_kill_alone() {
    let dir = ScratchDir::new("probe-none-clean");
    let socket = dir.file("slow.sock");
    let ready = format!("unix:{socket}");
    // QUIT has no handler in slowserver (its default action kills it); TERM is ignored.
    let mut args = vec!["--runs", "1", "--window", "3s", "--signals", "TERM,QUIT"];
    args.extend(["--ready", &ready]);
    let server = slowserver_on(&socket, "--ignore TERM");
    args.extend(strs(&server));
    let output = probe(&args, &socket);
    let out = String::from_utf8_lossy(&output.stdout);
    eprintln!("{out}");
    assert_eq!(output.status.code(), Some(3), "{out}{}", stderr(&output));
    assert!(out.contains("recommended ladder: KILL:5s"), "{out}");
    assert!(
        out.contains("killed by QUIT: default action, no handler"),
        "{out}"
    );
    assert!(out.contains("ignored (SigIgn)"), "{out}");
}

#[test]
fn bad_input_is_a_usage_error_naming_it() {
    let cases: &[(&[&str], &str)] = &[
        (&["--signals", "HUP,BOGUS", "--", "true"], "\"BOGUS\""),
        (&["--signals", "KILL", "--", "true"], "\"KILL\""),
        (&["--signals", "TERM,TERM", "--", "true"], "named twice"),
        (&["--runs", "0", "--", "true"], "--runs: \"0\""),
        (&["--runs", "many", "--", "true"], "--runs: \"many\""),
        (&["--window", "0", "--", "true"], "--window"),
        (
            &["--settle-timeout", "0", "--", "true"],
            "--settle-timeout: \"0\"",
        ),
        (
            &["--settle-timeout", "soon", "--", "true"],
            "--settle-timeout: \"soon\"",
        ),
        (
            &["--ready", "unix:/x", "--settle-timeout", "1s", "--", "true"],
            "--settle-timeout is the bound of the wait without --ready",
        ),
        (&["--ready", "bogus:x", "--", "true"], "\"bogus:x\""),
        (
            &["--client-ready", "unix:/x", "--", "true"],
            "--client-ready needs --client",
        ),
        (
            &["--user", "no-such-user-here", "--", "true"],
            "no-such-user-here",
        ),
        (&["--bogus", "--", "true"], "'--bogus'"),
        (&["--json"], "missing SERVER"),
        (&[], "missing SERVER"),
        (&["--"], "missing SERVER"),
    ];
    for (args, needle) in cases {
        let output = probe_command(args).output().unwrap();
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(err.contains("childguard probe --help"), "{args:?}: {err}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_server_never_ready_fails_the_probe_and_leaves_nothing() {
    let dir = ScratchDir::new("probe-never-ready");
    let socket = dir.file("never.sock");
    let ready = format!("unix:{socket}");
    let slow = bin("cg-slowserver").display().to_string();
    // slowserver never listens there; its `--log` file is the mark of its processes.
    let log = dir.file("never.log");
    let output = probe(
        &[
            "--ready",
            &ready,
            "--ready-timeout",
            "300ms",
            "--",
            &slow,
            "--ignore-eof",
            "--log",
            &log,
        ],
        &log,
    );
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(125), "{err}");
    assert!(err.contains("probe of HUP, run 1 of 3"), "{err}");
    assert!(err.contains(&socket), "{err}");
}

/// postgres with a busy client (`select pg_sleep(60)`): TERM, the smart shutdown, waits for
/// the client, so it does not end postgres within the window; INT, the fast shutdown, does.
#[test]
fn postgres_with_a_busy_client_term_waits_int_ends_it() {
    let test = "postgres_with_a_busy_client_term_waits_int_ends_it";
    let postgres = require_peer!(pg_tool(test, "postgres", INSTALL_POSTGRES));
    require_peer!(peer(test, "psql", &["/usr/bin"], INSTALL_POSTGRES));
    let cluster = require_peer!(Cluster::new(test));
    let data = cluster.root.join("data").display().to_string();
    let run = cluster.root.join("run").display().to_string();
    let psql = format!("psql -h {run} -U postgres -d postgres");
    let client = format!("{psql} -c 'select pg_sleep(60)'");
    let client_ready = format!(
        "exec:{psql} -tAc \"select 1/count(*) from pg_stat_activity where wait_event = 'PgSleep'\""
    );
    let report = probe_json(
        &[
            "--runs",
            "1",
            "--window",
            "5s",
            "--signals",
            "TERM,INT",
            "--user",
            "postgres",
            "--ready",
            "notify",
            "--client",
            &client,
            "--client-ready",
            &client_ready,
            "--",
            postgres.to_str().unwrap(),
            "-D",
            &data,
            "-c",
            "listen_addresses=",
            "-c",
            &format!("unix_socket_directories={run}"),
            "-c",
            "fsync=off",
        ],
        &data,
    );
    assert_contained(&report);
    let term = &result(&report, "TERM")["runs"][0];
    assert_eq!(term["exited"], false, "{term}");
    assert_eq!(term["disposition"], "caught", "{term}");
    let int = &result(&report, "INT")["runs"][0];
    assert_eq!(int["exit_code"], 0, "{int}");
    assert_eq!(int["left_in_cgroup_after"], 0, "{int}");
    assert_eq!(clean_signals(&report), ["INT"]);
    assert_eq!(
        signals_of(&recommended(&report)),
        [Signal::INT, Signal::KILL]
    );
}
