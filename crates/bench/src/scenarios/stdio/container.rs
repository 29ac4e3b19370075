//! The stubborn server in a container (issue 51): `podman run -i --rm IMAGE sh -c RESPONDER`,
//! rootful podman, [`IMAGE`] the busybox image `tests/run.sh` imports (nothing is pulled).
//!
//! [`RESPONDER`] is a busybox shell: it answers `initialize` (every side waits for that
//! answer, as with the stubborn fixture) and `ping`, ignores `TERM`, `HUP` and `INT`, and once
//! its stdin ends it sleeps on. It is PID 1 of its container, held by podman's `conmon`, not
//! by the `podman run` client the sides start: killing the client only detaches it.
//!
//! Each start carries a label of its own (`--label childguard-bench-stdio=PID-N`); after a
//! close the containers with that label are counted (`podman ps -a`: running, exited or being
//! removed) and removed (`podman rm -f --time 0`), so nothing piles up between repetitions.
//! Containers of an earlier run killed half-way (the label's key, any value) are removed when
//! the scenario starts.
//!
//! The runtime: podman reads its containers.conf from `CONTAINERS_CONF` when set (where the
//! sandbox refuses runc's `setrlimit`, one whose runtime drops the bundle's `process.rlimits`).
//! Unset, and `podman run` failing with podman's own, the tests' wrapper
//! `TARGET/debug/cg-runc-norlimits` (built by `bash tests/run.sh`) is named in a containers.conf
//! of ours, as the tests' podman bed does. The conf reaches every launch as
//! `env CONTAINERS_CONF=… podman run …`: the SDKs start their server with a few variables of
//! the environment only.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use super::Measure;
use crate::Result;

/// The image: busybox, every applet a symlink to it, `PATH=/bin`.
pub const IMAGE: &str = "localhost/childguard-busybox:1";

/// The label's key; its value names one start.
const LABEL: &str = "childguard-bench-stdio";

/// What to install or run when the bed is missing.
const INSTALL: &str = "run `bash tests/run.sh` once as root (it installs podman and \
                       busybox and imports localhost/childguard-busybox:1 from busybox)";

/// The stubborn MCP server, for busybox `sh -c`: answers `initialize` (echoing the client's
/// protocol version) and `ping`, errors on other requests, ignores `TERM`/`HUP`/`INT`, and
/// sleeps on after stdin's end.
pub const RESPONDER: &str = r#"trap '' TERM HUP INT
field() { printf '%s' "$2" | sed -nE "s/.*\"$1\" *: *(\"[^\"]*\"|[0-9]+).*/\1/p"; }
while IFS= read -r line; do
    case $line in *'"method"'*) ;; *) continue ;; esac
    id=$(field id "$line")
    [ -n "$id" ] || continue
    case $line in
    *'"initialize"'*)
        v=$(field protocolVersion "$line")
        printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%s,"capabilities":{},"serverInfo":{"name":"stubborn-sh","version":"1"}}}\n' "$id" "$v" ;;
    *'"ping"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
    *) printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no such method"}}\n' "$id" ;;
    esac
done
while :; do sleep 1; done"#;

/// Rootful podman, checked: it runs [`IMAGE`].
#[derive(Debug, Clone)]
pub struct Podman {
    /// The containers.conf every podman call and launch gets (`None`: podman's own).
    conf: Option<PathBuf>,
}

impl Podman {
    /// Finds podman and the image, and checks that a container runs (`target`: the cargo
    /// target directory, where the tests' runtime wrapper is built); else says what to do.
    pub fn find(target: &Path) -> Result<Podman> {
        let version = Command::new("podman")
            .arg("--version")
            .stderr(Stdio::null())
            .output();
        if !version.is_ok_and(|out| out.status.success()) {
            return Err(format!("stdio: `podman --version` failed: {INSTALL}").into());
        }
        let conf = std::env::var_os("CONTAINERS_CONF").map(PathBuf::from);
        let given = conf.is_some();
        let mut podman = Podman { conf };
        if !podman
            .command()
            .args(["image", "exists", IMAGE])
            .status()?
            .success()
        {
            return Err(format!("stdio: podman has no image {IMAGE}: {INSTALL}").into());
        }
        let mut refused = podman.smoke();
        let wrapper = target.join("debug/cg-runc-norlimits");
        if refused.is_some() && !given && wrapper.is_file() {
            podman.conf = Some(write_conf(&wrapper)?);
            refused = podman.smoke();
        }
        if let Some(said) = refused {
            let with = match &podman.conf {
                Some(conf) => format!("with CONTAINERS_CONF={}", conf.display()),
                None => "with podman's own containers.conf".into(),
            };
            return Err(format!(
                "stdio: `podman run --rm {IMAGE} true` fails {with}: {said}. Where runc's \
                 setrlimit is refused, set CONTAINERS_CONF to a containers.conf whose runtime \
                 drops the bundle's process.rlimits, or build the tests' {} \
                 (`cargo build -p childguard-tests --bin cg-runc-norlimits`, as `bash \
                 tests/run.sh` does); {INSTALL}",
                wrapper.display()
            )
            .into());
        }
        podman.remove(&podman.ids(LABEL)?)?;
        Ok(podman)
    }

