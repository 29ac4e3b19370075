//! The stdio scenario's peers, found or named as missing, and the four servers it closes.
//!
//! Peers: `node` and `npx` (Debian's nodejs and npm), the npm packages pinned by
//! `tests/package.json` (`@modelcontextprotocol/server-everything`, `@modelcontextprotocol/sdk`
//! 1.32.2, installed by `npm ci`), and the venv python with `mcp` 2.3.0
//! (`tests/requirements.txt`, made by `tests/run.sh` in `$CARGO_TARGET_DIR/peers-venv`, else
//! `target/peers-venv`) — the same places `tests/src/stdio_peers.rs` looks — and rootful podman
//! with the tests' busybox image ([`container`](super::container)). A missing one fails the
//! scenario with a message saying what to install.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use super::container::Podman;
use super::tree::Tree;
use crate::Result;

/// The pinned versions the baselines are named after.
pub const TS_SDK_VERSION: &str = "1.32.2";
pub const PY_SDK_VERSION: &str = "2.3.0";

/// Where the peers are.
#[derive(Debug, Clone)]
pub struct Peers {
    /// `tests/`: `package.json`, `node_modules/`, `fixtures/`.
    pub tests: PathBuf,
    /// The venv's python, with `mcp`.
    pub python: PathBuf,
    /// Podman, for the containerized stubborn server.
    pub podman: Podman,
}

/// How to install what is missing.
const INSTALL: &str =
    "run `bash tests/run.sh` once (it installs the npm peers with `npm ci` in tests/ \
     and makes the python venv from tests/requirements.txt)";

impl Peers {
    /// Finds every peer, or says which is missing and how to install it.
    pub fn find() -> Result<Peers> {
        let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests");
        let tests = tests
            .canonicalize()
            .map_err(|e| format!("stdio: the tests directory {}: {e}", tests.display()))?;
        for tool in ["node", "npx"] {
            let ran = Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if !ran.is_ok_and(|s| s.success()) {
                return Err(format!(
                    "stdio: `{tool} --version` failed: install Debian's nodejs and npm (apt-get install nodejs npm)"
                )
                .into());
            }
        }
        let everything = tests.join("node_modules/.bin/mcp-server-everything");
        if !everything.exists() {
            return Err(format!("stdio: {} is missing: {INSTALL}", everything.display()).into());
        }
        let sdk = tests.join("node_modules/@modelcontextprotocol/sdk/package.json");
        let version = std::fs::read_to_string(&sdk)
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|json| json["version"].as_str().map(str::to_string));
        if version.as_deref() != Some(TS_SDK_VERSION) {
            return Err(format!(
                "stdio: {} is {version:?}, not {TS_SDK_VERSION}: {INSTALL}",
                sdk.display()
            )
            .into());
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| tests.join("../target"));
        let python = target.join("peers-venv/bin/python");
        let probe = "import importlib.metadata as m, mcp; print(m.version('mcp'))";
        let found = Command::new(&python)
            .args(["-c", probe])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string());
        if found.as_deref() != Some(PY_SDK_VERSION) {
            return Err(format!(
                "stdio: {} with mcp {PY_SDK_VERSION} is missing (found {found:?}): {INSTALL}",
                python.display()
            )
            .into());
        }
        let podman = Podman::find(&target)?;
        Ok(Peers {
            tests,
            python,
            podman,
        })
    }

    /// A fixture script in `tests/fixtures/`.
    pub fn fixture(&self, name: &str) -> PathBuf {
        self.tests.join("fixtures").join(name)
    }
}

/// One of the four servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// `npx --no-install mcp-server-everything` in `tests/`: npx → `npm exec` → `sh -c` → node.
    Everything,
    /// `sh -c 'PYTHON tests/fixtures/mcp_python_server.py'`: a shell in front of the SDK's
    /// MCPServer.
    Python,
    /// `PYTHON tests/fixtures/stubborn_mcp.py --pidfile PATH`: ignores EOF and TERM, a `setsid`
    /// worker holding its stdout.
    Stubborn,
    /// `podman run -i --rm IMAGE sh -c RESPONDER` ([`container`](super::container)): a shell
    /// that answers `initialize`, ignores EOF and TERM, PID 1 of a container the client only
    /// launched.
    StubbornContainer,
}

