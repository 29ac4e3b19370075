//! Container engines as launchers (issue 51), docker: `docker run -i --rm IMAGE …` on the
//! suite's own dockerd (`DOCKER_HOST=unix:///run/childguard-tests/docker/docker.sock`, started
//! by tests/engine-beds.sh, run by tests/run.sh), rootful, behind `childguard run` (the
//! scenarios: `tests/src/engines/scenarios.rs`). Counted with `docker ps -a`. Figures with
//! `--nocapture`.

use childguard_tests::cgroups::serial;
use childguard_tests::engines::{docker, scenarios};

/// The host's close: the ladder climbs to `KILL`, childguard exits with the container gone.
#[test]
fn the_hosts_close_ends_the_docker_container() {
    let test = "the_hosts_close_ends_the_docker_container";
    let _serial = serial();
    let Some(engine) = docker(test) else {
        return;
    };
    scenarios::hosts_close(test, &engine);
}

/// The host (the MCP Python SDK) `SIGKILL`ed: the container gone within 2 s.
#[test]
fn the_host_sigkilled_leaves_no_docker_container() {
    let test = "the_host_sigkilled_leaves_no_docker_container";
    let _serial = serial();
    let Some(engine) = docker(test) else {
        return;
    };
    scenarios::host_sigkilled(test, &engine);
}

/// childguard `SIGKILL`ed: its guardian's `docker kill`, the container gone within 2 s.
#[test]
fn childguard_sigkilled_leaves_no_docker_container() {
    let test = "childguard_sigkilled_leaves_no_docker_container";
    let _serial = serial();
    let Some(engine) = docker(test) else {
        return;
    };
    scenarios::childguard_sigkilled(test, &engine);
}
