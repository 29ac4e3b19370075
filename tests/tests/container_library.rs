//! The library's face of containers as launchers (issue 51): `ChildHandle::stdio_server` — the
//! default of the rmcp and Python adapters, `Containment::BestEffort` — given `podman run -i
//! --rm …` holds the container through podman, skips the rungs its server ignores, and its
//! close leaves none; a detached launch is refused before anything runs. Against the podman bed (`tests/src/podman.rs`).

use std::process::Command;

use childguard::{ChildHandle, ContainmentBackend, ErrorKind, Ladder, Signal};
use childguard_tests::cgroups::serial;
use childguard_tests::podman::host::SESSION;
use childguard_tests::podman::{podman, run_argv, IMAGE, NAME_PREFIX, STUBBORN};

#[test]
fn a_stdio_servers_podman_launch_is_held_its_ignored_rung_skipped_and_none_left() {
    let test = "a_stdio_servers_podman_launch_is_held_its_ignored_rung_skipped_and_none_left";
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let guard = podman.guard();
    let argv = run_argv(STUBBORN);
    let mut cmd = Command::new(&podman.program);
    podman.env(&mut cmd).args(&argv[1..]);
    let ladder: Ladder = "EOF:300ms,TERM:300ms,KILL:1s".parse().unwrap();
    let handle = ChildHandle::stdio_server(cmd)
        .ladder(ladder)
        .spawn()
        .unwrap();
    let running = guard.running(SESSION, String::new);
    assert!(running.name.starts_with(NAME_PREFIX), "{running:?}");
    let report = handle.close().unwrap();
    eprintln!("{test}: {report}");
    let containment = report.containment.as_ref().expect("a containment report");
    assert_eq!(
        containment.backend,
        ContainmentBackend::Container,
        "{report}"
    );
    assert_eq!(
        containment.container.as_deref(),
        Some(running.name.as_str())
    );
    // The stubborn server ignores EOF and TERM: TERM skipped (the container's PID 1 ignores
    // it, read from /proc by the pid podman gives; the client catches it), KILL to the
    // container.
    let skipped: Vec<Signal> = report.skipped.iter().map(|s| s.signal).collect();
    assert_eq!(skipped, [Signal::TERM], "{report}");
    let sent: Vec<(Signal, bool)> = report
        .signals
        .iter()
        .map(|s| (s.signal, s.to_cgroup))
        .collect();
    assert_eq!(sent, [(Signal::KILL, true)], "{report}");
    let left = guard.made();
    assert!(left.is_empty(), "{test}: left after the close: {left:?}");
}

#[test]
fn a_detached_launch_is_refused_before_anything_runs() {
    let test = "a_detached_launch_is_refused_before_anything_runs";
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let guard = podman.guard();
    let mut cmd = Command::new(&podman.program);
    podman
        .env(&mut cmd)
        .args(["run", "-d", "--rm", IMAGE, "sleep", "30"]);
    let err = ChildHandle::stdio_server(cmd).spawn().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("run -d"), "{err}");
    let left = guard.made();
    assert!(left.is_empty(), "{test}: a container was made: {left:?}");
}
