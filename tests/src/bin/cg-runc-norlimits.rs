//! An OCI runtime for podman in the test bed of `tests/src/podman.rs` (issue 51): `runc`,
//! once `process.rlimits` is dropped from the container's config. Some sandboxes (this
//! suite's CI among them) refuse runc's `setrlimit` of the container's process
//! (`error setting rlimits for ready process: … operation not permitted`), and podman always
//! writes rlimits into the bundle; `tests/src/runc.rs` drops them from its own bundles the
//! same way.
//!
//! Podman (through conmon) runs it as it runs runc: `cg-runc-norlimits [GLOBAL…] create
//! --bundle DIR … ID`, `… exec --process FILE …`, `… kill ID SIG`, `… delete ID`. It finds
//! `--bundle DIR` (`-b DIR`, `--bundle=DIR`) and `--process FILE` (`--process=FILE`) among
//! its arguments, removes `process.rlimits` from `DIR/config.json` (or `rlimits` from
//! FILE), and execs runc with its arguments unchanged: `CG_RUNC` if set, else
//! `/usr/sbin/runc`, `/usr/bin/runc`, else `runc` on `PATH`.
//!
//! The bed points podman at it without changing the argv a user types, with a containers.conf
//! of its own (`CONTAINERS_CONF`): `[engine] runtime = "cg-runc"`, `[engine.runtimes] cg-runc
//! = ["/abs/path/cg-runc-norlimits"]`. Nothing goes to stdout (conmon reads runc's); a
//! config it cannot edit is said on stderr and runc is run anyway (its own error follows).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The value of option `long` (`--bundle`) or `short` (`-b`) in `args`: `--bundle DIR`,
/// `--bundle=DIR`, `-b DIR`.
fn option(args: &[String], long: &str, short: Option<&str>) -> Option<String> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == long || Some(arg.as_str()) == short {
            return it.next().cloned();
        }
        if let Some(value) = arg.strip_prefix(long).and_then(|v| v.strip_prefix('=')) {
            return Some(value.to_owned());
        }
    }
    None
}

/// Removes the key at `path` (`["process", "rlimits"]`) from the JSON file `file`, if there.
fn drop_key(file: &Path, path: &[&str]) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let (last, parents) = path.split_last().expect("a key");
    let mut at = &mut json;
    for key in parents {
        match at.get_mut(*key) {
            Some(inner) => at = inner,
            None => return Ok(()),
        }
    }
    let removed = at.as_object_mut().and_then(|o| o.remove(*last));
    if removed.is_some() {
        std::fs::write(file, json.to_string()).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    Ok(())
}

/// The runc to exec.
fn runc() -> PathBuf {
    if let Some(path) = std::env::var_os("CG_RUNC") {
        return PathBuf::from(path);
    }
    ["/usr/sbin/runc", "/usr/bin/runc"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("runc"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let edits = [
        option(&args, "--bundle", Some("-b")).map(|dir| {
            (
                Path::new(&dir).join("config.json"),
                &["process", "rlimits"][..],
            )
        }),
        option(&args, "--process", None).map(|file| (PathBuf::from(file), &["rlimits"][..])),
    ];
    for (file, key) in edits.into_iter().flatten() {
        if let Err(e) = drop_key(&file, key) {
            eprintln!("cg-runc-norlimits: cannot drop {}: {e}", key.join("."));
        }
    }
    let runc = runc();
    let err = Command::new(&runc).args(&args).exec();
    eprintln!("cg-runc-norlimits: exec {}: {err}", runc.display());
    ExitCode::from(127)
}
