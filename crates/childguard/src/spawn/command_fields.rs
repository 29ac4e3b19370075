//! What our own spawn (`clone3.rs`) must know of a [`Command`] beyond its getters: its stdio
//! and process group, and whether it asks for anything our spawn does not do (`uid`, `gid`,
//! `groups`, `chroot` …) — read from the alternate `Debug` form (`{:#?}`), which std prints
//! for every setting it holds, one field per line:
//!
//! ```text
//! Command {
//!     program: "sh",
//!     args: [ … ],
//!     cwd: Some( … ),
//!     stdin: Some(
//!         MakePipe,
//!     ),
//!     stdout: Some( Fd( FileDesc( OwnedFd { fd: 3, }, ), ), ),
//!     pgroup: Some(
//!         0,
//!     ),
//!     create_pidfd: false,
//! }
//! ```
//!
//! A field is printed only when set, so an unset stdio is the default (`Inherit` for
//! `spawn`). std has no getter for any of these (`Stdio` is opaque even when held), hence this
//! reading, made like `command_debug`'s: fail closed. A field we do not know, a value we
//! cannot read exactly, or a layout we do not recognise answers "not ours" and the spawn takes
//! std's path, which honours everything. Unit tests pin the format, so a std change shows.
//!
//! What no `Debug` form shows: the `pre_exec` hooks. That is why our spawn is not the default
//! for a caller's `Command` ([`Builder::own_spawn`](crate::Builder::own_spawn)).

use std::process::Command;

/// One of fds 0–2 as the Command sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StdioSpec {
    /// Not set, or `Stdio::inherit()`.
    Inherit,
    /// `Stdio::null()`.
    Null,
    /// `Stdio::piped()`.
    Piped,
    /// An fd the Command holds (`Stdio::from(OwnedFd)`, a `ChildStdout` …) or borrows
    /// (`Stdio::from(io::stderr())`): this number, open until the Command is dropped.
    Fd(i32),
}

/// What [`read`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fields {
    pub(crate) stdio: [StdioSpec; 3],
    /// `CommandExt::process_group`.
    pub(crate) process_group: Option<i32>,
}

/// The fields that hold only what the getters give (`program`, `args`, `env`, `cwd`) or that
/// we read here; any other makes the spawn std's.
const KNOWN: [&str; 9] = [
    "program",
    "args",
    "env",
    "cwd",
    "stdin",
    "stdout",
    "stderr",
    "pgroup",
    "create_pidfd",
];

/// Reads `command`'s stdio and process group, or says why our spawn cannot take it.
pub(crate) fn read(command: &Command) -> Result<Fields, String> {
    read_text(&format!("{command:#?}"))
}

fn read_text(text: &str) -> Result<Fields, String> {
    let mut lines = text.lines();
    if lines.next() != Some("Command {") {
        return Err("its Debug form does not start as std's does".into());
    }
    let mut fields = Fields {
        stdio: [StdioSpec::Inherit; 3],
        process_group: None,
    };
    let mut current: Option<(&str, String)> = None;
    let mut ended = false;
    for line in lines {
        if ended {
            return Err("its Debug form goes on after its end".into());
        }
        if line == "}" {
            ended = true;
            continue;
        }
        match top_level_field(line) {
            Some((name, rest)) => {
                if let Some((name, value)) = current.take() {
                    take(&mut fields, name, &value)?;
                }
                if !KNOWN.contains(&name) {
                    return Err(format!("it sets {name}, which our spawn does not do"));
                }
                current = Some((name, rest.to_string()));
            }
            None => match &mut current {
                Some((_, value)) => value.push_str(line),
                None => return Err("its Debug form has a line outside any field".into()),
            },
        }
    }
    if !ended {
        return Err("its Debug form does not end as std's does".into());
    }
    if let Some((name, value)) = current {
        take(&mut fields, name, &value)?;
    }
    Ok(fields)
}

