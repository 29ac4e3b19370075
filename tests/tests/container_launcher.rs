//! Container engines as launchers (issue 51), against real rootful podman (the bed of
//! `tests/src/podman.rs`: a busybox image imported by tests/run.sh, nothing pulled). `podman
//! run -i --rm IMAGE …` is only a client: killed, it leaves the container running under
//! conmon. `childguard run` recognises the engine's `run` (also behind `env VAR=VAL`), names
//! the container (`--name childguard-…`, unless the user gave one) and makes it the tree: the
//! catchable rungs become `podman kill --signal SIG NAME`, `KILL` `podman kill NAME`, and the
//! close is over when the container is gone, `--rm`'s leftovers removed; the report says
//! `contained by container`. `--container ENGINE` says so for an argv childguard cannot read,
//! giving the name in `CHILDGUARD_CONTAINER_NAME`.
//!
//! The server is the docs' stubborn container — PID 1 `sh` ignoring `TERM` and stdin's EOF
//! ([`STUBBORN`]; for the MCP Python SDK host, the same in a shell that answers MCP,
//! [`STUBBORN_MCP`]) — so only the `KILL` rung ends it. Each test asserts that
//! `podman ps -a` shows none of its containers when it is over, and that the ladder's bounds
//! held; the bounds are generous (a loaded CI machine), the figures printed (`--nocapture`):
//! the ending's time, when the container's PID 1 and conmon exited, when `podman ps -a`
//! showed it gone. The tests run one at a time ([`serial`]): each counts the containers made
//! since it started.

use std::time::Instant;

use childguard_cli::procs::children_of;
use childguard_tests::cgroups::serial;
use childguard_tests::podman::host::{
    cli_comm, close_and_check, close_and_check_json, ms, report, sdk_host, Launch, KILLED_LADDER,
    LADDER, PROMISE, SDK_LADDER, SESSION, SLACK,
};
use childguard_tests::podman::{podman, run_argv, Watch, IMAGE, NAME_PREFIX, STUBBORN};
use childguard_tests::stdio_peers::mcp_python;
use childguard_tests::{eventually, is_alive, left_after, pidfd, Pins};

/// (a) The docs' command, `childguard run --stdio-server --contain --ladder LADDER -- podman
/// run -i --rm IMAGE sh -c STUBBORN`, its host closing stdin: the ladder climbs to `KILL` and
/// the close ends with the container gone.
#[test]
fn the_hosts_close_ends_the_container_within_the_ladder() {
    let test = "the_hosts_close_ends_the_container_within_the_ladder";
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let guard = podman.guard();
    let flags = ["--contain", "--report", "text", "--ladder", LADDER];
    let mut cg = Launch::start(&podman, &flags, &run_argv(STUBBORN));
    let c = guard.running(SESSION, || cg.streams.stderr());
    close_and_check(test, &guard, &mut cg, &c);
    assert!(
        c.name.starts_with(NAME_PREFIX),
        "{test}: childguard should have named the container {NAME_PREFIX}…: {c:?}"
    );
}

/// (a) The same close by the MCP Python SDK as the host (`tests/fixtures/mcp_host.py`, the
/// bed's environment passed as a host's `"env"`): a session through the container, then the
/// SDK's close, over before the SDK's own 2 s wait.
#[test]
fn the_sdk_hosts_close_ends_the_container() {
    let test = "the_sdk_hosts_close_ends_the_container";
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let Some(python) = mcp_python(test) else {
        return;
    };
    let guard = podman.guard();
    let mut host = sdk_host(&python, &podman, &[], SDK_LADDER);
    let c = guard.running(SESSION, || host.stderr());
    let timer = Watch::of(c.pid).time(Instant::now(), SESSION);
    let (took, stderr) = host.closed(SESSION);
    let at_exit = guard.made();
    let gone = guard.gone_within(Instant::now(), SLACK);
    let exits = timer.join().unwrap();
    eprintln!(
        "{test}: the SDK's close took {took:.3} s; container {} (from when the test saw it \
         running: PID 1 exited +{}, conmon +{})\n{}",
        c.name,
        ms(exits.pid1),
        ms(exits.monitor),
        report(&stderr)
    );
    assert!(
        at_exit.is_empty(),
        "{test}: podman ps -a still shows {at_exit:?} after the SDK's close (later: {gone:?}); \
         stderr:\n{stderr}"
    );
    assert!(
        took < 2.0,
        "{test}: the SDK's close took {took} s: not over before the SDK's own 2 s wait \
         (ladder {SDK_LADDER}); stderr:\n{stderr}"
    );
    assert!(
        stderr.contains("contained by container"),
        "{test}: the report should say `contained by container`:\n{stderr}"
    );
}

