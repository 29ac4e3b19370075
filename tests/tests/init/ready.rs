//! `--ready COND --ready-file F` with the checks made from outside CMD (`Ready::check_once`):
//! an HTTP `GET` against a real HTTP server (tests/src/http_server.py on a Unix socket) and an
//! `exec:` probe. F is written only after the check held — asserted by what the check needs
//! (the server answered a `GET`; the file the probe tests exists), not by timing.

use std::process::Stdio;
use std::time::Duration;

use childguard_tests::init::*;
use childguard_tests::*;

use super::{err, term_and_expect};

const SERVER: &str = include_str!("../../src/http_server.py");

#[test]
fn http_ready_file_appears_after_a_get_was_answered_2xx() {
    for name in NAMES {
        let dir = fresh_dir(&format!("init-ready-http-{name:?}"));
        let (sock, ready) = (dir.join("s"), dir.join("ready"));
        let url = format!(
            "http+unix://{}/health",
            sock.to_str().unwrap().replace('/', "%2F")
        );
        let listen = format!("unix:{}", sock.display());
        let args = [
            "-s",
            "--ready",
            &url,
            "--ready-file",
            ready.to_str().unwrap(),
            "--",
            "python3",
            "-u",
            "-c",
            SERVER,
            &listen,
            "200",
            "0.3",
        ];
        let mut child = name
            .command(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The server's lines, read as they come: it says it answered after it sent the answer,
        // so the line may come after the ready file (and must not be lost to the stop).
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        assert!(
            eventually(Duration::from_secs(30), || ready.exists()),
            "{name:?}: no ready file"
        );
        let mut seen = Vec::new();
        while !seen.iter().any(|l| l == "answered GET /health HTTP/1.1") {
            match lines.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => seen.push(line),
                Err(_) => panic!("{name:?}: the server answered no GET: {seen:?}"),
            }
        }
        term_and_expect(child, 128 + libc::SIGTERM, &format!("{name:?}"));
        assert!(
            !ready.exists(),
            "{name:?}: the ready file outlived the stop"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn exec_ready_file_appears_only_once_the_probe_passes() {
    for name in NAMES {
        let dir = fresh_dir(&format!("init-ready-exec-{name:?}"));
        let (up, ready) = (dir.join("up"), dir.join("ready"));
        let probe = format!("exec:test -e {}", up.display());
        let script = format!("sleep 0.3; : > {}; exec sleep 1000", up.display());
        let args = [
            "-s",
            "--ready",
            &probe,
            "--ready-file",
            ready.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ];
        let child = name.command(&args).stderr(Stdio::piped()).spawn().unwrap();
        assert!(
            eventually(Duration::from_secs(30), || ready.exists()),
            "{name:?}: no ready file"
        );
        // Written after `test -e up` exited 0: `up` was there first.
        assert!(up.exists(), "{name:?}: ready before the probe could pass");
        term_and_expect(child, 128 + libc::SIGTERM, &format!("{name:?}"));
        assert!(!ready.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn ready_kinds_that_need_the_spawn_are_refused_with_the_reason() {
    for cond in ["notify", "line:up"] {
        let o = Name::Init
            .command(&["--ready", cond, "--ready-file", "/tmp/never", "--", "true"])
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        // tini's code for a usage error.
        assert_eq!(o.status.code(), Some(1), "{cond}: {}", err(&o));
        assert!(
            err(&o).contains("init checks CMD from outside"),
            "{cond}: {}",
            err(&o)
        );
    }
}
