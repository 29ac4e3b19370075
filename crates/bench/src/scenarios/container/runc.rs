//! One runc container for the `container` scenario: the bed of `tests/src/runc.rs` (issue 50,
//! test bed (b)) cut to what the scenario times. A rootfs of busybox's applets plus the init
//! bound in read-only with the libraries `ldd` names, `runc spec`'s config with the init as
//! `process.args`, no terminal, `process.rlimits` dropped where the host refuses them.
//! `runc run` in the foreground (our child; it reaps PID 1 and deletes the container once PID 1
//! is gone), PID 1 pinned by a pidfd.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::Result;

/// What to install when runc or busybox is missing.
pub const INSTALL: &str =
    "container: needs root, runc and busybox (apt-get install -y runc busybox-static)";

/// runc, busybox and the bundles' parent directory.
#[derive(Debug)]
pub struct Bed {
    runc: PathBuf,
    busybox: PathBuf,
    dir: PathBuf,
    rlimits: bool,
    n: usize,
}

impl Bed {
    pub fn new() -> Result<Bed> {
        let find = |name: &str| {
            ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
                .iter()
                .map(|d| Path::new(d).join(name))
                .find(|p| p.is_file())
                .ok_or(INSTALL)
        };
        if !rustix::process::geteuid().is_root() {
            return Err(INSTALL.into());
        }
        let dir =
            std::env::temp_dir().join(format!("childguard-bench-runc-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let mut bed = Bed {
            runc: find("runc")?,
            busybox: find("busybox")?,
            dir,
            rlimits: true,
            n: 0,
        };
        // Some sandboxes refuse runc's setrlimit: one `true` with the spec's rlimits tells.
        let mut probe = bed.run(&["true".to_string()], &[])?;
        let status = probe.wait()?;
        if !status.success() {
            let said = std::fs::read_to_string(probe.bundle.join("stderr")).unwrap_or_default();
            if !said.contains("rlimit") {
                return Err(format!("container: runc run of `true` failed: {said}").into());
            }
            bed.rlimits = false;
        }
        Ok(bed)
    }

    /// Starts a container whose PID 1 is `args`, `binds` (host path, path inside) bound in, and
    /// returns once PID 1 exists.
    pub fn run(&mut self, args: &[String], binds: &[(PathBuf, String)]) -> Result<Container> {
        self.n += 1;
        let id = format!("childguard-bench-{}-{}", std::process::id(), self.n);
        let bundle = self.dir.join(&id);
        let config = self.config(&bundle, args, binds)?;
        std::fs::write(bundle.join("config.json"), config.to_string())?;
        let child = Command::new(&self.runc)
            .args(["run", "--bundle"])
            .arg(&bundle)
            .arg("--pid-file")
            .arg(bundle.join("pid"))
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(bundle.join("stderr"))?)
            .spawn()?;
        let mut container = Container {
            id,
            runc: self.runc.clone(),
            bundle,
            child,
            init: None,
            ns: None,
        };
        let began = Instant::now();
        loop {
            let pid = std::fs::read_to_string(container.bundle.join("pid"))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok());
            if let Some(pid) = pid.and_then(rustix::process::Pid::from_raw) {
                // None: PID 1 already exited (the rlimits probe's `true`); the wait tells.
                let flags = rustix::process::PidfdFlags::empty();
                container.init = rustix::process::pidfd_open(pid, flags).ok();
                let ns = format!("/proc/{}/ns/pid", pid.as_raw_nonzero());
                container.ns = std::fs::read_link(ns).ok();
                break;
            }
            if container.child.try_wait()?.is_some() || began.elapsed() > Duration::from_secs(30) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(container)
    }