impl Server {
    pub const ALL: [Server; 4] = [
        Server::Everything,
        Server::Python,
        Server::Stubborn,
        Server::StubbornContainer,
    ];

    /// Its name in the metrics (`stdio_{name}_close_ms`).
    pub fn name(self) -> &'static str {
        match self {
            Server::Everything => "everything",
            Server::Python => "python",
            Server::Stubborn => "stubborn",
            Server::StubbornContainer => "stubborn_container",
        }
    }

    /// The command of one start (a fresh pidfile for the stubborn one, a fresh label for the
    /// container).
    pub fn launch(self, peers: &Peers) -> Launch {
        let mut container = None;
        let argv: Vec<OsString> = match self {
            Server::Everything => ["npx", "--no-install", "mcp-server-everything"]
                .map(OsString::from)
                .to_vec(),
            Server::Python => {
                let script = format!(
                    "'{}' '{}'",
                    peers.python.display(),
                    peers.fixture("mcp_python_server.py").display()
                );
                vec!["sh".into(), "-c".into(), script.into()]
            }
            Server::Stubborn => vec![
                peers.python.clone().into(),
                peers.fixture("stubborn_mcp.py").into(),
            ],
            Server::StubbornContainer => {
                let (label, argv) = peers.podman.launch();
                container = Some(label);
                argv
            }
        };
        let pidfile = (self == Server::Stubborn).then(fresh_pidfile);
        let mut argv = argv;
        if let Some(path) = &pidfile {
            argv.push("--pidfile".into());
            argv.push(path.clone().into());
        }
        let min_tree = match self {
            Server::Everything => 3, // npm exec (npx exec'd itself), sh, node
            Server::Python | Server::Stubborn => 2, // sh and python; server and worker
            Server::StubbornContainer => 1, // the client: the container is conmon's
        };
        Launch {
            argv,
            cwd: peers.tests.clone(),
            pidfile,
            min_tree,
            container,
        }
    }
}

/// One start of a server: what to run, where, and where its pids will be.
#[derive(Debug, Clone)]
pub struct Launch {
    pub argv: Vec<OsString>,
    pub cwd: PathBuf,
    pub pidfile: Option<PathBuf>,
    /// The fewest processes its tree has once it answered `initialize`.
    pub min_tree: usize,
    /// The container's label (`KEY=VALUE`), for the containerized server.
    pub container: Option<String>,
}

impl Launch {
    /// A std `Command` for it.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..]).current_dir(&self.cwd);
        cmd
    }

    /// Fails unless `tree` (snapshotted before the close) holds the whole server: a snapshot
    /// that missed it would count nothing left.
    pub fn check(&self, tree: &Tree) -> Result<()> {
        if tree.len() < self.min_tree {
            return Err(format!(
                "stdio: {:?}: {} processes found before the close, expected at least {}",
                self.argv,
                tree.len(),
                self.min_tree
            )
            .into());
        }
        Ok(())
    }

    /// `{"command": …, "args": […], "cwd": …}`, for the SDK scripts.
    pub fn json(&self) -> String {
        let text = |s: &OsString| s.to_string_lossy().into_owned();
        serde_json::json!({
            "command": text(&self.argv[0]),
            "args": self.argv[1..].iter().map(text).collect::<Vec<_>>(),
            "cwd": self.cwd.to_string_lossy(),
        })
        .to_string()
    }

    /// The pids in the stubborn fixture's pidfile (server and `setsid` worker; written before
    /// it answers anything, so present once `initialize` was answered), then the file removed.
    /// Empty for the other servers.
    pub fn pidfile_pids(&self) -> Result<Vec<u32>> {
        let Some(path) = &self.pidfile else {
            return Ok(Vec::new());
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "stdio: the stubborn fixture's pidfile {}: {e}",
                path.display()
            )
        })?;
        let _ = std::fs::remove_file(path);
        text.split_whitespace()
            .map(|p| {
                p.parse()
                    .map_err(|_| format!("stdio: pidfile {}: {text:?}", path.display()).into())
            })
            .collect()
    }
}

/// A pidfile path of our own under the temporary directory.
fn fresh_pidfile() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "childguard-bench-stubborn-{}-{n}.pid",
        std::process::id()
    ))
}
