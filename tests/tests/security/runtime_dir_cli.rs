//! Attack 2 of issue 49, on the CLI: root runs childguard with an `XDG_RUNTIME_DIR` another
//! user owns (`su` without `-` keeps the user's), and the user attacks the private directory
//! root makes there. Root's server must be ready, CMD must run, and a directory of root's the
//! user picked must keep its owner, its mode and its (empty) content.

use std::path::Path;

use super::attack::{cli, runtime_dir_attack, Lab, OnRuntimeDir, ATTACKER};

/// `childguard with --ready notify -- SERVER -- CMD`, CMD appending a line to `ran.log`: `Ok`
/// when it exited 0 and CMD ran.
fn with_ready_notify(lab: &Lab, xdg: &Path, log: &Path) -> Result<(), String> {
    let ran = lab.root.join("ran.log");
    let lines = |p: &Path| std::fs::read_to_string(p).map_or(0, |t| t.lines().count());
    let before = lines(&ran);
    let mut args: Vec<String> = ["with", "--ready", "notify", "--ready-timeout", "5s", "--"]
        .map(String::from)
        .to_vec();
    args.extend(lab.server_argv(log));
    args.extend(
        ["--", "sh", "-c", r#"echo ran >> "$0""#]
            .map(String::from)
            .to_vec(),
    );
    args.push(ran.display().to_string());
    cli(&args, Some(xdg), &[0])?;
    match lines(&ran) == before + 1 {
        true => Ok(()),
        false => Err("exited 0 but CMD did not run".into()),
    }
}

/// (a) The attacker renames root's directory aside and binds its own socket in its place, so
/// that root's server's `READY=1` would go to it: root's `with --ready notify` must still get
/// READY and run CMD.
#[test]
fn with_ready_notify_is_ready_when_the_runtime_dir_owner_steals_the_socket() {
    runtime_dir_attack(
        "with_ready_notify_is_ready_when_the_runtime_dir_owner_steals_the_socket",
        OnRuntimeDir::Steal,
        with_ready_notify,
    );
}

/// (b) On `IN_CREATE` the attacker swaps root's new directory for a symlink to a directory of
/// root's: root's `chmod 0700` and its socket must not land there.
#[test]
fn with_ready_notify_keeps_a_chosen_dir_when_swapped_on_create() {
    runtime_dir_attack(
        "with_ready_notify_keeps_a_chosen_dir_when_swapped_on_create",
        OnRuntimeDir::SwapOnCreate,
        with_ready_notify,
    );
}

/// (c) With `probe --user` (`notify_owner`), the swap on the `chmod`'s `IN_ATTRIB`: root's
/// `chown` to the user must not land on the chosen directory.
#[test]
fn probe_user_keeps_a_chosen_dir_when_swapped_on_chmod() {
    runtime_dir_attack(
        "probe_user_keeps_a_chosen_dir_when_swapped_on_chmod",
        OnRuntimeDir::SwapOnChmod,
        |lab, xdg, log| {
            let mut args: Vec<String> = [
                "probe",
                "--runs",
                "1",
                "--signals",
                "TERM",
                "--window",
                "5s",
                "--ready",
                "notify",
                "--ready-timeout",
                "5s",
                "--user",
                ATTACKER,
                "--",
            ]
            .map(String::from)
            .to_vec();
            args.extend(lab.server_argv(log));
            cli(&args, Some(xdg), &[0, 3])
        },
    );
}
