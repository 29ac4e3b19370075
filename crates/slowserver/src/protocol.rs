//! The line protocol: one request per line on stdin.

/// A parsed request line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `PING`: answer `PONG`.
    Ping,
    /// `READ n`: answer `n` NUL bytes (after `--delay-read`).
    Read(u64),
    /// `EXIT code`: exit with `code` at once.
    Exit(i32),
    /// A known command with a missing, extra or malformed argument.
    BadArgument,
    /// Anything else, including an empty line.
    Unknown,
}

/// The answer to [`Request::Ping`].
pub const PONG: &[u8] = b"PONG\n";
/// The answer to [`Request::Unknown`].
pub const ERR_UNKNOWN: &[u8] = b"ERR unknown command\n";
/// The answer to [`Request::BadArgument`].
pub const ERR_BAD_ARGUMENT: &[u8] = b"ERR bad argument\n";

/// Parses one line (with or without its `\n` or `\r\n`).
pub fn parse(line: &[u8]) -> Request {
    let Ok(text) = std::str::from_utf8(line) else {
        return Request::Unknown;
    };
    let mut words = text.split_ascii_whitespace();
    let (command, arg, extra) = (words.next(), words.next(), words.next());
    match (command, arg, extra) {
        (Some("PING"), None, _) => Request::Ping,
        (Some("READ"), Some(n), None) => n.parse().map_or(Request::BadArgument, Request::Read),
        (Some("EXIT"), Some(code), None) => {
            code.parse().map_or(Request::BadArgument, Request::Exit)
        }
        (Some("PING" | "READ" | "EXIT"), _, _) => Request::BadArgument,
        _ => Request::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_commands() {
        assert_eq!(parse(b"PING\n"), Request::Ping);
        assert_eq!(parse(b"PING\r\n"), Request::Ping);
        assert_eq!(parse(b"READ 5\n"), Request::Read(5));
        assert_eq!(parse(b"READ 0"), Request::Read(0));
        assert_eq!(parse(b"EXIT 7\n"), Request::Exit(7));
        assert_eq!(parse(b"EXIT -1\n"), Request::Exit(-1));
    }

    #[test]
    fn bad_arguments() {
        assert_eq!(parse(b"READ\n"), Request::BadArgument);
        assert_eq!(parse(b"READ x\n"), Request::BadArgument);
        assert_eq!(parse(b"READ -1\n"), Request::BadArgument);
        assert_eq!(parse(b"READ 1 2\n"), Request::BadArgument);
        assert_eq!(parse(b"EXIT\n"), Request::BadArgument);
        assert_eq!(parse(b"PING now\n"), Request::BadArgument);
    }

    #[test]
    fn unknown_commands() {
        assert_eq!(parse(b"\n"), Request::Unknown);
        assert_eq!(parse(b"ping\n"), Request::Unknown);
        assert_eq!(parse(b"HELLO\n"), Request::Unknown);
        assert_eq!(parse(b"\xff\xfe\n"), Request::Unknown);
    }
}
