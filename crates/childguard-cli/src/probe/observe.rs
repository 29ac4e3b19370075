//! What the probe reads from `/proc` about the server: its signal masks (`SigIgn`, `SigCgt`),
//! its listening sockets, the members of its cgroup; and the settle wait, which reads the
//! state every [`settle::POLL`] and lets [`settle::Watch`] decide.
//!
//! A listening socket is one of the server's socket inodes (`/proc/PID/fd/N` →
//! `socket:[INODE]`, of the main process and of the other members of its cgroup) that its
//! network namespace's tables list as listening: `/proc/PID/net/unix` with the `__SO_ACCEPTCON`
//! flag (`00010000`), `/proc/PID/net/tcp`/`tcp6` in state `0A` (`LISTEN`).

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Instant;

use childguard::ChildHandle;

use super::settle::{self, Listener, Masks, Sample, Settled, Watch};

/// `SigIgn` and `SigCgt` of `pid`.
pub fn masks(pid: u32) -> Result<Masks, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("reading {path}: {e}"))?;
    let mask = |field: &str| -> Result<u64, String> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .ok_or_else(|| format!("{path} has no {field} line"))?;
        u64::from_str_radix(line.trim(), 16).map_err(|e| format!("{path}: {field} {line:?}: {e}"))
    };
    Ok(Masks {
        ignored: mask("SigIgn:")?,
        caught: mask("SigCgt:")?,
    })
}

/// The processes in `dir` (a cgroup) other than `main`.
pub fn members(dir: &Path, main: u32) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|&p| p != main)
        .collect()
}

/// The socket inodes open in `pid` (none when it is gone).
fn socket_inodes(pid: u32, into: &mut HashSet<u64>) {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return;
    };
    for fd in fds.flatten() {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let target = target.to_string_lossy();
            if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse().ok())
            {
                into.insert(inode);
            }
        }
    }
}

/// A listening Unix socket among `inodes`, from the text of `/proc/PID/net/unix`
/// (`Num RefCount Protocol Flags Type St Inode [Path]`).
fn unix_listener(table: &str, inodes: &HashSet<u64>) -> Option<Listener> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let flags = u32::from_str_radix(fields.get(3)?, 16).ok()?;
        let inode: u64 = fields.get(6)?.parse().ok()?;
        (flags & 0x0001_0000 != 0 && inodes.contains(&inode))
            .then(|| Listener::Unix(fields.get(7).map(|p| p.to_string())))
    })
}

/// A `LISTEN` TCP socket among `inodes`, from the text of `/proc/PID/net/tcp` or `tcp6`
/// (`sl local_address rem_address st … uid timeout inode`).
fn tcp_listener(table: &str, inodes: &HashSet<u64>) -> Option<Listener> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let inode: u64 = fields.get(9)?.parse().ok()?;
        let port = fields.get(1)?.rsplit(':').next()?;
        (*fields.get(3)? == "0A" && inodes.contains(&inode))
            .then(|| Some(Listener::Tcp(u16::from_str_radix(port, 16).ok()?)))
            .flatten()
    })
}

/// A listening socket of `pid` or of the other members of `cgroup`, if there is one now.
pub fn listener(pid: u32, cgroup: Option<&Path>) -> Option<Listener> {
    let mut inodes = HashSet::new();
    socket_inodes(pid, &mut inodes);
    for member in cgroup.map(|dir| members(dir, pid)).unwrap_or_default() {
        socket_inodes(member, &mut inodes);
    }
    if inodes.is_empty() {
        return None;
    }
    let table = |name: &str| std::fs::read_to_string(format!("/proc/{pid}/net/{name}"));
    if let Some(found) = table("unix").ok().and_then(|t| unix_listener(&t, &inodes)) {
        return Some(found);
    }
    ["tcp", "tcp6"]
        .into_iter()
        .find_map(|name| tcp_listener(&table(name).ok()?, &inodes))
}

/// Waits until the server `handle` (main process `pid`) has settled, or `timeout` has passed
/// since `spawned` (see [`settle`]). `Ok(Err(status))` when it exited meanwhile: no signal can
/// be measured on a server that ended by itself while starting.
pub fn wait_settled(
    handle: &mut ChildHandle,
    pid: u32,
    cgroup: Option<&Path>,
    spawned: Instant,
    timeout: std::time::Duration,
) -> Result<Result<Settled, ExitStatus>, String> {
    let mut watch = Watch::new(timeout);
    let mut exited = || {
        handle
            .try_wait()
            .map_err(|e| format!("waiting for the server's exit: {e}"))
    };
    loop {
        if let Some(status) = exited()? {
            return Ok(Err(status));
        }
        let masks = masks(pid)?;
        let listener = match watch.wants_listener() {
            true => listener(pid, cgroup),
            false => None,
        };
        let sample = Sample {
            at: spawned.elapsed(),
            masks,
            listener,
        };
        if let Some(settled) = watch.observe(sample) {
            // The last reading may have been of a process exiting: it must be there to be
            // signalled.
            return Ok(match exited()? {
                Some(status) => Err(status),
                None => Ok(settled),
            });
        }
        std::thread::sleep(settle::POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_are_found_by_flag_or_state_and_inode() {
        let unix = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 4242 /tmp/r.sock\n\
            0000000000000000: 00000002 00000000 00000000 0001 03 4243 /tmp/r.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 999\n";
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            0: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0 100 0 0 10 0\n   \
            1: 0100007F:18EB 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 778 1 0 20 4 30 10 -1\n";
        let set = |v: &[u64]| v.iter().copied().collect::<HashSet<u64>>();
        assert_eq!(
            unix_listener(unix, &set(&[4242])),
            Some(Listener::Unix(Some("/tmp/r.sock".into())))
        );
        // Connected, not listening.
        assert_eq!(unix_listener(unix, &set(&[4243])), None);
        // Listening, bound to no path; another process's listener is not ours.
        assert_eq!(
            unix_listener(unix, &set(&[999])),
            Some(Listener::Unix(None))
        );
        assert_eq!(unix_listener(unix, &set(&[5])), None);
        assert_eq!(tcp_listener(tcp, &set(&[777])), Some(Listener::Tcp(6379)));
        assert_eq!(tcp_listener(tcp, &set(&[778])), None);
        assert_eq!(tcp_listener(tcp, &set(&[1])), None);
    }
}
