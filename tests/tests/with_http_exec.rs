//! Issue 23 item 3 in the CLI: `childguard with --ready http…` and `--ready exec:'CMD'`
//! against a real HTTP server on a Unix socket (tests/src/http_server.py), CMD a `curl` that
//! must be answered at once; a failing probe's output in the message; bad conditions refused.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use childguard_tests::*;

const SERVER: &str = include_str!("../src/http_server.py");

fn childguard(args: &[&str]) -> Output {
    Command::new(bin("cg-childguard"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running cg-childguard")
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Whether `program` is on PATH; if not, fails saying what to install, unless
/// CHILDGUARD_SKIP_PEERS=1.
fn peer(program: &str, package: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()));
    if !found && std::env::var_os("CHILDGUARD_SKIP_PEERS").is_none() {
        panic!("{program} not found: install {package} (or set CHILDGUARD_SKIP_PEERS=1)");
    }
    found
}

fn unix_url(path: &Path) -> String {
    format!(
        "http+unix://{}/",
        path.to_str().unwrap().replace('/', "%2F")
    )
}

/// `with --ready COND -- <http server on sock, answering status> -- curl` → CMD's output.
fn with_server(cond: &str, sock: &Path, status: &str) -> Output {
    let sock_text = sock.to_str().unwrap();
    childguard(&[
        "with",
        "--ready",
        cond,
        "--ladder",
        "KILL:1s",
        "--",
        "python3",
        "-u",
        "-c",
        SERVER,
        &format!("unix:{sock_text}"),
        status,
        "0.2",
        "--",
        "curl",
        "-s",
        "--max-time",
        "10",
        "--unix-socket",
        sock_text,
        "http://localhost/",
    ])
}

#[test]
fn with_ready_http_and_exec_start_the_command_once_the_server_answers() {
    if !peer("python3", "python3") || !peer("curl", "curl") {
        return;
    }
    let dir = scratch("with-http");
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("s.sock");
    let sock_text = sock.to_str().unwrap().to_owned();
    let url = unix_url(&sock);
    let status_cond = format!("http:503:{url}");
    let probe = format!("exec:test -S '{sock_text}'");
    for (cond, status) in [
        (url.as_str(), "200"),
        (status_cond.as_str(), "503"),
        (probe.as_str(), "200"),
    ] {
        let _ = std::fs::remove_file(&sock);
        let o = with_server(cond, &sock, status);
        assert_eq!(o.status.code(), Some(0), "{cond}: {}", err(&o));
        // curl ran once, without retrying, and was answered.
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            "ok\n",
            "{cond}: {}",
            err(&o)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn with_a_probe_that_never_passes_fails_with_its_output() {
    let slow = bin("cg-slowserver");
    let o = childguard(&[
        "with",
        "--ready-timeout",
        "4s",
        "--ready",
        r#"exec:sh -c "echo nope-77; exit 1""#,
        "--ladder",
        "KILL:1s",
        "--",
        slow.to_str().unwrap(),
        "--ignore-eof",
        "--",
        "true",
    ]);
    assert_eq!(o.status.code(), Some(125), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("not ready after 4s")
            && e.contains("exited with exit status: 1")
            && e.contains("nope-77"),
        "{e}"
    );
}

#[test]
fn with_bad_http_and_exec_conditions_are_usage_errors() {
    for (cond, needle) in [
        ("https://127.0.0.1/", "no TLS"),
        ("http:abc:http://127.0.0.1/", "not an HTTP status"),
        ("http:nothing", "expected http://HOST"),
        ("http://127.0.0.1:99999/", "is not a number"),
        ("exec:", "no command"),
        ("exec:pg_isready | grep ok", "unquoted |"),
        ("exec:sh -c 'x", "unclosed '"),
    ] {
        let o = childguard(&["with", "--ready", cond, "--", "a", "--", "b"]);
        assert_eq!(o.status.code(), Some(125), "{cond}");
        assert!(
            err(&o).contains(needle) && err(&o).contains(cond),
            "{cond}: {}",
            err(&o)
        );
    }
}