/// (b) The MCP Python SDK host `SIGKILL`ed mid-session: childguard sees its stdin's EOF — or,
/// with `--fork-holder` (a process the host forked holds our stdin open), its parent's death —
/// and the container is gone within 2 s (asserted with slack; the time printed).
#[test]
fn the_host_sigkilled_leaves_no_container() {
    let test = "the_host_sigkilled_leaves_no_container";
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let Some(python) = mcp_python(test) else {
        return;
    };
    for host_flags in [&["--hang"][..], &["--hang", "--fork-holder"]] {
        let guard = podman.guard();
        let host = sdk_host(&python, &podman, host_flags, KILLED_LADDER);
        let mut holder_pin = Pins::default();
        let fork_holder = host_flags.contains(&"--fork-holder");
        let holder = host.hanging(fork_holder, &mut holder_pin, SESSION);
        let c = guard.running(SESSION, || host.stderr());
        let cg = host.child_named(&cli_comm());
        let mut pins = Pins::default();
        pins.pin([cg]);
        let timer = Watch::of(c.pid);
        let killed = Instant::now();
        host.sigkill();
        let timer = timer.time(killed, PROMISE + SLACK);
        let gone = guard.gone_within(killed, PROMISE + SLACK);
        let cg_left = left_after(&[cg], SLACK);
        let exits = timer.join().unwrap();
        eventually(SLACK, || host.stderr().contains("note: "));
        let stderr = host.stderr();
        eprintln!(
            "{test} {host_flags:?}: host SIGKILLed → container {}'s PID 1 exited +{}, conmon \
             +{}, podman ps -a without it +{} (promise: {PROMISE:?}); ladder \
             {KILLED_LADDER}\n{}",
            c.name,
            ms(exits.pid1),
            ms(exits.monitor),
            gone.as_ref()
                .map_or_else(|left| format!("never: {left:?}"), |d| ms(Some(*d))),
            report(&stderr)
        );
        assert!(
            gone.is_ok(),
            "{test} {host_flags:?}: podman ps -a still shows {:?} {:?} after the host's \
             SIGKILL; stderr:\n{stderr}",
            gone.unwrap_err(),
            PROMISE + SLACK
        );
        assert!(
            cg_left.is_empty(),
            "{test}: childguard {cg} still running after the host's SIGKILL"
        );
        if let Some(holder) = holder {
            assert!(is_alive(holder), "the fd holder {holder} died");
            assert!(
                stderr.contains("childguard's parent (pid "),
                "{test}: childguard should name its parent's exit as the trigger (stdin is \
                 held open by {holder}):\n{stderr}"
            );
        }
        assert!(
            stderr.contains("contained by container"),
            "{test}: the report should say `contained by container`:\n{stderr}"
        );
    }
}

/// (c) childguard itself `SIGKILL`ed: no ladder, no close of its own — its guardian runs
/// `podman kill NAME`, and the container is gone within 2 s (asserted with slack); the podman
/// client goes too.
#[test]
fn childguard_sigkilled_leaves_no_container() {
    childguard_sigkilled("childguard_sigkilled_leaves_no_container", &[]);
}

/// The same with a host's big environment: 20 KB (the guardian gets it whole: CI's was past
/// the 4 KiB a guardian entry once held, and every container spawn failed), and 100 KB (past
/// the guardian's 64 KiB: it gets the variables the engine reads, `CONTAINERS_CONF` among
/// them).
#[test]
fn childguard_sigkilled_with_a_big_environment_leaves_no_container() {
    for size in [20_000, 100_000] {
        let big = [("CG_TEST_BIG_ENV", "x".repeat(size))];
        childguard_sigkilled(
            &format!("childguard_sigkilled_with_a_big_environment_leaves_no_container ({size} B)"),
            &big,
        );
    }
}

