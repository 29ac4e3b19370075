//! `--activate[=NAME]`: systemd socket activation for CMD, through the library's
//! [`SocketMode::Activation`]: a listening Unix socket reaches CMD as fd 3 (`LISTEN_FDS=1`,
//! `LISTEN_FDNAMES=NAME`, `LISTEN_PID`), childguard holds one connection to it (the one it
//! shuts down first when stopping CMD), and the socket's path goes to stdout for the clients.

use std::io::{self, Write};

use childguard::{ChildHandle, SocketMode};

/// The socket mode for `--activate` (`name`: `--activate=NAME`).
pub fn socket_mode(name: Option<String>) -> SocketMode {
    SocketMode::Activation { name }
}

/// Prints the listening socket's path on stdout (one line), if the handle has one.
///
/// This happens as soon as `spawn()` returns — after CMD accepted childguard's connection,
/// so the path is ready for clients — and before childguard writes anything else.
pub fn announce(handle: &ChildHandle) -> io::Result<()> {
    let Some(path) = handle.socket_path() else {
        return Ok(());
    };
    let mut out = io::stdout().lock();
    writeln!(out, "{}", path.display())?;
    out.flush()
}