    /// `podman` with the conf, stdin and stdout null.
    fn command(&self) -> Command {
        let mut cmd = Command::new("podman");
        if let Some(conf) = &self.conf {
            cmd.env("CONTAINERS_CONF", conf);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        cmd
    }

    /// `None` if `podman run --rm IMAGE true` succeeds, else what podman said.
    fn smoke(&self) -> Option<String> {
        let out = self
            .command()
            .args(["run", "--rm", IMAGE, "true"])
            .stderr(Stdio::piped())
            .output();
        match out {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            Err(e) => Some(e.to_string()),
        }
    }

    /// A fresh label value and the launch's argv: `[env CONTAINERS_CONF=…] podman run -i --rm
    /// --label KEY=VALUE IMAGE sh -c RESPONDER`.
    pub fn launch(&self) -> (String, Vec<OsString>) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let label = format!("{LABEL}={}-{n}", std::process::id());
        let mut argv: Vec<OsString> = Vec::new();
        if let Some(conf) = &self.conf {
            let mut set = OsString::from("CONTAINERS_CONF=");
            set.push(conf);
            argv.extend(["env".into(), set]);
        }
        argv.extend(["podman", "run", "-i", "--rm", "--label"].map(OsString::from));
        argv.extend([&label, IMAGE, "sh", "-c", RESPONDER].map(OsString::from));
        (label, argv)
    }

    /// After one close: counts the containers of `label` (what the close left), removes them,
    /// and returns `measured` with that count as `left`.
    pub fn settle(&self, label: &str, measured: Result<Measure>) -> Result<Measure> {
        let ids = self.ids(label);
        let removed = match &ids {
            Ok(ids) => self.remove(ids),
            Err(_) => Ok(()),
        };
        let mut measure = measured?;
        measure.left = ids?.len();
        removed?;
        Ok(measure)
    }

    /// The ids of the containers with `label` (`KEY=VALUE`, or `KEY`: any value), any state.
    fn ids(&self, label: &str) -> Result<Vec<String>> {
        let out = self
            .command()
            .args(["ps", "-a", "-q", "--filter"])
            .arg(format!("label={label}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            return Err(format!("stdio: podman ps -a --filter label={label}: {said}").into());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text.split_whitespace().map(str::to_string).collect())
    }

    /// `podman rm -f --time 0` of `ids` (none: nothing run).
    fn remove(&self, ids: &[String]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let out = self
            .command()
            .args(["rm", "-f", "--time", "0"])
            .args(ids)
            .stderr(Stdio::piped())
            .output()?;
        if !out.status.success() {
            let said = String::from_utf8_lossy(&out.stderr);
            return Err(format!("stdio: podman rm -f {ids:?}: {said}").into());
        }
        Ok(())
    }
}

/// A containers.conf naming `wrapper` as the runtime (`cg-runc`, the tests' name), in the
/// temporary directory (written whole, then renamed: a run beside sees the old or the new).
fn write_conf(wrapper: &Path) -> Result<PathBuf> {
    let path = std::env::temp_dir().join("childguard-bench-containers.conf");
    let wrapper = wrapper.canonicalize()?;
    let text = format!(
        "[engine]\nruntime = \"cg-runc\"\n\n[engine.runtimes]\ncg-runc = [{:?}]\n",
        wrapper.display().to_string()
    );
    let partial = path.with_extension(format!("conf.{}", std::process::id()));
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
}
