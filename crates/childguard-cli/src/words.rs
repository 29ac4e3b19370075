//! `--ready exec:'CMD'`: CMD split into words as a shell splits a simple command, with no
//! shell — no `/bin/sh` needed, nothing expanded.
//!
//! Words are separated by unquoted blanks (spaces, tabs, newlines). Inside a word: `'…'`
//! keeps everything up to the next `'` as it is; `"…"` too, except that `\"`, `\\`, `\$` and
//! `` \` `` there stand for the character; an unquoted `\` keeps the next character (a blank,
//! a quote) as it is. `''` or `""` is an empty word. Refused, rather than passed on as a
//! literal that a reader would take for a shell feature: an unquoted `$ ` `` ` `` `|` `&`
//! `;` `<` `>` `(` `)` `*` `?` `[` `~` `#` at a word's start — for those, run a shell
//! yourself: `exec:'sh -c "…"'`. An unclosed quote, a trailing `\`, and no word at all are
//! errors too.

/// The words of `text`, or why not.
pub fn split(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err("an unclosed ' quote".into()),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => w.push(c),
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => return Err("an unclosed \" quote".into()),
                        },
                        Some(c @ ('$' | '`')) => {
                            return Err(format!(
                                "{c} inside \"…\" would be expanded by a shell, and there is none here: write \\{c}, or use exec:'sh -c \"…\"'"
                            ))
                        }
                        Some(c) => w.push(c),
                        None => return Err("an unclosed \" quote".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => word.get_or_insert_with(String::new).push(c),
                None => return Err("a \\ at the end".into()),
            },
            '$' | '`' | '|' | '&' | ';' | '<' | '>' | '(' | ')' | '*' | '?' | '[' => {
                return Err(shell_feature(c));
            }
            '~' | '#' if word.is_none() => return Err(shell_feature(c)),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(w) = word {
        words.push(w);
    }
    if words.is_empty() {
        return Err("no command".into());
    }
    Ok(words)
}

fn shell_feature(c: char) -> String {
    format!(
        "an unquoted {c} is shell syntax, and no shell runs the probe: quote it ('{c}'), or run one yourself: exec:'sh -c \"…\"'"
    )
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn words_and_quotes() {
        let ok = |t: &str| split(t).unwrap_or_else(|e| panic!("{t}: {e}"));
        assert_eq!(ok("pg_isready -h /tmp/pg"), ["pg_isready", "-h", "/tmp/pg"]);
        assert_eq!(ok("  a\t b\n"), ["a", "b"]);
        assert_eq!(ok("sh -c 'exit 3'"), ["sh", "-c", "exit 3"]);
        assert_eq!(
            ok(r#"echo "a \"b\" \$x \n" ''"#),
            ["echo", r#"a "b" $x \n"#, ""]
        );
        assert_eq!(ok(r"a\ b c\'d"), ["a b", "c'd"]);
        assert_eq!(
            ok("redis-cli -s /r/x.sock ping"),
            ["redis-cli", "-s", "/r/x.sock", "ping"]
        );
        assert_eq!(ok("a=b x#y"), ["a=b", "x#y"]);
    }

    #[test]
    fn shell_syntax_and_bad_quotes_are_refused() {
        for (text, why) in [
            ("pg_isready | grep ok", "unquoted |"),
            ("echo $HOME", "unquoted $"),
            ("a; b", "unquoted ;"),
            ("ls *.sock", "unquoted *"),
            ("~/probe", "unquoted ~"),
            (r#"echo "$x""#, "$ inside"),
            ("sh -c 'x", "unclosed '"),
            ("echo \"x", "unclosed \""),
            ("x \\", "at the end"),
            ("   ", "no command"),
        ] {
            let e = split(text).expect_err(text);
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
