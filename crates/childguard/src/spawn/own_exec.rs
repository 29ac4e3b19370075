//! Our own `execve` of the child, built before the fork, for a child whose environment must
//! name its own pid — known only after the fork, while std builds the environment before it:
//! `LISTEN_PID` (socket activation, `activation.rs`) and `WATCHDOG_PID`
//! ([`Builder::watchdog`](crate::Builder::watchdog), as systemd sets it). The argv and the
//! environment are the ones std would have used; the child only writes its pid's digits
//! (`sys/exec.rs`, [`PidExec`]).
//!
//! Race avoided (*our environment instead of the caller's*): the environment is built here,
//! not by std: it starts empty after the Command's `env_clear` (read back by `command_debug`,
//! which refuses when unsure), so a secret of ours never reaches a server whose caller
//! cleared it.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::process::Command;

use crate::error::ErrorKind;
use crate::sys::PidExec;

/// An error with the step it belongs to.
pub(crate) type Failure = (ErrorKind, std::io::Error);

/// Builds the child's exec: `command`'s program (resolved as std would), argv and environment,
/// changed by `edit_env`; every `pid_keys` entry removed from it and set to the child's pid in
/// the child; `listener` (socket activation) moved to fd 3 there.
pub(crate) fn prepare(
    command: &Command,
    edit_env: impl FnOnce(&mut Vec<(OsString, OsString)>),
    pid_keys: &[&str],
    listener: Option<i32>,
) -> Result<PidExec, Failure> {
    prepare_with_args(command, None, edit_env, pid_keys, listener)
}

/// [`prepare`] with `args` (after argv\[0\]) in place of the Command's own: how a container
/// launch gets the `--name` of ours put after its `run` (`handle/container.rs`), in a Command
/// std gives no way to change.
pub(crate) fn prepare_with_args(
    command: &Command,
    args: Option<&[OsString]>,
    edit_env: impl FnOnce(&mut Vec<(OsString, OsString)>),
    pid_keys: &[&str],
    listener: Option<i32>,
) -> Result<PidExec, Failure> {
    // NULs first: they would make the Command's Debug output unreadable (a vaguer error).
    build_argv(command, None).map_err(|e| (ErrorKind::Config, e))?;
    let hidden = crate::spawn::command_debug::read(command).map_err(|e| (ErrorKind::Config, e))?;
    let program = crate::spawn::program::resolve(command, hidden.env_clear)
        .map_err(|e| (ErrorKind::Spawn, e))?;
    let mut argv =
        build_argv(command, hidden.arg0.as_deref()).map_err(|e| (ErrorKind::Config, e))?;
    if let Some(args) = args {
        argv.truncate(1);
        for a in args {
            argv.push(
                crate::spawn::program::c_string(a.as_bytes())
                    .map_err(|e| (ErrorKind::Config, e))?,
            );
        }
    }
    let env = env_for(command, hidden.env_clear, edit_env, pid_keys)
        .into_iter()
        .map(|(k, v)| {
            let mut entry = k.into_vec();
            entry.push(b'=');
            entry.extend_from_slice(OsStr::as_bytes(&v));
            crate::spawn::program::c_string(&entry)
        })
        .collect::<std::io::Result<Vec<CString>>>()
        .map_err(|e| (ErrorKind::Config, e))?;
    PidExec::new(program, argv, env, pid_keys, listener).map_err(|e| (ErrorKind::Config, e))
}

/// argv\[0\] is the Command's `arg0`, else the program as given (like std), then the Command's
/// arguments.
fn build_argv(command: &Command, arg0: Option<&OsStr>) -> std::io::Result<Vec<CString>> {
    std::iter::once(arg0.unwrap_or(command.get_program()))
        .chain(command.get_args())
        .map(|a| crate::spawn::program::c_string(a.as_bytes()))
        .collect()
}

/// The child's environment but the pid entries: [`base_env`] changed by `edit_env`, without
/// any `pid_keys` entry.
pub(crate) fn env_for(
    command: &Command,
    env_clear: bool,
    edit_env: impl FnOnce(&mut Vec<(OsString, OsString)>),
    pid_keys: &[&str],
) -> Vec<(OsString, OsString)> {
    let mut vars = base_env(command, env_clear);
    edit_env(&mut vars);
    vars.retain(|(k, _)| !pid_keys.iter().any(|p| k.as_bytes() == p.as_bytes()));
    vars
}

/// The environment std would give the child: ours, or none after `env_clear`, with the
/// Command's `env`/`env_remove` applied.
fn base_env(command: &Command, env_clear: bool) -> Vec<(OsString, OsString)> {
    let mut vars: Vec<(OsString, OsString)> = match env_clear {
        true => Vec::new(),
        false => std::env::vars_os().collect(),
    };
    for (key, value) in command.get_envs() {
        vars.retain(|(k, _)| k != key);
        if let Some(value) = value {
            vars.push((key.to_os_string(), value.to_os_string()));
        }
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arg0_is_argv0() {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("/bin/x");
        cmd.arg0("zero").arg("a");
        let hidden = crate::spawn::command_debug::read(&cmd).unwrap();
        let argv = build_argv(&cmd, hidden.arg0.as_deref()).unwrap();
        let argv: Vec<String> = argv
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        assert_eq!(argv, ["zero", "a"]);
    }

    #[test]
    fn pid_keys_are_never_inherited() {
        let mut cmd = Command::new("x");
        cmd.env_clear().env("CG_A", "1").env("WATCHDOG_PID", "7");
        let env = env_for(&cmd, true, |_| {}, &["WATCHDOG_PID"]);
        assert_eq!(env, [(OsString::from("CG_A"), OsString::from("1"))]);
    }
}
