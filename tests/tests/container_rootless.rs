//! Container engines as launchers (issue 51), rootless: `podman run -i --rm IMAGE …` run by the
//! suite's unprivileged user `childguard-user` with its own podman storage, and `childguard run`
//! run by that user in front of it (the bed: tests/engine-beds.sh, run by tests/run.sh; the
//! scenarios: `tests/src/engines/scenarios.rs`). Counted with the user's own `podman ps -a`.
//! Figures with `--nocapture`.

use childguard_tests::cgroups::serial;
use childguard_tests::engines::{rootless_podman, scenarios};

/// The host's close: the ladder climbs to `KILL`, childguard exits with the container gone.
#[test]
fn the_hosts_close_ends_the_users_container() {
    let test = "the_hosts_close_ends_the_users_container";
    let _serial = serial();
    let Some(engine) = rootless_podman(test) else {
        return;
    };
    scenarios::hosts_close(test, &engine);
}

/// The host (the MCP Python SDK, as the user) `SIGKILL`ed: the container gone within 2 s.
#[test]
fn the_host_sigkilled_leaves_no_container_of_the_user() {
    let test = "the_host_sigkilled_leaves_no_container_of_the_user";
    let _serial = serial();
    let Some(engine) = rootless_podman(test) else {
        return;
    };
    scenarios::host_sigkilled(test, &engine);
}

/// childguard `SIGKILL`ed: its guardian's `podman kill` (as the user), the container gone
/// within 2 s.
#[test]
fn childguard_sigkilled_leaves_no_container_of_the_user() {
    let test = "childguard_sigkilled_leaves_no_container_of_the_user";
    let _serial = serial();
    let Some(engine) = rootless_podman(test) else {
        return;
    };
    scenarios::childguard_sigkilled(test, &engine);
}