/// `    name: rest` (exactly four spaces: nested lines have eight or more, and a value's own
/// text never holds a raw newline: std escapes it).
fn top_level_field(line: &str) -> Option<(&str, &str)> {
    let body = line.strip_prefix("    ")?;
    let (name, rest) = body.split_once(": ")?;
    let ident = !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    ident.then_some((name, rest))
}

/// Records the field `name` whose value (all its lines) is `value`.
fn take(fields: &mut Fields, name: &str, value: &str) -> Result<(), String> {
    let slot = match name {
        "stdin" => 0,
        "stdout" => 1,
        "stderr" => 2,
        "pgroup" => {
            let n = squeeze(value);
            let group = n
                .strip_prefix("Some(")
                .and_then(|v| v.strip_suffix(')'))
                .and_then(|v| v.parse::<i32>().ok())
                .ok_or_else(|| format!("its process group reads {n:?}"))?;
            fields.process_group = Some(group);
            return Ok(());
        }
        _ => return Ok(()),
    };
    let n = squeeze(value);
    let spec = match n.as_str() {
        "Some(Inherit)" => StdioSpec::Inherit,
        "Some(Null)" => StdioSpec::Null,
        "Some(MakePipe)" => StdioSpec::Piped,
        other => {
            let fd = other
                .strip_prefix("Some(Fd(FileDesc(OwnedFd{fd:")
                .and_then(|v| v.strip_suffix("})))"))
                .or_else(|| {
                    other
                        .strip_prefix("Some(StaticFd(BorrowedFd{fd:")
                        .and_then(|v| v.strip_suffix("}))"))
                })
                .and_then(|v| v.parse::<i32>().ok())
                .filter(|fd| *fd >= 0)
                .ok_or_else(|| format!("its {name} reads {other:?}"))?;
            StdioSpec::Fd(fd)
        }
    };
    fields.stdio[slot] = spec;
    Ok(())
}

/// The value without whitespace and commas: `Some(\n    MakePipe,\n),` → `Some(MakePipe)`.
fn squeeze(value: &str) -> String {
    value
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ',')
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;

    #[test]
    fn a_plain_command_inherits_everything() {
        let fields = read(&Command::new("sh")).unwrap();
        assert_eq!(fields.stdio, [StdioSpec::Inherit; 3]);
        assert_eq!(fields.process_group, None);
    }

    #[test]
    fn every_stdio_kind_and_the_group_read_back() {
        let file = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let raw = file.as_raw_fd();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("x\n    uid: 1")
            .env("K", "v\n    gid: 2 }")
            .current_dir("/tmp")
            .stdin(Stdio::piped())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(std::io::stderr()))
            .process_group(7);
        let fields = read(&cmd).unwrap();
        assert_eq!(
            fields.stdio,
            [StdioSpec::Piped, StdioSpec::Fd(raw), StdioSpec::Fd(2)]
        );
        assert_eq!(fields.process_group, Some(7));
        cmd.stdin(Stdio::null()).stdout(Stdio::inherit());
        assert_eq!(
            read(&cmd).unwrap().stdio,
            [StdioSpec::Null, StdioSpec::Inherit, StdioSpec::Fd(2)]
        );
    }

    #[test]
    fn settings_our_spawn_does_not_do_send_it_to_std() {
        let mut cmd = Command::new("sh");
        cmd.uid(0);
        assert!(read(&cmd).unwrap_err().contains("uid"));
        let mut cmd = Command::new("sh");
        cmd.gid(0);
        assert!(read(&cmd).unwrap_err().contains("gid"));
    }

    #[test]
    fn an_unknown_layout_is_refused() {
        assert!(read_text("Command { program: \"sh\" }").is_err());
        let odd = "Command {\n    program: \"sh\",\n    stdin: Some(\n        Pipe2,\n    ),\n}";
        assert!(read_text(odd).unwrap_err().contains("stdin"));
        let unended = "Command {\n    program: \"sh\",";
        assert!(read_text(unended).is_err());
    }
}
