//! Issue 23 item 3: `Ready::http` against real servers — `python3 -m http.server` over TCP, a
//! small Python server on a Unix socket (tests/src/http_server.py) — a status that is not
//! ready, a malformed answer, the server exiting mid-attempt, an interrupt, combinations.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use childguard::{Builder, ChildHandle, ErrorKind, HttpCheck, Interrupt, Ready};
use childguard_tests::http::{python3, UnixSite};
use childguard_tests::*;

/// A port nobody listens on now (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One GET of our own on a socket: the status line.
fn get_status(mut stream: impl Read + Write) -> String {
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer.lines().next().unwrap_or("").to_owned()
}

/// Closes the server; it must be reaped by the close.
fn closed(handle: ChildHandle) {
    let report = handle.close().unwrap();
    assert!(report.status.is_some(), "not reaped: {report}");
}

/// The fixture server on `site` in `mode`, listening after `after` s, ready by `ready`,
/// closed with `KILL:1s`.
fn server(site: &UnixSite, mode: &str, after: &str, ready: Ready) -> Builder {
    ChildHandle::builder(site.server(mode, after))
        .ready(ready)
        .ladder(ladder("KILL:1s"))
}

/// Our own GET on the site's socket is answered 200 (with no retry: ready means it answers
/// now).
fn answers_200(site: &UnixSite) {
    let status = get_status(UnixStream::connect(&site.sock).unwrap());
    assert!(status.contains(" 200 "), "{status}");
}

#[test]
fn http_over_tcp_against_python_http_server() {
    if !python3("http_over_tcp_against_python_http_server") {
        return;
    }
    let port = free_port();
    let site = UnixSite::new("http-tcp");
    let mut cmd = Command::new("python3");
    cmd.args([
        "-m",
        "http.server",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
    ])
    .arg("--directory")
    .arg(&site.dir)
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let url = format!("http://127.0.0.1:{port}/");
    let handle = ChildHandle::builder(cmd)
        .ready(Ready::http(&url).unwrap())
        .ready_timeout(Duration::from_secs(30))
        .ladder(ladder("TERM:5s,KILL:1s"))
        .spawn()
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    // Ready means it answers now: our own GET, with no retry.
    let status = get_status(TcpStream::connect(("127.0.0.1", port)).unwrap());
    assert!(status.contains(" 200 "), "{status}");
    closed(handle);
}

#[test]
fn http_over_a_unix_socket_waits_for_a_slow_start() {
    if !python3("http_over_a_unix_socket_waits_for_a_slow_start") {
        return;
    }
    let site = UnixSite::new("http-unix");
    let began = Instant::now();
    let handle = server(
        &site,
        "200",
        "0.3",
        Ready::http(&site.url("/health")).unwrap(),
    )
    .ready_timeout(Duration::from_secs(30))
    .spawn()
    .unwrap();
    assert!(began.elapsed() >= Duration::from_millis(300));
    answers_200(&site);
    closed(handle);
}

/// Answers that never make the server ready: the readiness timeout ends the wait, and its
/// error quotes the last answer.
#[test]
fn answers_that_are_not_ready_time_out_quoting_the_last() {
    if !python3("answers_that_are_not_ready_time_out_quoting_the_last") {
        return;
    }
    for (mode, quoted) in [
        // A status that is not 2xx.
        (
            "503",
            &["not ready after 4s", "last attempt", "HTTP/1.0 503 Chosen"][..],
        ),
        // A line that is not HTTP.
        (
            "garbage",
            &["not an HTTP status line", "SSH-2.0-not-http"][..],
        ),
    ] {
        let site = UnixSite::new(&format!("http-{mode}"));
        let began = Instant::now();
        let e = server(&site, mode, "0", Ready::http(&site.url("/")).unwrap())
            .ready_timeout(Duration::from_secs(4))
            .spawn()
            .expect_err(mode);
        assert_eq!(e.kind(), ErrorKind::Ready, "{mode}: {e}");
        let text = e.to_string();
        assert!(
            quoted.iter().all(|q| text.contains(q)),
            "{mode}: {quoted:?} in {text}"
        );
        assert!(began.elapsed() < Duration::from_secs(10), "{mode}");
    }
}

