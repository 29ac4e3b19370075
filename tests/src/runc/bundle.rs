//! The OCI bundle of a [`Container`](super::Container): a rootfs of busybox's applets and the
//! programs a test binds in (read-only, with the libraries `ldd` names), and `runc spec`'s
//! config.json edited for the test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::ScratchDir;

/// `CLONE_NEWUSER`, the flag the seccomp rule refuses.
const CLONE_NEWUSER: u64 = 0x1000_0000;

/// A container to run.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// `process.args`: PID 1 and its arguments, as the container sees them.
    pub args: Vec<String>,
    /// Host programs bound read-only into the container: (host path, path inside).
    pub programs: Vec<(PathBuf, String)>,
    /// Docker's rule against user namespaces: `unshare` and `clone` with `CLONE_NEWUSER`
    /// fail with `EPERM`, `clone3` with `ENOSYS` (its flags are in memory, out of seccomp's
    /// reach, so callers fall back to `clone`).
    pub no_user_namespaces: bool,
}

impl Spec {
    /// PID 1 is `args`.
    pub fn new<S: AsRef<str>>(args: &[S]) -> Self {
        Self {
            args: args.iter().map(|a| a.as_ref().to_string()).collect(),
            ..Self::default()
        }
    }

    /// Binds the host's `program` at `inside` (with its libraries).
    pub fn program(mut self, program: &Path, inside: &str) -> Self {
        self.programs
            .push((program.to_path_buf(), inside.to_string()));
        self
    }

    /// With the seccomp rule of [`Spec::no_user_namespaces`].
    pub fn without_user_namespaces(mut self) -> Self {
        self.no_user_namespaces = true;
        self
    }
}

/// `runc spec`'s config for `spec` (its `process.rlimits` kept), its rootfs made in `bundle`.
pub(super) fn config(runc: &Path, busybox: &Path, bundle: &Path, spec: &Spec) -> Value {
    let rootfs = bundle.join("rootfs");
    for dir in ["bin", "proc", "dev", "sys", "tmp"] {
        std::fs::create_dir_all(rootfs.join(dir)).unwrap();
    }
    let mut binds = vec![(busybox.to_path_buf(), "/bin/busybox".to_string())];
    for (host, inside) in &spec.programs {
        // runc resolves a relative source against the bundle.
        let host =
            std::fs::canonicalize(host).unwrap_or_else(|e| panic!("{}: {e}", host.display()));
        binds.push((host, inside.clone()));
    }
    for applet in applets(busybox) {
        let _ = std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet));
    }
    let mut mounts = Vec::new();
    for (host, inside) in &binds {
        let libs = libraries(host)
            .into_iter()
            .map(|l| (l.clone(), l.display().to_string()));
        for (host, inside) in libs.chain([(host.clone(), inside.clone())]) {
            let mount = bind(&rootfs, &host, &inside);
            if !mounts.contains(&mount) {
                mounts.push(mount);
            }
        }
    }
    let o = Command::new(runc)
        .args(["spec", "--bundle"])
        .arg(bundle)
        .output()
        .expect("running runc spec");
    assert!(
        o.status.success(),
        "runc spec: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = std::fs::read_to_string(bundle.join("config.json")).unwrap();
    let mut config: Value = serde_json::from_str(&text).expect("runc spec's config.json");
    config["root"]["path"] = json!(rootfs);
    config["process"]["terminal"] = json!(false);
    config["process"]["args"] = json!(spec.args);
    config["mounts"].as_array_mut().unwrap().extend(mounts);
    if spec.no_user_namespaces {
        let newuser = json!([{"index": 0, "value": CLONE_NEWUSER, "valueTwo": CLONE_NEWUSER,
                              "op": "SCMP_CMP_MASKED_EQ"}]);
        config["linux"]["seccomp"] = json!({
            "defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [
                {"names": ["unshare", "clone"], "action": "SCMP_ACT_ERRNO",
                 "errnoRet": libc::EPERM, "args": newuser},
                {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": libc::ENOSYS},
            ],
        });
    }
    config
}

/// A read-only bind of the host's `host` at `inside`, its mount point made in `rootfs`.
fn bind(rootfs: &Path, host: &Path, inside: &str) -> Value {
    let point = rootfs.join(inside.trim_start_matches('/'));
    std::fs::create_dir_all(point.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&point);
    std::fs::write(&point, b"").unwrap();
    json!({"destination": inside, "type": "bind", "source": host,
           "options": ["bind", "ro", "nosuid", "nodev"]})
}

/// busybox's applets (`busybox --list`).
fn applets(busybox: &Path) -> Vec<String> {
    static LIST: OnceLock<Vec<String>> = OnceLock::new();
    LIST.get_or_init(|| {
        let o = Command::new(busybox)
            .arg("--list")
            .output()
            .expect("busybox --list");
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    })
    .clone()
}

/// The shared libraries `program` loads, the dynamic loader among them (`ldd`); none for a
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

/// Whether this host lets runc apply `runc spec`'s `process.rlimits` (some sandboxes refuse
/// `setrlimit`): one container `true` with them, once per process.
pub(super) fn rlimits_allowed(runc: &Path, busybox: &Path) -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| {
        let bundle = ScratchDir::new("runc-rlimits");
        let config = config(runc, busybox, &bundle.0, &Spec::new(&["true"]));
        std::fs::write(bundle.0.join("config.json"), config.to_string()).unwrap();
        let id = format!("childguard-test-{}-rlimits", std::process::id());
        let o = Command::new(runc)
            .args(["run", "--bundle"])
            .arg(&bundle.0)
            .arg(&id)
            .stdin(Stdio::null())
            .output()
            .expect("running runc run");
        let _ = Command::new(runc).args(["delete", "--force", &id]).output();
        let said = String::from_utf8_lossy(&o.stderr).into_owned();
        if o.status.success() {
            return true;
        }
        assert!(said.contains("rlimit"), "runc run of `true` failed: {said}");
        eprintln!(
            "runc: this host refuses process.rlimits ({}); dropped",
            said.trim()
        );
        false
    })
}
