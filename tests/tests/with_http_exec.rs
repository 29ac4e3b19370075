//! Issue 23 item 3 in the CLI: `childguard with --ready http…` and `--ready exec:'CMD'`
//! against a real HTTP server on a Unix socket (tests/src/http_server.py), CMD a `curl` that
//! must be answered at once; a failing probe's output in the message; bad conditions refused.

use std::process::Output;

use childguard_tests::command::{childguard, exited_saying, on_path, stderr};
use childguard_tests::http::{server_args, UnixSite};
use childguard_tests::*;

/// `with --ready COND -- <http server on the site's socket, answering status> -- curl` →
/// CMD's output.
fn with_server(cond: &str, site: &UnixSite, status: &str) -> Output {
    let listen = site.listen();
    let mut args = vec!["with", "--ready", cond, "--ladder", "KILL:1s", "--"];
    args.extend(server_args(&listen, status, "0.2"));
    args.extend([
        "--",
        "curl",
        "-s",
        "--max-time",
        "10",
        "--unix-socket",
        site.sock_text(),
        "http://localhost/",
    ]);
    childguard(&args)
}

#[test]
fn with_ready_http_and_exec_start_the_command_once_the_server_answers() {
    let test = "with_ready_http_and_exec_start_the_command_once_the_server_answers";
    if !on_path(test, "python3", "apt-get install python3")
        || !on_path(test, "curl", "apt-get install curl")
    {
        return;
    }
    let site = UnixSite::new("with-http");
    let url = site.url("/");
    let status_cond = format!("http:503:{url}");
    let probe = format!("exec:test -S '{}'", site.sock_text());
    for (cond, status) in [
        (url.as_str(), "200"),
        (status_cond.as_str(), "503"),
        (probe.as_str(), "200"),
    ] {
        site.forget_socket();
        let o = with_server(cond, &site, status);
        assert_eq!(o.status.code(), Some(0), "{cond}: {}", stderr(&o));
        // curl ran once, without retrying, and was answered.
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            "ok\n",
            "{cond}: {}",
            stderr(&o)
        );
    }
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
    exited_saying(
        &o,
        125,
        &[
            "not ready after 4s",
            "exited with exit status: 1",
            "nope-77",
        ],
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
            stderr(&o).contains(needle) && stderr(&o).contains(cond),
            "{cond}: {}",
            stderr(&o)
        );
    }
}
