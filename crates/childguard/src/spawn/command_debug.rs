//! What a [`Command`] holds but std gives no stable getter for: whether `env_clear` was called
//! and the `arg0` it was given — read back from the Command's (non-alternate) `Debug` output.
//! Socket activation execs the child itself (`activation.rs`) and must honour both:
//! `Command::get_env_clear` is unstable (feature `command_resolved_envs`) and there is no
//! getter for `arg0` at all. Without this, a caller's `env_clear()` (Python's `env=` is
//! `env_clear().envs(env)`) was dropped and the server got every variable of our process —
//! a secret among them.
//!
//! std prints, on every Unix:
//!
//! ```text
//! [cd "<dir>" && ][env -i |env -u K1 -u K2 ]K3="v3" … ["<program>"] "<argv0>" "<arg1>" …
//! ```
//!
//! `env -i ` exactly when `env_clear` was called; `["<program>"] ` only when `arg0` differs
//! from the program. Every value that comes from the caller is printed quoted and escaped
//! (`"` as `\"`), except the variable names (printed lossily, unquoted). So a dir, a value, a
//! program literally named `env` or an argument `-i` cannot fake the prefix: we do not search
//! the text, we walk it against the parts we *can* read back (`get_current_dir`, `get_envs`,
//! `get_program`, `get_args`), once assuming `env_clear` and once not. Exactly one reading
//! must match the whole text (both cannot: for the same variables the `env_clear` text is the
//! longer by `env -i `, or the other starts `env -u`). No match (std changed its format) is an
//! error: we refuse to spawn rather than guess and maybe pass our whole environment to the
//! server (fail closed). Unit tests pin the format, so a std change fails them loudly. (A NUL
//! in the program or an argument, which std prints as `"<string-with-nul>"`, is refused
//! before, with its own error.)
//!
//! Other ways, not taken: the alternate form (`{:#?}`) shows `clear: true` too, but it is a
//! dump of std's private fields, likelier to change than this shell-like form, which std
//! documents as approximating the command line. And the child cannot look for itself: std
//! runs our `pre_exec` hook (where activation's `execve` is) before it installs the child's
//! environment.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::process::Command;

/// What [`read`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Hidden {
    /// `env_clear` was called: the child starts from an empty environment.
    pub(crate) env_clear: bool,
    /// The `arg0` set with `CommandExt::arg0`, if it differs from the program.
    pub(crate) arg0: Option<OsString>,
}

/// Reads `env_clear` and `arg0` from `command`'s `Debug` output. Errors (refusing rather than
/// guessing) if the text does not read back as exactly one of the two possibilities.
pub(crate) fn read(command: &Command) -> io::Result<Hidden> {
    read_text(command, &format!("{command:?}"))
}

/// [`read`] from `text`, the Debug output (given apart for the tests of a changed format).
fn read_text(command: &Command, text: &str) -> io::Result<Hidden> {
    let readings: Vec<Hidden> = [false, true]
        .into_iter()
        .filter_map(|env_clear| {
            walk(command, text, env_clear).map(|arg0| Hidden { env_clear, arg0 })
        })
        .collect();
    let why = match <[Hidden; 1]>::try_from(readings) {
        Ok([hidden]) => return Ok(hidden),
        Err(readings) if readings.is_empty() => {
            "does not read back as std printed a Command (has std's Debug format changed?)"
        }
        Err(_) => "reads back both with and without env_clear",
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "cannot tell whether env_clear was called on the Command: its Debug output (not \
             shown: it holds the environment's values) {why}; socket activation refuses to \
             spawn rather than risk giving the server this process's environment"
        ),
    ))
}

