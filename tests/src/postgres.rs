//! A throwaway postgres cluster for tests: `initdb` into a scratch directory owned by the
//! unprivileged `postgres` user (postgres refuses to run as root), trust authentication, Unix
//! socket only (no TCP port). Used by tests/databases.rs and tests/contain.rs.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::scratch;

/// What to install when postgres is missing.
pub const INSTALL_POSTGRES: &str = "apt-get install -y postgresql (or run tests/run.sh)";

/// `CHILDGUARD_SKIP_PEERS=1`: tests whose real server is missing say so and pass.
pub fn skip_peers() -> bool {
    std::env::var_os("CHILDGUARD_SKIP_PEERS").is_some_and(|v| v == "1")
}

/// `Some(path)` of the first existing candidate, `None` only when skipping was asked for; else
/// a panic that says what to install (`install`).
pub fn find_peer(
    test: &str,
    name: &str,
    candidates: Vec<PathBuf>,
    install: &str,
) -> Option<PathBuf> {
    if let Some(found) = candidates.into_iter().find(|p| p.is_file()) {
        return Some(found);
    }
    if skip_peers() {
        eprintln!("SKIPPED {test}: {name} not installed (CHILDGUARD_SKIP_PEERS=1)");
        return None;
    }
    panic!("{test} needs {name}: install with `{install}` (or set CHILDGUARD_SKIP_PEERS=1)");
}

/// The newest `/usr/lib/postgresql/<major>/bin/<tool>` (Debian keeps them off PATH).
pub fn pg_tool(test: &str, tool: &str, install: &str) -> Option<PathBuf> {
    let mut majors: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    majors.sort();
    let candidates = majors
        .iter()
        .rev()
        .map(|m| m.join("bin").join(tool))
        .collect();
    find_peer(test, &format!("postgres' {tool}"), candidates, install)
}

/// The `postgres` user's uid and gid (Debian's package makes it).
pub fn postgres_user() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .expect("no postgres user: install postgresql");
    let fields: Vec<&str> = line.split(':').collect();
    (fields[2].parse().unwrap(), fields[3].parse().unwrap())
}

/// A temporary directory owned by the postgres user, with a fresh cluster in `data` (trust
/// authentication, Unix socket only) and the socket directory `run`. Removed on drop.
#[derive(Debug)]
pub struct Cluster {
    pub root: PathBuf,
    pub uid: u32,
    pub gid: u32,
}

impl Cluster {
    /// `None` only when postgres is missing and skipping was asked for.
    pub fn new(test: &str) -> Option<Cluster> {
        let initdb = pg_tool(test, "initdb", INSTALL_POSTGRES)?;
        let (uid, gid) = postgres_user();
        let root = scratch("pg");
        std::fs::create_dir_all(root.join("run")).unwrap();
        for dir in [root.clone(), root.join("run")] {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
        }
        let out = Command::new(initdb)
            .args([
                "-D",
                "data",
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ])
            .current_dir(&root)
            .uid(uid)
            .gid(gid)
            .env("LC_ALL", "C")
            .output()
            .expect("running initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Cluster { root, uid, gid })
    }

    /// `postgres -D data`, listening on no TCP port, its socket in `run`, as the postgres user.
    pub fn command(&self, postgres: &Path, data: &str) -> Command {
        let mut cmd = Command::new(postgres);
        cmd.args(["-D", data, "-c", "listen_addresses=", "-c"])
            .arg(format!(
                "unix_socket_directories={}",
                self.root.join("run").display()
            ))
            .args(["-c", "fsync=off"])
            .current_dir(&self.root)
            .uid(self.uid)
            .gid(self.gid)
            .env("LC_ALL", "C");
        cmd
    }

    /// `psql` connected to the cluster's socket (as `postgres`, trust), with `args` after.
    pub fn psql_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("psql");
        cmd.args(["-h"])
            .arg(self.root.join("run"))
            .args(["-U", "postgres", "-d", "postgres"])
            .args(args)
            .env("PGCONNECT_TIMEOUT", "5");
        cmd
    }

    /// Runs one statement (`-tAc sql`) and returns its output.
    pub fn psql(&self, sql: &str) -> std::process::Output {
        self.psql_command(&["-tAc", sql])
            .stdin(Stdio::null())
            .output()
            .expect("running psql (postgresql-client)")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
