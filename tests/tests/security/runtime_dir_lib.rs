//! Attack 2 of issue 49, on the library: this process's `XDG_RUNTIME_DIR` is a directory the
//! attacker owns (set by the frame, one test at a time), and the attacker attacks the private
//! directory a `Ready::Notify` spawn makes there. Every spawn must be ready, and a directory of
//! root's the attacker picked must keep its owner, mode and (empty) content.

use std::os::unix::process::CommandExt;

use super::attack::{library_spawn, logged_dirs, runtime_dir_attack, OnRuntimeDir};

/// (a) Root's directory renamed aside and the attacker's socket bound in its place: the
/// spawn's `READY=1` must still reach root.
#[test]
fn library_notify_is_ready_when_the_runtime_dir_owner_steals_the_socket() {
    runtime_dir_attack(
        "library_notify_is_ready_when_the_runtime_dir_owner_steals_the_socket",
        OnRuntimeDir::Steal,
        |lab, _, log| library_spawn(lab.server(log), None, None),
    );
}

/// (b) Root's new directory swapped for a symlink to a directory of root's on `IN_CREATE`.
#[test]
fn library_notify_keeps_a_chosen_dir_when_swapped_on_create() {
    runtime_dir_attack(
        "library_notify_keeps_a_chosen_dir_when_swapped_on_create",
        OnRuntimeDir::SwapOnCreate,
        |lab, _, log| library_spawn(lab.server(log), None, None),
    );
}

/// (c) `notify_owner`, the child run as the attacker, and the swap on the `chmod`'s
/// `IN_ATTRIB`: the chosen directory must not be chowned to the attacker.
#[test]
fn library_notify_owner_keeps_a_chosen_dir_when_swapped_on_chmod() {
    runtime_dir_attack(
        "library_notify_owner_keeps_a_chosen_dir_when_swapped_on_chmod",
        OnRuntimeDir::SwapOnChmod,
        |lab, _, log| {
            let mut server = lab.server(log);
            server.uid(lab.user.uid).gid(lab.user.gid);
            library_spawn(server, Some(lab.user), None)
        },
    );
}

/// An explicit `runtime_dir` another user owns is refused with an error naming it and its owner
/// (no silent fallback) before the server is started, each time, and nothing of root's lands in
/// it: the attacker swaps on `IN_CREATE`, as in (b).
#[test]
fn library_refuses_an_explicit_runtime_dir_another_user_owns() {
    runtime_dir_attack(
        "library_refuses_an_explicit_runtime_dir_another_user_owns",
        OnRuntimeDir::SwapOnCreate,
        |lab, xdg, log| {
            let started_before = logged_dirs(log).len();
            let spawned = library_spawn(lab.server(log), None, Some(xdg));
            let started = logged_dirs(log).len() > started_before;
            let names_it = |e: &str| {
                e.contains(&xdg.display().to_string())
                    && e.contains(&format!("uid {}", lab.user.uid))
            };
            match spawned {
                Err(e) if !started && e.starts_with("spawn: ") && names_it(&e) => Ok(()),
                Err(e) if !started => Err(format!(
                    "refused, but the error does not name the directory and its owner: {e}"
                )),
                Err(e) => Err(format!(
                    "the server was started with runtime_dir {} (owned by uid {}) before the \
                     spawn failed: {e}",
                    xdg.display(),
                    lab.user.uid
                )),
                Ok(()) => Err(format!(
                    "spawned with runtime_dir {} (owned by uid {}): it should be refused",
                    xdg.display(),
                    lab.user.uid
                )),
            }
        },
    );
}
