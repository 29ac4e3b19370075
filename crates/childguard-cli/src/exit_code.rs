//! Exit codes, as coreutils `timeout(1)` uses them.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use childguard::ErrorKind;

/// The timeout fired (and `--preserve-status` was not given).
pub const TIMED_OUT: i32 = 124;
/// childguard itself failed: a usage error, or an error while supervising.
pub const FAILED: i32 = 125;
/// CMD was found but could not be run (not executable, bad format …).
pub const CANNOT_INVOKE: i32 = 126;
/// CMD was not found.
pub const NOT_FOUND: i32 = 127;

/// CMD's own status: its exit code, or 128+N when it died of signal N.
pub fn from_status(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signo)) => 128 + signo,
        (None, None) => FAILED,
    }
}

/// The code for a failed spawn: 127 when CMD does not exist, 126 when it cannot be executed,
/// 125 when the failure is ours (no memory, no fds, no process slot).
pub fn for_spawn_error(err: &childguard::Error) -> i32 {
    if err.kind() != ErrorKind::Spawn {
        return FAILED;
    }
    if err.io_kind() == io::ErrorKind::NotFound {
        return NOT_FOUND;
    }
    // fork/resource failures are ours, like coreutils' "fork system call failed".
    match err.raw_os_error() {
        Some(libc::EAGAIN | libc::ENOMEM | libc::ENFILE | libc::EMFILE) => FAILED,
        _ => CANNOT_INVOKE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_and_signals() {
        assert_eq!(from_status(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(from_status(ExitStatus::from_raw(0)), 0);
        // Died of SIGKILL (9): 137, as a shell reports it.
        assert_eq!(from_status(ExitStatus::from_raw(9)), 137);
    }
}