    fn config(&self, bundle: &Path, args: &[String], binds: &[(PathBuf, String)]) -> Result<Value> {
        let rootfs = bundle.join("rootfs");
        for dir in ["bin", "proc", "dev", "sys", "tmp"] {
            std::fs::create_dir_all(rootfs.join(dir))?;
        }
        let list = Command::new(&self.busybox).arg("--list").output()?;
        for applet in String::from_utf8_lossy(&list.stdout).lines() {
            let _ = std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet));
        }
        let mut all = vec![(self.busybox.clone(), "/bin/busybox".to_string())];
        for (host, inside) in binds {
            // runc resolves a relative source against the bundle.
            all.push((std::fs::canonicalize(host)?, inside.clone()));
        }
        let mut mounts: Vec<Value> = Vec::new();
        for (host, inside) in &all {
            let libs = libraries(host)
                .into_iter()
                .map(|l| (l.clone(), l.display().to_string()));
            for (host, inside) in libs.chain([(host.clone(), inside.clone())]) {
                let point = rootfs.join(inside.trim_start_matches('/'));
                std::fs::create_dir_all(point.parent().ok_or("a bind at /")?)?;
                let _ = std::fs::remove_file(&point);
                std::fs::write(&point, b"")?;
                let mount = json!({"destination": inside, "type": "bind", "source": host,
                                   "options": ["bind", "ro", "nosuid", "nodev"]});
                if !mounts.contains(&mount) {
                    mounts.push(mount);
                }
            }
        }
        let o = Command::new(&self.runc)
            .args(["spec", "--bundle"])
            .arg(bundle)
            .output()?;
        if !o.status.success() {
            return Err(format!("runc spec: {}", String::from_utf8_lossy(&o.stderr)).into());
        }
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(bundle.join("config.json"))?)?;
        config["root"]["path"] = json!(rootfs);
        config["process"]["terminal"] = json!(false);
        config["process"]["args"] = json!(args);
        if !self.rlimits {
            config["process"]
                .as_object_mut()
                .ok_or("no process")?
                .remove("rlimits");
        }
        config["mounts"]
            .as_array_mut()
            .ok_or("no mounts")?
            .extend(mounts);
        Ok(config)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running container; dropping it kills and deletes it.
#[derive(Debug)]
pub struct Container {
    id: String,
    runc: PathBuf,
    bundle: PathBuf,
    child: Child,
    /// A pidfd of PID 1 (`None`: gone before one could be opened).
    init: Option<OwnedFd>,
    /// PID 1's `/proc/PID/ns/pid`.
    ns: Option<PathBuf>,
}

impl Container {
    /// `runc kill ID SIGNAL`, to run.
    pub fn kill_command(&self, signal: &str) -> Command {
        let mut cmd = Command::new(&self.runc);
        cmd.args(["kill", &self.id, signal]).stdin(Stdio::null());
        cmd
    }

    /// `runc kill ID SIGNAL`, run.
    pub fn kill(&self, signal: &str) -> Result<()> {
        succeeded(signal, self.kill_command(signal).output()?)
    }

    /// Whether PID 1 has exited by `deadline` (poll on its pidfd).
    pub fn stopped_by(&self, deadline: Instant) -> Result<bool> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let Some(pin) = &self.init else {
            return Ok(true);
        };
        loop {
            let left = Timespec::try_from(deadline.saturating_duration_since(Instant::now()))?;
            match poll(&mut [PollFd::new(pin, PollFlags::IN)], Some(&left)) {
                Ok(n) => return Ok(n > 0),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The container's processes alive now (not zombies), PID 1 included, with their names.
    pub fn processes(&self) -> Vec<(u32, String)> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&p| {
                self.ns.is_some() && std::fs::read_link(format!("/proc/{p}/ns/pid")).ok() == self.ns
            })
            .filter_map(|p| {
                let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
                let comm = stat.get(stat.find('(')? + 1..stat.rfind(')')?)?.to_string();
                let state = stat.get(stat.rfind(')')? + 2..)?.chars().next()?;
                (state != 'Z').then_some((p, comm))
            })
            .collect()
    }

    /// Waits (bounded: 30 s) until `n` of its processes are named `comm`.
    pub fn await_named(&mut self, comm: &str, n: usize) -> Result<()> {
        let began = Instant::now();
        while self.processes().iter().filter(|(_, c)| c == comm).count() < n {
            if began.elapsed() > Duration::from_secs(30) || self.child.try_wait()?.is_some() {
                let said = std::fs::read_to_string(self.bundle.join("stderr")).unwrap_or_default();
                return Err(format!("container {}: never {n} {comm}: {said}", self.id).into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// runc's exit, once PID 1 is gone (bounded: 10 s, then runc is killed).
    pub fn wait(&mut self) -> Result<std::process::ExitStatus> {
        let began = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if began.elapsed() > Duration::from_secs(10) {
                let _ = self.child.kill();
                return Ok(self.child.wait()?);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.kill("KILL");
            let _ = self.wait();
        }
        let _ = Command::new(&self.runc)
            .args(["delete", "--force", &self.id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.bundle);
    }
}

/// `Ok` if `runc kill SIGNAL` succeeded, else its message.
pub fn succeeded(signal: &str, o: std::process::Output) -> Result<()> {
    if !o.status.success() {
        let said = String::from_utf8_lossy(&o.stderr);
        return Err(format!("runc kill {signal}: {said}").into());
    }
    Ok(())
}

/// The shared libraries `program` loads, its dynamic loader among them (`ldd`); none for a
/// static program.
fn libraries(program: &Path) -> Vec<PathBuf> {
    let Ok(o) = Command::new("ldd").arg(program).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|line| {
            let path = line.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}
