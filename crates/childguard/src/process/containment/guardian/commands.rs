//! Commands the guardian runs once the host is gone: a container engine's `kill` for each
//! container launched by a child of ours (`containment/container`), whose processes belong to
//! the engine — no cgroup or process group of ours holds them, so only the engine can end them.
//!
//! Wire and table form (one table entry, beside the cgroups' paths): `0x01`, each argv string
//! NUL-terminated, an empty string, each `KEY=VALUE` of the environment NUL-terminated. A
//! cgroup's path always starts with `/`, so the first byte tells the two apart.
//!
//! In the guardian, after the fork: no allocation. The pointer arrays `execve(2)` takes are
//! built on the stack, pointing into the table's arena, whose strings are NUL-terminated as
//! they came.

use std::io;
use std::time::Duration;

use super::table::{self, Table, MAX_ENTRY};
use super::Registration;
use crate::sys::guardian as sys;

/// The first byte of a command entry.
const COMMAND: u8 = 0x01;
/// Strings (argv and environment together) one command may have.
const MAX_STRINGS: usize = 256;
/// Commands run at once; more wait for a free slot.
const AT_ONCE: usize = 64;
/// How long the guardian lets its commands run, all together, before it kills them.
pub(crate) const RUN_FOR: Duration = Duration::from_secs(20);

/// Whether a table entry is a command (not a cgroup's path).
pub(crate) fn is_command(entry: &[u8]) -> bool {
    entry.first() == Some(&COMMAND)
}

/// The entry for `argv` run with `env`; `None` if a string holds a NUL, the argv is empty, or
/// it would not fit the guardian's bounds (its table's longest entry, the strings one
/// command may have).
pub(crate) fn encode(argv: &[&[u8]], env: &[&[u8]]) -> Option<Vec<u8>> {
    if argv.is_empty() || argv[0].is_empty() || argv.len() + env.len() + 2 > MAX_STRINGS {
        return None;
    }
    let mut blob = vec![COMMAND];
    for s in argv {
        if s.contains(&0) {
            return None;
        }
        blob.extend_from_slice(s);
        blob.push(0);
    }
    blob.push(0);
    for s in env {
        if s.contains(&0) || s.is_empty() {
            return None;
        }
        blob.extend_from_slice(s);
        blob.push(0);
    }
    (blob.len() <= MAX_ENTRY).then_some(blob)
}

/// Has the guardian run `command` (`argv`, run with `env` only) if this process dies before
/// the [`Registration`] is dismissed: how a container engine's `kill` outlives us
/// (`containment/container`). The command's argv and environment are sent whole, so the
/// guardian needs nothing of ours to run it.
pub(crate) fn register(argv: &[&[u8]], env: &[&[u8]]) -> io::Result<Registration> {
    let what = String::from_utf8_lossy(&argv.join(&b' ')).into_owned();
    let blob = encode(argv, env).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "`{what}`: too long a command for the guardian (argv and environment at most                  {} bytes, no NUL inside a string)",
                table::MAX_ENTRY
            ),
        )
    })?;
    super::register_entry(&format!("`{what}`"), &blob)
}

/// Starts the command `entry` holds; its pid, or `None` if it is malformed or cannot start.
fn start(entry: &[u8], close_limit: u32) -> Option<i32> {
    let body = entry.strip_prefix(&[COMMAND])?;
    let mut argv = [std::ptr::null::<libc::c_char>(); MAX_STRINGS];
    let mut envp = [std::ptr::null::<libc::c_char>(); MAX_STRINGS];
    let (mut na, mut ne) = (0, 0);
    let mut in_env = false;
    let mut at = 0;
    while at < body.len() {
        let len = body[at..].iter().position(|&b| b == 0)?;
        if len == 0 && !in_env {
            in_env = true;
        } else if len > 0 {
            let slot = if in_env { &mut envp[ne] } else { &mut argv[na] };
            *slot = body[at..].as_ptr().cast();
            if in_env {
                ne += 1;
            } else {
                na += 1;
            }
            if na >= MAX_STRINGS - 1 || ne >= MAX_STRINGS - 1 {
                return None;
            }
        }
        at += len + 1;
    }
    if na == 0 {
        return None;
    }
    sys::spawn_command(&argv[..=na], &envp[..=ne], close_limit).ok()
}

/// Runs every command in `table`, up to [`AT_ONCE`] at a time, and reaps them; those still
/// running after [`RUN_FOR`] are killed.
pub(crate) fn run_all(table: &Table<'_>, close_limit: u32) {
    let started = super::walk::now();
    let mut running = [0i32; AT_ONCE];
    let mut next = 0;
    loop {
        for slot in running.iter_mut().filter(|p| **p > 0) {
            if sys::reaped(*slot) {
                *slot = 0;
            }
        }
        while next < table.len() {
            let Some(free) = running.iter().position(|&p| p == 0) else {
                break;
            };
            let entry = table.path(next);
            next += 1;
            if is_command(entry) {
                running[free] = start(entry, close_limit).unwrap_or(0);
            }
        }
        if next >= table.len() && running.iter().all(|&p| p == 0) {
            return;
        }
        if super::walk::now() >= started + RUN_FOR {
            for &pid in running.iter().filter(|&&p| p > 0) {
                sys::kill_command(pid);
            }
            for &pid in running.iter().filter(|&&p| p > 0) {
                while !sys::reaped(pid) {
                    super::walk::sleep(Duration::from_millis(5));
                }
            }
            return;
        }
        super::walk::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_its_strings_then_an_empty_one_then_the_environment() {
        let blob = encode(&[b"/usr/bin/podman", b"kill", b"c1"], &[b"HOME=/root"]).unwrap();
        assert_eq!(blob, b"\x01/usr/bin/podman\0kill\0c1\0\0HOME=/root\0");
        assert!(is_command(&blob));
        assert!(!is_command(b"/sys/fs/cgroup/x"));
    }

    #[test]
    fn what_the_guardian_cannot_run_is_refused_on_the_host() {
        assert_eq!(encode(&[], &[]), None);
        assert_eq!(encode(&[b"a\0b"], &[]), None);
        assert_eq!(encode(&[b"x"], &[b""]), None);
        let long = vec![b'x'; MAX_ENTRY];
        assert_eq!(encode(&[&long], &[]), None);
        let many: Vec<&[u8]> = vec![b"a"; MAX_STRINGS];
        assert_eq!(encode(&many, &[]), None);
    }
}
