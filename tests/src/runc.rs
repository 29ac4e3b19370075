//! A test bed of real containers (issue 50, test bed (b)): Debian's `runc` runs a container
//! whose rootfs holds busybox (every applet a symlink to it) and the programs a test binds in —
//! our CLI, the peers' inits — read-only, each with the shared libraries `ldd` names (none for
//! a static build). The config is `runc spec`'s, with the test's `process.args`, no terminal,
//! `process.rlimits` dropped where this host refuses them, and on request a seccomp rule that
//! refuses user namespaces as Docker's default profile does.
//!
//! A [`Container`] is `runc run ID` in the foreground (runc is our child, the container's PID 1
//! its child); what a test reads of it from outside: PID 1's host pid (pinned by a pidfd, so
//! "stopped" is exact), the processes of its PID namespace, its output. Dropping it kills and
//! deletes the container, pass or fail.

mod bundle;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

pub use bundle::Spec;

use crate::postgres::{find_peer, skip_peers};
use crate::{eventually, exited_within, ScratchDir};

/// What to install when the bed's tools are missing.
pub const INSTALL: &str = "apt-get install -y runc busybox-static (or run tests/run.sh)";

/// `runc` and `busybox`, or `None` when they are missing and `CHILDGUARD_SKIP_PEERS=1` (the
/// test then says it was skipped); missing otherwise, or not root, fails the test.
pub fn tools(test: &str) -> Option<(PathBuf, PathBuf)> {
    let at = |name: &str| -> Vec<PathBuf> {
        ["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .collect()
    };
    let runc = find_peer(test, "runc", at("runc"), INSTALL)?;
    let busybox = find_peer(test, "busybox", at("busybox"), INSTALL)?;
    if !rustix::process::geteuid().is_root() {
        if skip_peers() {
            eprintln!("SKIPPED {test}: runc needs root (CHILDGUARD_SKIP_PEERS=1)");
            return None;
        }
        panic!("{test}: runc's containers need root: run the tests as root (or set CHILDGUARD_SKIP_PEERS=1)");
    }
    Some((runc, busybox))
}

/// A peer's binary (`tini-static`, `dumb-init`, `catatonit`), or `None` when it is missing
/// and `CHILDGUARD_SKIP_PEERS=1`.
pub fn peer(test: &str, name: &str, package: &str) -> Option<PathBuf> {
    let candidates = ["/usr/bin", "/usr/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .collect();
    find_peer(
        test,
        name,
        candidates,
        &format!("apt-get install -y {package}"),
    )
}

/// A running container. Dropping it kills and deletes it.
#[derive(Debug)]
pub struct Container {
    pub id: String,
    runc: PathBuf,
    bundle: ScratchDir,
    child: Option<Child>,
    /// PID 1's pid on the host.
    pub init: u32,
    /// A pidfd of PID 1 (`None`: it had exited before we could open one).
    pin: Option<std::os::fd::OwnedFd>,
    /// `/proc/PID/ns/pid` of PID 1 (`pid:[…]`): whose processes are the container's.
    ns: Option<PathBuf>,
}

impl Container {
    /// Starts `spec` (`runc run`), and returns once PID 1 runs.
    pub fn run(runc: &Path, busybox: &Path, spec: &Spec) -> Container {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let id = format!("childguard-test-{}-{n}", std::process::id());
        let bundle = ScratchDir::new(&format!("runc-{n}"));
        let mut config = bundle::config(runc, busybox, &bundle.0, spec);
        if !bundle::rlimits_allowed(runc, busybox) {
            config["process"].as_object_mut().unwrap().remove("rlimits");
        }
        std::fs::write(bundle.0.join("config.json"), config.to_string()).unwrap();
        let (out, err) = (bundle.0.join("stdout"), bundle.0.join("stderr"));
        let mut cmd = Command::new(runc);
        cmd.args(["run", "--bundle"])
            .arg(&bundle.0)
            .arg("--pid-file")
            .arg(bundle.0.join("pid"))
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        crate::sys::clean_start(&mut cmd);
        let mut child = cmd.spawn().expect("spawning runc run");
        // runc writes the pid file (by a rename) once PID 1 exists.
        let pid_file = bundle.0.join("pid");
        let mut init = None;
        let mut exited = None;
        eventually(Duration::from_secs(30), || {
            init = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok());
            exited = child.try_wait().ok().flatten();
            init.is_some() || exited.is_some()
        });
        let Some(init) = init else {
            let _ = child.kill();
            let _ = child.wait();
            let said = std::fs::read_to_string(bundle.0.join("stderr")).unwrap_or_default();
            panic!("runc run {id} never started PID 1 ({exited:?}): {said}");
        };
        // A PID 1 that exits at once may be gone (reaped by runc) before these.
        let pin = rustix::process::Pid::from_raw(init as i32).and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
        let ns = std::fs::read_link(format!("/proc/{init}/ns/pid")).ok();
        let own = std::fs::read_link("/proc/self/ns/pid").unwrap();
        assert!(
            ns.as_ref() != Some(&own),
            "{init} is not in a PID namespace of its own"
        );
        Container {
            id,
            runc: runc.to_path_buf(),
            bundle,
            child: Some(child),
            init,
            pin,
            ns,
        }
    }

    /// `runc kill ID SIGNAL`, which must succeed.
    pub fn kill(&self, signal: &str) {
        let o = Command::new(&self.runc)
            .args(["kill", &self.id, signal])
            .stdin(Stdio::null())
            .output()
            .expect("running runc kill");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "runc kill {} {signal}: {e}", self.id);
    }

    /// Whether PID 1 has exited (the container is stopped), waiting up to `wait` for that.
    pub fn stopped_within(&self, wait: Duration) -> bool {
        self.pin.as_ref().is_none_or(|pin| exited_within(pin, wait))
    }

    /// The container's processes alive now (not zombies), PID 1 included.
    pub fn processes(&self) -> Vec<u32> {
        std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&p| {
                let ns = std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
                ns.is_some() && ns == self.ns
            })
            .filter(|&p| crate::is_alive(p))
            .collect()
    }

    /// Waits (bounded) until `n` of the container's processes are named `comm`.
    pub fn await_named(&self, comm: &str, n: usize) {
        let count = || {
            self.processes()
                .into_iter()
                .filter(|&p| crate::init::comm(p).as_deref() == Some(comm))
                .count()
        };
        assert!(
            eventually(Duration::from_secs(30), || count() >= n),
            "container {} never had {n} {comm}: {:?}; stderr: {}",
            self.id,
            self.processes(),
            self.stderr()
        );
    }

    /// `runc run`'s exit (the container's status), waiting up to `wait` for it.
    pub fn exit_within(&mut self, wait: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let mut status = None;
        eventually(wait, || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        status
    }

    /// What PID 1 (and runc) wrote on stdout so far: all of it once runc has exited (it
    /// copies PID 1's output from a pipe, so some may arrive after PID 1 exited).
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.bundle.0.join("stdout")).unwrap_or_default()
    }

    /// What PID 1 (and runc) wrote on stderr so far (all of it once runc has exited).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.bundle.0.join("stderr")).unwrap_or_default()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let quiet = |args: &[&str]| {
            let _ = Command::new(&self.runc)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        };
        if let Some(mut child) = self.child.take() {
            if !self.stopped_within(Duration::ZERO) {
                quiet(&["kill", &self.id, "KILL"]);
            }
            // runc run deletes the container once PID 1 is gone, then exits.
            if !eventually(Duration::from_secs(10), || {
                child.try_wait().ok().flatten().is_some()
            }) {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        quiet(&["delete", "--force", &self.id]);
    }
}
