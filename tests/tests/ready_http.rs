//! Issue 23 item 3: `Ready::http` against real servers — `python3 -m http.server` over TCP, a
//! small Python server on a Unix socket (tests/src/http_server.py) — a status that is not
//! ready, a malformed answer, the server exiting mid-attempt, an interrupt, combinations.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, ErrorKind, HttpCheck, Interrupt, Ready};
use childguard_tests::*;

const SERVER: &str = include_str!("../src/http_server.py");

fn python() -> Option<&'static str> {
    let found = Command::new("python3")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some("python3");
    }
    if std::env::var_os("CHILDGUARD_SKIP_PEERS").is_some_and(|v| v == "1") {
        eprintln!("SKIPPED: python3 not installed (CHILDGUARD_SKIP_PEERS=1)");
        return None;
    }
    panic!("the HTTP readiness tests need python3: apt-get install python3 (or run tests/run.sh)");
}

/// tests/src/http_server.py listening at `where` (`unix:PATH`, `tcp:PORT`) in `mode`.
fn server(where_: &str, mode: &str, after: &str) -> Command {
    let mut cmd = Command::new("python3");
    cmd.args(["-u", "-c", SERVER, where_, mode, after]);
    cmd.stdin(Stdio::null());
    cmd
}

/// `http+unix://` for `path`, percent-encoded.
fn unix_url(path: &Path, rest: &str) -> String {
    let encoded = path
        .to_str()
        .unwrap()
        .replace('%', "%25")
        .replace('/', "%2F");
    format!("http+unix://{encoded}{rest}")
}

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