/// The same 503 server is ready for a check that asks for 503.
#[test]
fn a_check_that_asks_for_a_503_is_ready_with_it() {
    if !python3("a_check_that_asks_for_a_503_is_ready_with_it") {
        return;
    }
    let site = UnixSite::new("http-503-wanted");
    let check = HttpCheck::parse(&site.url("/")).unwrap().status(503);
    let handle = server(&site, "503", "0", check.into()).spawn().unwrap();
    closed(handle);
}

/// The server accepts the attempt's connection and exits without answering: the attempt,
/// waiting for the status line (its own timeout 60 s), ends at the exit, named in the error.
#[test]
fn the_server_exiting_during_an_attempt_ends_the_wait_naming_the_exit() {
    if !python3("the_server_exiting_during_an_attempt_ends_the_wait_naming_the_exit") {
        return;
    }
    let site = UnixSite::new("http-exit");
    let check = HttpCheck::parse(&site.url("/"))
        .unwrap()
        .attempt_timeout(Duration::from_secs(60));
    spawn_fails_as_the_child_exits(
        ChildHandle::builder(site.server("silent-exit:7", "0"))
            .ready(check.into())
            .ready_timeout(Duration::from_secs(60)),
        7,
        Duration::from_secs(30),
    );
}

/// The interrupt fires while an attempt waits for an answer that never comes: the spawn
/// returns `Interrupted`, long before the attempt's or the ready timeout.
#[test]
fn an_interrupt_during_an_http_wait_returns_interrupted() {
    if !python3("an_interrupt_during_an_http_wait_returns_interrupted") {
        return;
    }
    let site = UnixSite::new("http-interrupt");
    let stop = Arc::new(AtomicBool::new(false));
    let setter = {
        let (stop, sock) = (stop.clone(), site.sock.clone());
        std::thread::spawn(move || {
            // Once the server listens, the spawn is in (or about to start) an attempt that
            // will wait for its answer; the interrupt ends it wherever it is.
            assert!(eventually(Duration::from_secs(30), || sock.exists()));
            stop.store(true, Ordering::SeqCst);
        })
    };
    let check = HttpCheck::parse(&site.url("/"))
        .unwrap()
        .attempt_timeout(Duration::from_secs(60));
    let began = Instant::now();
    let e = ChildHandle::builder(site.server("silent", "0"))
        .ready(check.into())
        .ready_timeout(Duration::from_secs(60))
        .interrupt(Interrupt::flag(stop))
        .spawn()
        .expect_err("interrupted");
    setter.join().unwrap();
    assert_eq!(e.kind(), ErrorKind::Interrupted, "{e}");
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
}

#[test]
fn http_in_a_combination_with_an_exec_probe() {
    if !python3("http_in_a_combination_with_an_exec_probe") {
        return;
    }
    let site = UnixSite::new("http-all");
    let probe = || Ready::exec(["test", "-S", site.sock_text()]).unwrap();
    let ready = Ready::all([
        Ready::http(&site.url("/")).unwrap(),
        probe(),
        Ready::output("listening"),
    ]);
    let handle = server(&site, "200", "0.2", ready).spawn().unwrap();
    answers_200(&site);
    closed(handle);
    // `any` of a status never given and the probe: the probe makes it ready.
    site.forget_socket();
    let ready = Ready::any([
        Ready::Http(HttpCheck::parse(&site.url("/")).unwrap().status(299)),
        probe(),
    ]);
    let handle = server(&site, "200", "0", ready).spawn().unwrap();
    closed(handle);
}

#[test]
fn bad_urls_are_refused_naming_them() {
    for (url, why) in [
        ("https://127.0.0.1:8443/", "no TLS"),
        ("127.0.0.1:80", "expected http://"),
        ("http://127.0.0.1:http/", "is not a number"),
        ("http://", "no host"),
    ] {
        let e = Ready::http(url).expect_err(url).to_string();
        assert!(e.contains(url) && e.contains(why), "{url}: {e}");
    }
}
