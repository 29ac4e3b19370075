//! `servers`: spawn → ready of a real postgres, `Ready::Notify` against the usual harness loop
//! (`pg_isready` run every 10 ms until it says the server accepts connections).
//!
//! One cluster (`initdb` once, trust, Unix socket only, `fsync=off`) started as the `postgres`
//! user again and again; each start is closed with `Ladder::postgres()` (fast shutdown), so
//! the next start does no crash recovery. The figure is from the moment `spawn` is called to
//! the moment the waiter knows the server is ready: `ChildHandle::builder(…).spawn()`
//! returning for ours, the first `pg_isready` exiting 0 for the baseline. Repetitions
//! alternate the two (who goes first rotates); the first of each is a warm-up. Needs root
//! (postgres refuses to run as root; we switch to its user) and Debian's `postgresql`.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ladder, Ready};

use super::Settings;
use crate::row::Row;
use crate::stats::median;
use crate::Result;

const INSTALL: &str = "servers: needs postgresql (apt-get install -y postgresql) and root";

/// The newest `/usr/lib/postgresql/<major>/bin/<tool>` (Debian keeps them off PATH).
fn pg_tool(tool: &str) -> Result<PathBuf> {
    let mut majors: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("{INSTALL}: /usr/lib/postgresql: {e}"))?
        .filter_map(|e| Some(e.ok()?.path()))
        .collect();
    majors.sort();
    majors
        .iter()
        .rev()
        .map(|m| m.join("bin").join(tool))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{INSTALL}: no {tool} under /usr/lib/postgresql/*/bin").into())
}

/// The `postgres` user's uid and gid.
fn postgres_user() -> Result<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    let line = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .ok_or(format!("{INSTALL}: no postgres user"))?;
    let fields: Vec<&str> = line.split(':').collect();
    match (fields.get(2), fields.get(3)) {
        (Some(uid), Some(gid)) => Ok((uid.parse()?, gid.parse()?)),
        _ => Err(format!("servers: bad /etc/passwd line {line:?}").into()),
    }
}

struct Cluster {
    root: PathBuf,
    uid: u32,
    gid: u32,
    postgres: PathBuf,
    pg_isready: PathBuf,
}

impl Cluster {
    fn new() -> Result<Cluster> {
        if !rustix::process::geteuid().is_root() {
            return Err(INSTALL.into());
        }
        let (uid, gid) = postgres_user()?;
        let root = std::env::temp_dir().join(format!("childguard-bench-pg-{}", std::process::id()));
        std::fs::create_dir_all(root.join("run"))?;
        for dir in [root.clone(), root.join("run")] {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        let cluster = Cluster {
            root,
            uid,
            gid,
            postgres: pg_tool("postgres")?,
            pg_isready: pg_tool("pg_isready")?,
        };
        let out = Command::new(pg_tool("initdb")?)
            .args(["-D", "data", "-A", "trust", "-U", "postgres", "--no-sync"])
            .args(["-E", "UTF8"])
            .current_dir(&cluster.root)
            .uid(uid)
            .gid(gid)
            .env("LC_ALL", "C")
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "servers: initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )
            .into());
        }
        Ok(cluster)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.postgres);
        cmd.args(["-D", "data", "-c", "listen_addresses=", "-c"])
            .arg(format!(
                "unix_socket_directories={}",
                self.root.join("run").display()
            ))
            .args(["-c", "fsync=off"])
            .current_dir(&self.root)
            .uid(self.uid)
            .gid(self.gid)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }

    fn is_ready(&self) -> Result<bool> {
        Ok(Command::new(&self.pg_isready)
            .arg("-q")
            .arg("-h")
            .arg(self.root.join("run"))
            .args(["-U", "postgres"])
            .stdin(Stdio::null())
            .status()?
            .success())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(20);
    let cluster = Cluster::new()?;
    let mut notify = Vec::with_capacity(reps);
    let mut polled = Vec::with_capacity(reps);
    for rep in 0..reps + 1 {
        // Rotate who goes first; rep 0 is a warm-up.
        for k in 0..2 {
            let (ms, into) = if (k + rep) % 2 == 0 {
                (with_notify(&cluster)?, &mut notify)
            } else {
                (
                    with_pg_isready(&cluster, Duration::from_millis(10))?,
                    &mut polled,
                )
            };
            if rep > 0 {
                into.push(ms);
            }
        }
    }
    Ok(vec![Row {
        scenario: "servers",
        metric: "postgres_spawn_ready_ms",
        ours: median(&notify),
        baseline: median(&polled),
        baseline_name: "pg_isready run every 10 ms".into(),
        unit: "ms",
    }])
}

/// Ours: `spawn()` with `Ready::Notify`; closed with the postgres preset.
fn with_notify(cluster: &Cluster) -> Result<f64> {
    let began = Instant::now();
    let handle = ChildHandle::builder(cluster.command())
        .ready(Ready::Notify)
        .notify_owner(cluster.uid, cluster.gid)
        .ready_timeout(Duration::from_secs(60))
        .ladder(Ladder::postgres())
        .spawn()?;
    let took = began.elapsed();
    let report = handle.close()?;
    if report.status.and_then(|s| s.code()) != Some(0) {
        return Err(format!("servers: postgres did not shut down cleanly: {report}").into());
    }
    Ok(took.as_secs_f64() * 1000.0)
}

/// The harness loop: spawn, then `pg_isready` every `every` until it exits 0; then the same
/// fast shutdown (`SIGINT`) and wait.
fn with_pg_isready(cluster: &Cluster, every: Duration) -> Result<f64> {
    let began = Instant::now();
    let mut child = cluster.command().spawn()?;
    let give_up = began + Duration::from_secs(60);
    let took = loop {
        if cluster.is_ready()? {
            break Ok(began.elapsed());
        }
        if Instant::now() >= give_up {
            break Err("servers: postgres never became ready for pg_isready");
        }
        std::thread::sleep(every);
    };
    stop(&mut child)?;
    Ok(took?.as_secs_f64() * 1000.0)
}

/// `SIGINT` (fast shutdown) and wait: the baseline's close, by hand.
fn stop(child: &mut std::process::Child) -> Result<()> {
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, rustix::process::Signal::INT)?;
    let status = child.wait()?;
    if status.code() != Some(0) {
        return Err(format!("servers: postgres exited with {status} after SIGINT").into());
    }
    Ok(())
}