fn socket_dir(name: &str) -> std::path::PathBuf {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn http_over_tcp_against_python_http_server() {
    let Some(python) = python() else { return };
    let port = free_port();
    let dir = socket_dir("http-tcp");
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "http.server",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
    ])
    .arg("--directory")
    .arg(&dir)
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
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn http_over_a_unix_socket_waits_for_a_slow_start() {
    if python().is_none() {
        return;
    }
    let dir = socket_dir("http-unix");
    let sock = dir.join("s.sock");
    let began = Instant::now();
    let handle = ChildHandle::builder(server(&format!("unix:{}", sock.display()), "200", "0.3"))
        .ready(Ready::http(&unix_url(&sock, "/health")).unwrap())
        .ready_timeout(Duration::from_secs(30))
        .ladder(ladder("KILL:1s"))
        .spawn()
        .unwrap();
    assert!(began.elapsed() >= Duration::from_millis(300));
    let status = get_status(UnixStream::connect(&sock).unwrap());
    assert!(status.contains(" 200 "), "{status}");
    closed(handle);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_status_that_is_not_2xx_is_not_ready_and_the_timeout_quotes_it() {
    if python().is_none() {
        return;
    }
    let dir = socket_dir("http-503");
    let sock = dir.join("s.sock");
    let began = Instant::now();
    let e = ChildHandle::builder(server(&format!("unix:{}", sock.display()), "503", "0"))
        .ready(Ready::http(&unix_url(&sock, "/")).unwrap())
        .ready_timeout(Duration::from_secs(4))
        .ladder(ladder("KILL:1s"))
        .spawn()
        .expect_err("a 503 is not ready");
    assert_eq!(e.kind(), ErrorKind::Ready, "{e}");
    let text = e.to_string();
    assert!(
        text.contains("not ready after 4s")
            && text.contains("last attempt")
            && text.contains("HTTP/1.0 503 Chosen"),
        "{text}"
    );
    assert!(began.elapsed() < Duration::from_secs(10));
    // The same server is ready for a check that asks for 503.
    let _ = std::fs::remove_file(&sock);
    let check = HttpCheck::parse(&unix_url(&sock, "/")).unwrap().status(503);
    let handle = ChildHandle::builder(server(&format!("unix:{}", sock.display()), "503", "0"))
        .ready(check.into())
        .ladder(ladder("KILL:1s"))
        .spawn()
        .unwrap();
    closed(handle);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_malformed_answer_is_not_ready_and_is_quoted() {
    if python().is_none() {
        return;
    }
    let dir = socket_dir("http-garbage");
    let sock = dir.join("s.sock");
    let e = ChildHandle::builder(server(&format!("unix:{}", sock.display()), "garbage", "0"))
        .ready(Ready::http(&unix_url(&sock, "/")).unwrap())
        .ready_timeout(Duration::from_secs(4))
        .ladder(ladder("KILL:1s"))
        .spawn()
        .expect_err("not HTTP is not ready");
    let text = e.to_string();
    assert!(
        text.contains("not an HTTP status line") && text.contains("SSH-2.0-not-http"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The server accepts the attempt's connection and exits without answering: the attempt,
/// waiting for the status line (its own timeout 60 s), ends at the exit, named in the error.
#[test]
fn the_server_exiting_during_an_attempt_ends_the_wait_naming_the_exit() {
    if python().is_none() {
        return;
    }
    let dir = socket_dir("http-exit");
    let sock = dir.join("s.sock");
    let check = HttpCheck::parse(&unix_url(&sock, "/"))
        .unwrap()
        .attempt_timeout(Duration::from_secs(60));
    let began = Instant::now();
    let e = ChildHandle::builder(server(
        &format!("unix:{}", sock.display()),
        "silent-exit:7",
        "0",
    ))
    .ready(check.into())
    .ready_timeout(Duration::from_secs(60))
    .spawn()
    .expect_err("the server exited");
    let text = e.to_string();
    assert!(
        text.contains("exited during start-up") && text.contains("exit status: 7"),
        "{text}"
    );
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "the exit did not end the attempt: {:?}",
        began.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The interrupt fires while an attempt waits for an answer that never comes: the spawn
/// returns `Interrupted`, long before the attempt's or the ready timeout.
#[test]
fn an_interrupt_during_an_http_wait_returns_interrupted() {
    if python().is_none() {
        return;
    }
    let dir = socket_dir("http-interrupt");
    let sock = dir.join("s.sock");
    let stop = Arc::new(AtomicBool::new(false));
    let setter = {
        let (stop, sock) = (stop.clone(), sock.clone());
        std::thread::spawn(move || {
            // Once the server listens, the spawn is in (or about to start) an attempt that
            // will wait for its answer; the interrupt ends it wherever it is.
            assert!(eventually(Duration::from_secs(30), || sock.exists()));
            stop.store(true, Ordering::SeqCst);
        })
    };
    let check = HttpCheck::parse(&unix_url(&sock, "/"))
        .unwrap()
        .attempt_timeout(Duration::from_secs(60));
    let began = Instant::now();
    let e = ChildHandle::builder(server(&format!("unix:{}", sock.display()), "silent", "0"))
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
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn http_in_a_combination_with_an_exec_probe() {
    if python().is_none() {
        return;
    }
    let dir = socket_dir("http-all");
    let sock = dir.join("s.sock");
    let sock_text = sock.to_str().unwrap();
    let ready = Ready::all([
        Ready::http(&unix_url(&sock, "/")).unwrap(),
        Ready::exec(["test", "-S", sock_text]).unwrap(),
        Ready::output("listening"),
    ]);
    let handle = ChildHandle::builder(server(&format!("unix:{sock_text}"), "200", "0.2"))
        .ready(ready)
        .ladder(ladder("KILL:1s"))
        .spawn()
        .unwrap();
    let status = get_status(UnixStream::connect(&sock).unwrap());
    assert!(status.contains(" 200 "), "{status}");
    closed(handle);
    // `any` of a status never given and the probe: the probe makes it ready.
    let _ = std::fs::remove_file(&sock);
    let ready = Ready::any([
        Ready::Http(HttpCheck::parse(&unix_url(&sock, "/")).unwrap().status(299)),
        Ready::exec(["test", "-S", sock_text]).unwrap(),
    ]);
    let handle = ChildHandle::builder(server(&format!("unix:{sock_text}"), "200", "0"))
        .ready(ready)
        .ladder(ladder("KILL:1s"))
        .spawn()
        .unwrap();
    closed(handle);
    let _ = std::fs::remove_dir_all(&dir);
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
