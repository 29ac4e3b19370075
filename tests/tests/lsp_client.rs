//! The LSP client of the tests (`tests/src/lsp.rs`, issue 31 item 7) on its own, over a
//! socketpair: framing, deadlines, the server's requests answered, bad input refused saying
//! why — never a hang or a panic.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use childguard_tests::lsp::{LspClient, LspError};
use serde_json::{json, Value};

/// A client reading one end of a socketpair, and the other end to write the "server's" bytes.
fn client_pair() -> (LspClient<UnixStream>, UnixStream) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    (LspClient::new(ours), theirs)
}

fn frame(body: &str) -> Vec<u8> {
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

#[test]
fn client_reads_messages_split_across_writes_and_two_in_one_write() {
    let (mut lsp, mut server) = client_pair();
    let mut bytes = frame(r#"{"jsonrpc":"2.0","method":"a"}"#);
    bytes.extend(frame(r#"{"jsonrpc":"2.0","method":"b"}"#));
    // The header cut in the middle, then the rest: the first read gets half a header.
    server.write_all(&bytes[..9]).unwrap();
    let partial = lsp.read_message(Instant::now() + Duration::from_millis(50));
    assert!(matches!(partial, Err(LspError::Timeout(_))), "{partial:?}");
    server.write_all(&bytes[9..]).unwrap();
    assert_eq!(lsp.read_message(soon()).unwrap()["method"], "a");
    assert_eq!(lsp.read_message(soon()).unwrap()["method"], "b");
}

/// Nothing comes: the read returns at its deadline, not later and not before (the poll
/// waited); the peer still open, so only the deadline can end it.
#[test]
fn client_read_returns_at_its_deadline_when_nothing_comes() {
    let (mut lsp, _server) = client_pair();
    let began = Instant::now();
    let got = lsp.read_message(began + Duration::from_millis(200));
    let took = began.elapsed();
    assert!(matches!(got, Err(LspError::Timeout(_))), "{got:?}");
    assert!(
        took >= Duration::from_millis(200),
        "returned after {took:?}"
    );
    assert!(took < Duration::from_secs(10), "returned after {took:?}");
}

#[test]
fn client_says_eof_when_the_server_closed_its_stdout() {
    let (mut lsp, server) = client_pair();
    drop(server);
    let got = lsp.read_message(soon());
    assert!(matches!(got, Err(LspError::Eof)), "{got:?}");
}

#[test]
fn client_refuses_bad_frames_saying_why() {
    let cases: [(&[u8], &str); 4] = [
        (b"Content-Type: x\r\n\r\n{}", "no Content-Length"),
        (b"Content-Length: ten\r\n\r\n{}", "bad Content-Length"),
        (b"Content-Length: 99999999999\r\n\r\n", "is over"),
        (b"Content-Length: 3\r\n\r\n{{{", "body is not JSON"),
    ];
    for (bytes, why) in cases {
        let (mut lsp, mut server) = client_pair();
        server.write_all(bytes).unwrap();
        match lsp.read_message(soon()) {
            Err(e @ LspError::BadFrame(_)) => {
                assert!(e.to_string().contains(why), "{bytes:?}: {e}")
            }
            other => panic!("{bytes:?}: {other:?}"),
        }
    }
    // Endless header bytes: refused after 8 KiB, not buffered for ever.
    let (mut lsp, mut server) = client_pair();
    server.write_all(&[b'x'; 9000]).unwrap();
    let got = lsp.read_message(soon());
    assert!(matches!(got, Err(LspError::BadFrame(_))), "{got:?}");
}

/// While it waits for its response, the client answers the server's requests
/// (`workspace/configuration`: one null per item) and keeps its notifications.
#[test]
fn client_answers_server_requests_while_waiting_for_its_response() {
    let (mut lsp, mut server) = client_pair();
    let mut sent = Vec::new();
    let id = lsp
        .send_request(&mut sent, "hover", json!({"x": 1}))
        .unwrap();
    server
        .write_all(&frame(
            r#"{"jsonrpc":"2.0","method":"window/logMessage","params":{}}"#,
        ))
        .unwrap();
    server
        .write_all(&frame(
            r#"{"jsonrpc":"2.0","id":"s1","method":"workspace/configuration","params":{"items":[{},{}]}}"#,
        ))
        .unwrap();
    server
        .write_all(&frame(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":42}}"#
        )))
        .unwrap();
    sent.clear();
    assert_eq!(
        lsp.response(&mut sent, id, Duration::from_secs(10))
            .unwrap(),
        42
    );
    assert_eq!(lsp.answered, ["workspace/configuration"]);
    assert_eq!(lsp.notifications.len(), 1);
    // What the client wrote back, read as the server would.
    let (ours, mut theirs) = UnixStream::pair().unwrap();
    theirs.write_all(&sent).unwrap();
    let mut replies = LspClient::new(ours);
    let reply = replies.read_message(soon()).unwrap();
    assert_eq!(
        reply,
        json!({"jsonrpc": "2.0", "id": "s1", "result": [null, null]})
    );
}

/// An error response is an error naming it.
#[test]
fn client_returns_an_error_response_as_an_error() {
    let (mut lsp, mut server) = client_pair();
    let id = lsp
        .send_request(&mut Vec::new(), "shutdown", Value::Null)
        .unwrap();
    let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32600,"message":"no"}}}}"#);
    server.write_all(&frame(&body)).unwrap();
    match lsp.response(&mut Vec::new(), id, Duration::from_secs(10)) {
        Err(e @ LspError::ErrorResponse(_)) => assert!(e.to_string().contains("-32600"), "{e}"),
        other => panic!("{other:?}"),
    }
}
