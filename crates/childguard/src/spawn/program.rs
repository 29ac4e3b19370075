//! The program a `Command` runs, found as `execvp` would find it. Socket activation execs it
//! itself (`activation.rs`), and a hooked fork looks at its first bytes first (`exec_check.rs`).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;

/// The program to exec, looked up like `execvp` does: as given if it contains a `/`, else in
/// the `PATH` the child will have (the Command's own `PATH` if it sets one; none, so glibc's
/// default, after `env_clear`). Not found, the error is `execvp`'s too: `EACCES` if some
/// entry named so exists but cannot be executed (a directory, a file without `x`), else
/// `ENOENT` — what std's spawn reports (and `timeout(1)` turns into 126 and 127).
pub(crate) fn resolve(command: &Command, env_clear: bool) -> io::Result<CString> {
    let program = command.get_program();
    if program.as_bytes().contains(&b'/') {
        return c_string(program.as_bytes());
    }
    let path = match command.get_envs().find(|(k, _)| *k == "PATH") {
        Some((_, Some(v))) => v.to_os_string(),
        // Removed PATH: glibc's execvp default.
        Some((_, None)) => OsString::from("/bin:/usr/bin"),
        None if env_clear => OsString::from("/bin:/usr/bin"),
        None => std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/bin:/usr/bin")),
    };
    search(program, &path).and_then(|found| c_string(found.as_os_str().as_bytes()))
}

/// `program` (without a `/`) in the directories of `path`, as `execvp` looks: the first
/// executable file. Not found: `EACCES` if some entry named so exists but cannot be executed,
/// else `ENOENT`. Also how a container launch's engine is found (`handle/container.rs`).
pub(crate) fn search(program: &OsStr, path: &OsStr) -> io::Result<PathBuf> {
    let mut denied = false;
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        match std::fs::metadata(&candidate) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return Ok(candidate),
            Ok(_) => denied = true,
            Err(_) => {}
        }
    }
    Err(io::Error::from_raw_os_error(if denied {
        libc::EACCES
    } else {
        libc::ENOENT
    }))
}

pub(crate) fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{:?} contains a NUL byte",
                String::from_utf8_lossy(bytes).replace('\0', "\\0")
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_resolution() {
        let sh = resolve(&Command::new("sh"), false).unwrap();
        assert!(sh.to_bytes().ends_with(b"/sh"));
        let mut cmd = Command::new("sh");
        cmd.env("PATH", "/nonexistent");
        assert_eq!(
            resolve(&cmd, false).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        // After env_clear our PATH is not the child's: glibc's default.
        let mut cmd = Command::new("sh");
        cmd.env_clear();
        assert_eq!(resolve(&cmd, true).unwrap().to_bytes(), b"/bin/sh");
    }
}
