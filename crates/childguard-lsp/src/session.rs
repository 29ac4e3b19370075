//! What the close says and how it reads what the server says, without any I/O: both faces
//! (blocking, tokio) drive the same steps through these.

use serde_json::{json, Value};

use crate::frame::{encode, Decoder, FrameError};
use crate::report::Shutdown;

/// The id of our `shutdown` request. A string, so that it cannot be the id of a request the
/// user sent before (clients number theirs); the LSP allows `integer | string`.
pub(crate) const SHUTDOWN_ID: &str = "childguard-lsp/shutdown";

/// The error code of our answer to a request of the server's during the close:
/// `RequestCancelled` (see [`reply_refusing`]).
pub(crate) const REQUEST_CANCELLED: i64 = -32800;

/// `shutdown`: a request without params.
pub(crate) fn shutdown_request() -> Vec<u8> {
    encode(&json!({"jsonrpc": "2.0", "id": SHUTDOWN_ID, "method": "shutdown"}))
}

/// `exit`: a notification without params.
pub(crate) fn exit_notification() -> Vec<u8> {
    encode(&json!({"jsonrpc": "2.0", "method": "exit"}))
}

/// The answer to a request the server sends while we wait for `shutdown`'s: an error,
/// `RequestCancelled`. Every request must be answered (JSON-RPC), and a server may hold its
/// shutdown until it is (a handler awaiting `workspace/configuration`); an error is the one
/// answer every request allows — a `null` result would break a handler that expects an
/// array — and a server's framework takes a cancelled request quietly.
fn reply_refusing(id: &Value) -> Vec<u8> {
    encode(&json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": REQUEST_CANCELLED,
            "message": "the client is closing the connection (`shutdown` sent): not handled",
        },
    }))
}

/// What to do with the next thing the server said.
#[derive(Debug)]
pub(crate) enum Next {
    /// Nothing whole yet: read more.
    Read,
    /// The answer to `shutdown` (or the output cannot be read any further): the step is over.
    Done(Shutdown),
    /// A request of the server's: write this answer, then look again.
    Reply(Vec<u8>),
}

/// The reading side of the `shutdown` step: the decoder, and what was seen.
#[derive(Debug, Default)]
pub(crate) struct Listener {
    decoder: Decoder,
    /// Messages read and dropped: notifications, answers to the user's earlier requests.
    pub(crate) dropped: usize,
    /// Requests of the server's answered with `RequestCancelled`.
    pub(crate) refused: usize,
}

impl Listener {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.decoder.push(bytes);
    }

    /// The next step, from what has been pushed so far.
    pub(crate) fn next(&mut self) -> Next {
        loop {
            let message = match self.decoder.next_message() {
                Ok(Some(message)) => message,
                Ok(None) => return Next::Read,
                Err(FrameError(why)) => return Next::Done(Shutdown::Unreadable(why)),
            };
            let id = message.get("id").filter(|id| !id.is_null());
            let is_request = message.get("method").is_some_and(Value::is_string);
            match (id, is_request) {
                (Some(id), false) if id == SHUTDOWN_ID => {
                    return Next::Done(answer(&message));
                }
                (Some(id), true) => {
                    self.refused += 1;
                    return Next::Reply(reply_refusing(id));
                }
                _ => self.dropped += 1,
            }
        }
    }

    /// Bytes skipped as not LSP, bodies that were not JSON, and bytes read that made no
    /// whole message.
    pub(crate) fn junk(&self) -> (usize, usize, usize) {
        (
            self.decoder.skipped,
            self.decoder.garbled,
            self.decoder.buffered(),
        )
    }
}

/// `shutdown`'s answer: a result (`null`, as the specification has it; any other is taken as
/// well), or an error.
fn answer(message: &Value) -> Shutdown {
    let Some(error) = message.get("error") else {
        return Shutdown::Answered;
    };
    Shutdown::Refused {
        code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
        message: error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(value: Value) -> Vec<u8> {
        encode(&value)
    }

    #[test]
    fn the_answer_is_found_behind_notifications_requests_and_other_answers() {
        let mut l = Listener::default();
        l.push(&framed(
            json!({"jsonrpc": "2.0", "method": "window/logMessage", "params": {}}),
        ));
        l.push(&framed(
            json!({"jsonrpc": "2.0", "id": 7, "result": {"a": 1}}),
        ));
        l.push(&framed(
            json!({"jsonrpc": "2.0", "id": 0, "method": "workspace/configuration"}),
        ));
        l.push(&framed(
            json!({"jsonrpc": "2.0", "id": SHUTDOWN_ID, "result": null}),
        ));
        let Next::Reply(reply) = l.next() else {
            panic!("the server's request is answered first")
        };
        let mut d = Decoder::default();
        d.push(&reply);
        let reply = d.next_message().unwrap().unwrap();
        assert_eq!(reply["id"], 0);
        assert_eq!(reply["error"]["code"], REQUEST_CANCELLED);
        assert!(matches!(l.next(), Next::Done(Shutdown::Answered)));
        assert_eq!((l.dropped, l.refused), (2, 1));
    }

    #[test]
    fn an_error_answer_is_refused_with_its_code_and_message() {
        let mut l = Listener::default();
        l.push(&framed(json!({
            "jsonrpc": "2.0", "id": SHUTDOWN_ID,
            "error": {"code": -32002, "message": "not initialized"},
        })));
        match l.next() {
            Next::Done(Shutdown::Refused { code, message }) => {
                assert_eq!((code, message.as_str()), (-32002, "not initialized"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_numeric_id_is_never_taken_for_ours() {
        let mut l = Listener::default();
        l.push(&framed(json!({"jsonrpc": "2.0", "id": 1, "result": null})));
        assert!(matches!(l.next(), Next::Read));
        assert_eq!(l.dropped, 1);
    }
}
