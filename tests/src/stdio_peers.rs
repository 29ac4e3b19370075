//! The stdio servers' peers (issue 31): the npm packages pinned by `tests/package.json`
//! (installed by `tests/run.sh` with `npm ci`), the Python venv with the MCP SDK
//! (`tests/requirements.txt`), and our own fixtures in `tests/fixtures/`. Each finder fails
//! the test saying what to install when its peer is missing — unless `CHILDGUARD_SKIP_PEERS=1`,
//! where it returns `None` and the test says it was skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `tests/`, where `package.json` and `node_modules/` are.
pub fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// A fixture script in `tests/fixtures/` (always there: it is in the repository).
pub fn fixture(name: &str) -> PathBuf {
    let path = tests_dir().join("fixtures").join(name);
    assert!(path.exists(), "fixture {} is missing", path.display());
    path
}

fn skip_peers() -> bool {
    std::env::var_os("CHILDGUARD_SKIP_PEERS").is_some_and(|v| v == "1")
}

/// Fails the test with `why` and the install hint, or returns `None` under
/// `CHILDGUARD_SKIP_PEERS=1` (saying so on stderr).
fn missing<T>(test: &str, why: &str) -> Option<T> {
    if skip_peers() {
        eprintln!("SKIPPED {test}: {why} (CHILDGUARD_SKIP_PEERS=1)");
        return None;
    }
    panic!("{test}: {why}: run `bash tests/run.sh` once (it installs them), or set CHILDGUARD_SKIP_PEERS=1");
}

/// An executable of the pinned npm packages (`tests/node_modules/.bin/NAME`).
pub fn npm_bin(test: &str, name: &str) -> Option<PathBuf> {
    let path = tests_dir().join("node_modules/.bin").join(name);
    if !path.exists() {
        return missing(
            test,
            &format!(
                "{} is missing (npm ci in tests/, needs Debian's nodejs and npm)",
                path.display()
            ),
        );
    }
    Some(path)
}

/// `npx --no-install NAME ARGS…` run from `tests/`, so npx finds the pinned package without
/// the network: the launcher chain users have (`npm exec` → `sh -c` → `node`).
pub fn npx(test: &str, name: &str, args: &[&str]) -> Option<Command> {
    npm_bin(test, name)?;
    let mut cmd = Command::new("npx");
    cmd.arg("--no-install")
        .arg(name)
        .args(args)
        .current_dir(tests_dir());
    Some(cmd)
}

/// The venv's python with the MCP Python SDK (`tests/requirements.txt`).
pub fn mcp_python(test: &str) -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tests_dir().join("../target"));
    let python = target.join("peers-venv/bin/python");
    let ok = python.exists()
        && Command::new(&python)
            .args(["-c", "import mcp"])
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        return missing(
            test,
            &format!("{} with the `mcp` package is missing", python.display()),
        );
    }
    Some(python)
}

/// A program on `PATH` (`node`, `npx`: Debian's nodejs and npm), found by `sh`'s `command -v`.
pub fn program(test: &str, name: &str, debian: &str) -> Option<PathBuf> {
    let found = Command::new("sh")
        .args(["-c", "command -v \"$1\"", "sh", name])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    match found {
        Some(path) => Some(path),
        None => missing(
            test,
            &format!("{name} is not on PATH (Debian package {debian})"),
        ),
    }
}