/// Walks `text` as std prints `command` if `env_clear` was (`clear`) or was not called:
/// `Some(arg0)` if the whole text matches, `None` at the first difference.
fn walk(command: &Command, text: &str, clear: bool) -> Option<Option<OsString>> {
    let mut rest = text;
    if let Some(dir) = command.get_current_dir() {
        rest = expect_quoted(rest.strip_prefix("cd ")?, dir.as_os_str().as_bytes())?;
        rest = rest.strip_prefix(" && ")?;
    }
    if clear {
        rest = rest.strip_prefix("env -i ")?;
    } else {
        let mut removed = command.get_envs().filter(|(_, v)| v.is_none()).peekable();
        if removed.peek().is_some() {
            rest = rest.strip_prefix("env ")?;
            for (key, _) in removed {
                rest = rest.strip_prefix("-u ")?;
                rest = rest.strip_prefix(&*key.to_string_lossy())?;
                rest = rest.strip_prefix(' ')?;
            }
        }
    }
    for (key, value) in command.get_envs() {
        // With env_clear std forgets removals (there is nothing to remove from).
        let Some(value) = value else { continue };
        rest = rest
            .strip_prefix(&*key.to_string_lossy())?
            .strip_prefix('=')?;
        rest = expect_quoted(rest, value.as_bytes())?.strip_prefix(' ')?;
    }
    let program = command.get_program().as_bytes();
    let arg0 = match rest.strip_prefix('[') {
        Some(after) => {
            rest = expect_quoted(after, program)?.strip_prefix("] ")?;
            let (arg0, after) = quoted(rest)?;
            rest = after;
            Some(OsString::from_vec(arg0))
        }
        None => {
            rest = expect_quoted(rest, program)?;
            None
        }
    };
    for arg in command.get_args() {
        rest = expect_quoted(rest.strip_prefix(' ')?, arg.as_bytes())?;
    }
    rest.is_empty().then_some(arg0)
}

/// The rest of `text` after a quoted string equal to `want`.
fn expect_quoted<'a>(text: &'a str, want: &[u8]) -> Option<&'a str> {
    let (got, rest) = quoted(text)?;
    (got == want).then_some(rest)
}