fn childguard_sigkilled(test: &str, env: &[(&str, String)]) {
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let guard = podman.guard();
    let flags = ["--contain", "--report", "text", "--ladder", KILLED_LADDER];
    let mut cg = Launch::start_with_env(&podman, &flags, &run_argv(STUBBORN), env);
    let c = guard.running(SESSION, || cg.streams.stderr());
    let below = children_of(cg.child.id());
    cg.pins.pin(below.iter().copied());
    let timer = Watch::of(c.pid);
    let killed = Instant::now();
    rustix::process::pidfd_send_signal(pidfd(cg.child.id()), rustix::process::Signal::KILL)
        .expect("SIGKILL childguard");
    let timer = timer.time(killed, PROMISE + SLACK);
    let gone = guard.gone_within(killed, PROMISE + SLACK);
    let left = left_after(&below, SLACK);
    let exits = timer.join().unwrap();
    eprintln!(
        "{test}: childguard SIGKILLed → container {}'s PID 1 exited +{}, conmon +{}, podman ps \
         -a without it +{} (promise: {PROMISE:?})",
        c.name,
        ms(exits.pid1),
        ms(exits.monitor),
        gone.as_ref()
            .map_or_else(|left| format!("never: {left:?}"), |d| ms(Some(*d))),
    );
    assert!(
        gone.is_ok(),
        "{test}: podman ps -a still shows {:?} {:?} after childguard's SIGKILL (its guardian \
         should have run podman kill); stderr:\n{}",
        gone.unwrap_err(),
        PROMISE + SLACK,
        cg.streams.stderr()
    );
    assert!(
        left.is_empty(),
        "{test}: childguard's children {left:?} (of {below:?}: the podman client) still \
         running"
    );
}

/// (d) An image that does not exist: podman fails (after its pull's retries against a
/// registry on localhost that is not there); childguard exits non-zero with podman's message
/// on its stderr, and no container is left.
#[test]
fn a_missing_image_fails_with_podmans_message_and_leaves_nothing() {
    let test = "a_missing_image_fails_with_podmans_message_and_leaves_nothing";
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let guard = podman.guard();
    let image = "localhost/childguard-no-such-image:1";
    let mut argv = run_argv(STUBBORN);
    let at = argv.iter().position(|a| a == IMAGE).unwrap();
    argv[at] = image.into();
    let flags = ["--contain", "--report", "text", "--ladder", LADDER];
    let started = Instant::now();
    let mut cg = Launch::start(&podman, &flags, &argv);
    let status = cg.exit_within(SESSION);
    let took = started.elapsed();
    let stderr = cg.stderr();
    eprintln!(
        "{test}: childguard exited +{:.0} ms: {status:?}\n{stderr}",
        took.as_secs_f64() * 1e3
    );
    let status = status.unwrap_or_else(|| {
        panic!("{test}: childguard still running {SESSION:?} after podman failed:\n{stderr}")
    });
    assert!(!status.success(), "{test}: childguard exited 0:\n{stderr}");
    assert!(
        stderr.contains("Error") && stderr.contains("childguard-no-such-image"),
        "{test}: podman's message should be on childguard's stderr:\n{stderr}"
    );
    let made = guard.made();
    assert!(made.is_empty(), "{test}: containers left: {made:?}");
    assert!(
        podman
            .containers_named(NAME_PREFIX)
            .iter()
            .all(|c| c.image != image),
        "{test}: a container of {image} is left"
    );
}

/// (e) `env FOO=1 podman run …`: the engine behind `env` is recognised too — the container is
/// named by childguard, gets `FOO` (`-e FOO`: it prints it on stdout, through childguard),
/// and the close ends it; the `--report json`'s `containment.backend` is `container`.
#[test]
fn podman_behind_env_is_the_container_launcher() {
    let test = "podman_behind_env_is_the_container_launcher";
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let guard = podman.guard();
    let script = format!("echo \"FOO=$FOO\"; {STUBBORN}");
    let argv: Vec<String> = [
        "env", "FOO=1", "podman", "run", "-i", "--rm", "-e", "FOO", IMAGE, "sh", "-c", &script,
    ]
    .map(String::from)
    .to_vec();
    let flags = ["--contain", "--report", "json", "--ladder", LADDER];
    let mut cg = Launch::start(&podman, &flags, &argv);
    assert_eq!(cg.line("FOO="), "FOO=1", "{argv:?}");
    let c = guard.running(SESSION, || cg.streams.stderr());
    let stderr = close_and_check_json(test, &guard, &mut cg, &c);
    assert!(
        c.name.starts_with(NAME_PREFIX),
        "{test}: childguard should have named the container {NAME_PREFIX}…: {c:?}\n{stderr}"
    );
}

