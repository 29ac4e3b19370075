//! The HTTP fixture server (`tests/src/http_server.py`, run by python3) for the HTTP readiness
//! tests, and the `http+unix://` URLs that reach it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::command::on_path;
use crate::fresh_dir;

/// The server's source, run with `python3 -u -c`.
pub const SERVER: &str = include_str!("http_server.py");

/// Whether python3 is there to run [`SERVER`]; if not, fails `test` saying what to install,
/// unless `CHILDGUARD_SKIP_PEERS=1` (then false: the test says it was skipped).
pub fn python3(test: &str) -> bool {
    on_path(
        test,
        "python3",
        "apt-get install python3 (or run tests/run.sh)",
    )
}

/// The argv of the server listening at `where_` (`unix:PATH`, `tcp:PORT`) in `mode` (a
/// status such as `200` or `503`; `garbage`; `silent`; `silent-exit:N`), once it has slept
/// `after` seconds: `python3 -u -c SERVER WHERE MODE AFTER`.
pub fn server_args<'a>(where_: &'a str, mode: &'a str, after: &'a str) -> [&'a str; 7] {
    ["python3", "-u", "-c", SERVER, where_, mode, after]
}

/// [`server_args`] as a Command, stdin from /dev/null.
pub fn server(where_: &str, mode: &str, after: &str) -> Command {
    let [program, args @ ..] = server_args(where_, mode, after);
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null());
    cmd
}

/// `http+unix://` for the socket `path` (percent-encoded), then `rest` (`/`, `/health`).
pub fn unix_url(path: &Path, rest: &str) -> String {
    let encoded = path
        .to_str()
        .unwrap()
        .replace('%', "%25")
        .replace('/', "%2F");
    format!("http+unix://{encoded}{rest}")
}

/// A fresh scratch directory with a socket path `s.sock` in it for a server to listen on;
/// the directory is removed on drop.
#[derive(Debug)]
pub struct UnixSite {
    pub dir: PathBuf,
    pub sock: PathBuf,
}

impl UnixSite {
    pub fn new(name: &str) -> UnixSite {
        let dir = fresh_dir(name);
        let sock = dir.join("s.sock");
        UnixSite { dir, sock }
    }

    /// The socket path as text.
    pub fn sock_text(&self) -> &str {
        self.sock.to_str().unwrap()
    }

    /// `unix:SOCK`, the server's `where`.
    pub fn listen(&self) -> String {
        format!("unix:{}", self.sock_text())
    }

    /// The server on this site's socket (see [`server`]).
    pub fn server(&self, mode: &str, after: &str) -> Command {
        server(&self.listen(), mode, after)
    }

    /// [`unix_url`] of this site's socket.
    pub fn url(&self, rest: &str) -> String {
        unix_url(&self.sock, rest)
    }

    /// Removes the socket a server left, so the next one can bind it.
    pub fn forget_socket(&self) {
        let _ = std::fs::remove_file(&self.sock);
    }
}

impl Drop for UnixSite {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