/// A string as Rust's `Debug` quotes it (`"…"` with `\\ \" \' \n \r \t \0 \xNN \u{…}`
/// escapes): its bytes and the text after the closing quote.
fn quoted(text: &str) -> Option<(Vec<u8>, &str)> {
    let mut chars = text.strip_prefix('"')?.char_indices();
    let body = &text[1..];
    let mut bytes = Vec::new();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((bytes, &body[at + 1..])),
            '\\' => match chars.next()?.1 {
                '\\' => bytes.push(b'\\'),
                '"' => bytes.push(b'"'),
                '\'' => bytes.push(b'\''),
                'n' => bytes.push(b'\n'),
                'r' => bytes.push(b'\r'),
                't' => bytes.push(b'\t'),
                '0' => bytes.push(0),
                'x' => {
                    let hex: String = [chars.next()?.1, chars.next()?.1].iter().collect();
                    bytes.push(u8::from_str_radix(&hex, 16).ok()?);
                }
                'u' => {
                    if chars.next()?.1 != '{' {
                        return None;
                    }
                    let mut hex = String::new();
                    loop {
                        match chars.next()?.1 {
                            '}' => break,
                            h => hex.push(h),
                        }
                    }
                    let c = char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?;
                    bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
                _ => return None,
            },
            c => bytes.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::process::CommandExt;

    fn hidden(command: &Command) -> Hidden {
        read(command).unwrap_or_else(|e| panic!("{command:?}: {e}"))
    }

    fn clear(command: &Command) -> bool {
        hidden(command).env_clear
    }

    #[test]
    fn env_clear_is_read_back() {
        assert!(!clear(&Command::new("prog")));
        let mut cmd = Command::new("prog");
        cmd.env_clear();
        assert!(clear(&cmd));
        let mut cmd = Command::new("prog");
        cmd.env("PATH", "/x").env_remove("HOME").arg("a b");
        assert!(!clear(&cmd));
        cmd.env_clear().env("PATH", "/y").env_remove("GONE");
        assert!(clear(&cmd));
    }

    #[test]
    fn a_program_named_env_with_arg_i_is_not_env_clear() {
        let mut cmd = Command::new("env");
        cmd.args(["-i", "env -i "]);
        assert!(!clear(&cmd));
        cmd.env_clear();
        assert!(clear(&cmd));
    }

    #[test]
    fn a_cwd_with_quotes_and_ampersands_cannot_fake_it() {
        for dir in ["/t\" && env -i x", "/t\\\" && env -i ", "/d\" && \"prog"] {
            let mut cmd = Command::new("prog");
            cmd.current_dir(dir);
            assert!(!clear(&cmd), "{dir}");
            cmd.env_clear();
            assert!(clear(&cmd), "{dir}");
        }
    }

    #[test]
    fn values_with_escapes_and_non_utf8_bytes_read_back() {
        let odd = OsStr::from_bytes(b"z\xff\"\\\n\r\t\x01 ' e\xcc\x81 \xc3\xa9 \0");
        let mut cmd = Command::new("pe\u{301}");
        cmd.arg(odd)
            .current_dir("/\u{e9}\t")
            .env("K\u{c9}", odd)
            .env_remove("R\u{e9}")
            .env(OsStr::from_bytes(b"K\xff"), "v");
        assert!(!clear(&cmd));
        cmd.env_clear().env("A", odd);
        assert!(clear(&cmd));
    }

    #[test]
    fn arg0_is_read_back() {
        assert_eq!(hidden(&Command::new("prog")).arg0, None);
        let mut cmd = Command::new("/usr/bin/prog");
        cmd.arg0("zero \"[x]\" \u{301}").arg("a");
        let got = hidden(&cmd);
        assert_eq!(
            got.arg0.as_deref(),
            Some(OsStr::new("zero \"[x]\" \u{301}"))
        );
        assert!(!got.env_clear);
        // arg0 equal to the program is no change.
        let mut cmd = Command::new("prog");
        cmd.arg0("prog").env_clear();
        assert_eq!(
            hidden(&cmd),
            Hidden {
                env_clear: true,
                arg0: None
            }
        );
    }

    #[test]
    fn a_variable_named_env_i_cannot_fake_it() {
        // Not cleared, nothing removed: printed `env -i X="v" "prog"`.
        let mut cmd = Command::new("prog");
        cmd.env("env -i X", "v");
        assert!(!clear(&cmd));
        cmd.env_clear().env("env -i X", "v");
        assert!(clear(&cmd));
    }

    #[test]
    fn a_changed_format_is_refused() {
        let mut cmd = Command::new("prog");
        cmd.env("A", "1").arg("x");
        assert!(read_text(&cmd, r#"A="1" "prog" "x""#).is_ok());
        for text in [
            r#"A="1" prog "x""#,
            r#"env --ignore-environment A="1" "prog" "x""#,
            r#"A='1' "prog" "x""#,
            r#"A="1" "prog" "x" "#,
            r#"A="1" "prog""#,
            r#"Command { program: "prog" }"#,
        ] {
            let err = read_text(&cmd, text).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
            assert!(err.to_string().contains("env_clear"), "{err}");
            assert!(err.to_string().contains("does not read back"), "{err}");
        }
        // The values are not in the message (they may be secrets).
        let err = read_text(&cmd, r#"A="1" "prog" "x" "y""#).unwrap_err();
        assert!(!err.to_string().contains("prog"), "{err}");
    }

    #[test]
    fn a_nul_in_the_dir_reads_back_as_std_keeps_it() {
        // std keeps a NUL-containing dir as "<string-with-nul>" (and fails the spawn).
        let mut cmd = Command::new("prog");
        cmd.current_dir(OsStr::from_bytes(b"/a\0b")).env_clear();
        assert!(clear(&cmd));
    }

    #[test]
    fn quoted_strings_unescape() {
        assert_eq!(
            quoted(r#""a\"b\\\x41\u{e9}\0" rest"#),
            Some((b"a\"b\\A\xc3\xa9\0".to_vec(), " rest"))
        );
        assert_eq!(quoted(r#""unterminated"#), None);
        assert_eq!(quoted(r#""bad \q""#), None);
        assert_eq!(quoted("no quote"), None);
    }
}