/// (e) `--name NAME` given by the user: childguard keeps it (adds none), the container is the
/// one named so, and the close ends it.
#[test]
fn the_users_container_name_is_kept() {
    let test = "the_users_container_name_is_kept";
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let guard = podman.guard();
    let name = format!("cg-test-own-name-{}", std::process::id());
    let mut argv = run_argv(STUBBORN);
    argv.splice(2..2, ["--name".to_string(), name.clone()]);
    let flags = ["--contain", "--report", "text", "--ladder", LADDER];
    let mut cg = Launch::start(&podman, &flags, &argv);
    let c = guard.running(SESSION, || cg.streams.stderr());
    assert_eq!(c.name, name, "{test}: {argv:?}");
    close_and_check(test, &guard, &mut cg, &c);
}

/// (f) `--container podman` for an argv childguard cannot read (a script): the script is given
/// the name in `CHILDGUARD_CONTAINER_NAME` and passes it as `--name`; the close ends that
/// container.
#[test]
fn the_explicit_container_flag_names_the_scripts_container() {
    let test = "the_explicit_container_flag_names_the_scripts_container";
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let guard = podman.guard();
    let script = format!(
        "echo \"name=$CHILDGUARD_CONTAINER_NAME\"; exec podman run --name \
         \"$CHILDGUARD_CONTAINER_NAME\" -i --rm {IMAGE} sh -c \"$1\""
    );
    let argv: Vec<String> = ["sh", "-c", &script, "sh", STUBBORN]
        .map(String::from)
        .to_vec();
    let flags = [
        "--container",
        "podman",
        "--report",
        "text",
        "--ladder",
        LADDER,
    ];
    let mut cg = Launch::start(&podman, &flags, &argv);
    let line = cg.line("name=");
    let name = line.trim_start_matches("name=").to_owned();
    assert!(
        !name.is_empty(),
        "{test}: CHILDGUARD_CONTAINER_NAME was not set for the script; stderr:\n{}",
        cg.stderr()
    );
    let c = guard.running(SESSION, || cg.streams.stderr());
    assert_eq!(c.name, name, "{test}: the script's container");
    close_and_check(test, &guard, &mut cg, &c);
}

/// The bed itself: the image runs with the bed's runtime, a container started in the
/// background is counted by `podman ps -a`, and the guard removes what a test leaves.
#[test]
fn the_bed_counts_and_removes_containers() {
    let test = "the_bed_counts_and_removes_containers";
    let _serial = serial();
    let Some(podman) = podman(test) else {
        return;
    };
    let name = format!("{NAME_PREFIX}bed-{}", std::process::id());
    {
        let guard = podman.guard();
        let out = podman
            .command()
            .args([
                "run", "-d", "--rm", "--name", &name, IMAGE, "sh", "-c", STUBBORN,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "podman run -d: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let c = guard.running(SESSION, String::new);
        assert_eq!(c.name, name);
        assert!(is_alive(c.pid), "{c:?}");
        assert_eq!(podman.containers_named(&name).len(), 1);
        eprintln!("{test}: {c:?}");
    }
    assert!(
        podman.containers_named(&name).is_empty(),
        "{test}: the guard left {name}"
    );
}

/// The host config docs/stdio-servers.md shows for containers ("Containers as launchers": the
/// ```json block whose server is `podman run`) is the command these tests run: its flags up
/// to `--` are [`LADDER`]'s, and the launch after it is `podman run -i --rm`.
#[test]
fn the_docs_container_snippet_is_the_command_tested() {
    let page = childguard_tests::stdio_peers::tests_dir().join("../docs/stdio-servers.md");
    let text = std::fs::read_to_string(&page).unwrap();
    let block = text
        .split("```json\n")
        .skip(1)
        .filter_map(|b| b.split_once("\n```").map(|(json, _)| json))
        .find(|json| json.contains("\"mcpServers\"") && json.contains("\"podman\""))
        .unwrap_or_else(|| panic!("no ```json block with podman in {}", page.display()));
    let config: serde_json::Value = serde_json::from_str(block).expect("the docs' JSON");
    let server = config["mcpServers"]
        .as_object()
        .and_then(|s| s.values().next())
        .expect("a server");
    assert_eq!(server["command"], "childguard", "{block}");
    let args: Vec<&str> = server["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string arg"))
        .collect();
    let end = args.iter().position(|a| *a == "--").expect("`--`");
    assert_eq!(
        args[..end],
        ["run", "--stdio-server", "--contain", "--ladder", LADDER],
        "{block}"
    );
    assert_eq!(
        args[end + 1..end + 5],
        ["podman", "run", "-i", "--rm"],
        "{block}"
    );
}
