//! The C API as a C user meets it (issue 16): the library built by cargo, installed by
//! `crates/childguard-ffi/install.sh`, found by `pkg-config --cflags --libs childguard`; each C
//! test in `crates/childguard-ffi/tests/c/` and the example in `examples/c/` compiled with `cc`
//! and run against slowserver (nbdkit for the example), plainly and under valgrind (0 errors,
//! nothing definitely or indirectly lost).
//!
//! Under valgrind 3.19 `pidfd_open` is an unknown system call (ENOSYS), so those runs also
//! cover the portable `kill` + `SIGCHLD` mechanism. Processes forked by the spawn path are
//! silenced (`--child-silent-after-fork`): a forked copy holds the other threads' memory with
//! no thread to own it, which is not a leak of this process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use childguard_tests::bin;
use childguard_tests::postgres::find_peer;

/// The installed library and the compiled C programs.
struct Built {
    prefix: PathBuf,
    programs: PathBuf,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn need(tool: &str, install: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "the C API tests need {tool}: install it with `{install}` (or run tests/run.sh)"
    );
}

fn check(what: &str, output: &Output) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Builds libchildguard with cargo (the target dir and profile this test runs from), installs
/// it into `target/<profile>/childguard-ffi-c` with install.sh, and compiles every C program against it with the
/// flags pkg-config gives. Once per test process.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        need("cc", "apt-get install gcc");
        need("pkg-config", "apt-get install pkg-config");
        // target/<profile>/deps/ffi-<hash>
        let exe = std::env::current_exe().expect("current_exe");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let target_dir = profile_dir.parent().expect("target dir");
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "-q", "-p", "childguard-ffi", "--target-dir"]);
        cargo.arg(target_dir).current_dir(workspace());
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                cargo.arg("--release");
            }
            Some(other) => {
                cargo.args(["--profile", other]);
            }
            None => panic!("no profile in {}", profile_dir.display()),
        }
        check(
            "cargo build -p childguard-ffi",
            &cargo.output().expect("running cargo"),
        );

        // Under the target dir, made afresh each run: the static library alone is ~65 MB, too
        // much to leave in /tmp on every run.
        let prefix = profile_dir.join("childguard-ffi-c");
        if prefix.exists() {
            std::fs::remove_dir_all(&prefix).expect("removing the last run's prefix");
        }
        let install = Command::new("bash")
            .arg(workspace().join("crates/childguard-ffi/install.sh"))
            .arg(&prefix)
            .env("CHILDGUARD_LIB_DIR", profile_dir)
            .output()
            .expect("running install.sh");
        check("install.sh", &install);

        let pkg_config = Command::new("pkg-config")
            .args(["--cflags", "--libs", "childguard"])
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
            .output()
            .expect("running pkg-config");
        check("pkg-config --cflags --libs childguard", &pkg_config);
        let flags = String::from_utf8(pkg_config.stdout).expect("pkg-config output");

        let programs = prefix.join("bin");
        std::fs::create_dir_all(&programs).expect("bin dir");
        let ffi = workspace().join("crates/childguard-ffi");
        let mut sources: Vec<PathBuf> = Vec::new();
        for dir in ["tests/c", "examples/c"] {
            for entry in std::fs::read_dir(ffi.join(dir)).expect("C sources") {
                let path = entry.expect("dir entry").path();
                if path.extension().is_some_and(|e| e == "c") {
                    sources.push(path);
                }
            }
        }
        for source in &sources {
            let name = source.file_stem().expect("file name");
            let compile = Command::new("cc")
                .args([
                    "-std=c11",
                    "-D_GNU_SOURCE",
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-g",
                    "-o",
                ])
                .arg(programs.join(name))
                .arg(source)
                .args(flags.split_whitespace())
                .output()
                .expect("running cc");
            check(&format!("cc {}", source.display()), &compile);
        }
        Built { prefix, programs }
    })
}

fn program(built: &Built, name: &str) -> Command {
    let mut cmd = Command::new(built.programs.join(name));
    cmd.env("LD_LIBRARY_PATH", built.prefix.join("lib"));
    cmd
}

/// Runs the program plainly; returns its stdout.
fn run_plain(name: &str, args: &[&Path]) -> String {
    let built = built();
    let output = program(built, name).args(args).output().expect("running");
    check(name, &output);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The bytes of one `LEAK SUMMARY` line of valgrind's log (`definitely lost: 0 bytes in 0
/// blocks`), 0 when the log says every block was freed.
fn lost(log: &str, kind: &str) -> u64 {
    if log.contains("All heap blocks were freed") {
        return 0;
    }
    let line = log
        .lines()
        .find(|l| l.contains(&format!("{kind}:")))
        .unwrap_or_else(|| panic!("no '{kind}' in valgrind's log:\n{log}"));
    let after = line.split(&format!("{kind}:")).nth(1).expect("figure");
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("cannot read '{line}'"))
}

/// Runs the program under valgrind's leak check; asserts it passed with 0 errors and nothing
/// definitely or indirectly lost, and prints the figures.
fn run_valgrind(name: &str, args: &[&Path]) {
    need("valgrind", "apt-get install valgrind");
    let built = built();
    let log_file = built.prefix.join(format!("{name}.valgrind.log"));
    let mut valgrind = Command::new("valgrind");
    valgrind
        .args([
            "--leak-check=full",
            "--error-exitcode=99",
            "--errors-for-leak-kinds=definite,indirect",
            "--child-silent-after-fork=yes",
        ])
        .arg(format!("--log-file={}", log_file.display()))
        .arg(built.programs.join(name))
        .args(args)
        .env("LD_LIBRARY_PATH", built.prefix.join("lib"));
    let output = valgrind.output().expect("running valgrind");
    let log = std::fs::read_to_string(&log_file).unwrap_or_default();
    let summary = log
        .lines()
        .find(|l| l.contains("ERROR SUMMARY"))
        .unwrap_or_else(|| panic!("no ERROR SUMMARY in valgrind's log:\n{log}"))
        .to_string();
    let (definite, indirect) = (lost(&log, "definitely lost"), lost(&log, "indirectly lost"));
    eprintln!(
        "valgrind {name}: {}; definitely lost {definite} bytes, indirectly lost {indirect} bytes",
        summary.split("ERROR SUMMARY: ").nth(1).unwrap_or(&summary)
    );
    assert!(
        output.status.success() && summary.contains("ERROR SUMMARY: 0 errors"),
        "{name} under valgrind: {} ({summary}):\nstderr:\n{}\nvalgrind log:\n{log}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        (definite, indirect),
        (0, 0),
        "{name} leaked under valgrind:\n{log}"
    );
}

/// A C test against slowserver: plainly, then under valgrind.
fn c_test(name: &str) -> String {
    let server = bin("cg-slowserver");
    let out = run_plain(name, &[&server]);
    run_valgrind(name, &[&server]);
    out
}

#[test]
fn c_stuck_read_is_closed_within_the_ladder() {
    let out = c_test("stuck_read");
    assert!(out.contains("ended by rung 0 HUP"), "{out}");
}

/// `cg_builder_new_stdio_server` (issue 52 item 2): the stdio-server defaults every face
/// shares — gone with a SIGKILLed host, stderr passed through and kept, the MCP close's EOF.
#[test]
fn c_stdio_server_defaults() {
    let out = run_plain("stdio_server", &[]);
    for line in [
        "host SIGKILLed: its server gone",
        "passthrough: on our stderr and in the tail",
        "passthrough off: in the tail only",
        "cg_builder_passthrough: builder is NULL",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    run_valgrind("stdio_server", &[]);
}

#[test]
fn c_term_ignored_climbs_to_the_kill_rung() {
    let out = c_test("term_ignored");
    assert!(out.contains("ended by rung 2 KILL"), "{out}");
}

#[test]
fn c_bad_ladder_is_an_error_naming_the_input() {
    let out = c_test("bad_ladder");
    assert!(out.contains("\"HUP:1s,TREM:2s\""), "{out}");
}

#[test]
fn c_missing_program_is_a_spawn_error() {
    let out = c_test("missing_program");
    assert!(out.contains("/nonexistent/cg-no-such-program"), "{out}");
}

#[test]
fn c_no_fd_left_after_close() {
    let out = c_test("no_fd_left");
    assert!(out.contains("fds open:"), "{out}");
}

#[test]
fn c_example_nbd_connect_command() {
    let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("nbdkit"))
                .collect()
        })
        .unwrap_or_default();
    candidates.push("/usr/sbin/nbdkit".into());
    let Some(nbdkit) = find_peer(
        "c_example_nbd_connect_command",
        "nbdkit",
        candidates,
        "apt-get install nbdkit",
    ) else {
        return;
    };
    let out = run_plain("nbd_connect_command", &[&nbdkit]);
    assert!(out.contains("greeted: NBDMAGIC IHAVEOPT"), "{out}");
    assert!(
        out.contains("\"ended_by\":{\"kind\":"),
        "no JSON report: {out}"
    );
    run_valgrind("nbd_connect_command", &[&nbdkit]);
}

/// `cg_builder_env_clear`: a secret of the C process reaches the server in no mode (issue 22).
#[test]
fn c_env_clear_keeps_our_environment_from_the_server() {
    let server = bin("cg-env-dump");
    let out = run_plain("env_clear", &[&server]);
    for line in [
        "activation 1, env_clear 1: 5 variables, as built",
        "activation 0, env_clear 1: 3 variables, as built",
        "activation 1, env_clear 0:",
        "activation 0, env_clear 0:",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    run_valgrind("env_clear", &[&server]);
}

#[test]
fn c_ready_notify_then_detach() {
    let out = c_test("ready_detach");
    assert!(out.contains("exited during start-up"), "{out}");
}

#[test]
fn c_try_wait_and_wait_timeout_give_the_wait_status() {
    let out = c_test("wait_status");
    assert!(out.contains("try_wait: exited, WEXITSTATUS 3"), "{out}");
    assert!(out.contains("wait_timeout: timed out after"), "{out}");
    assert!(
        out.contains("wait_timeout: sh exited, WEXITSTATUS 7"),
        "{out}"
    );
    assert!(out.contains("wait_timeout: sh killed, WTERMSIG 9"), "{out}");
    assert!(out.contains("cg_try_wait: handle is NULL"), "{out}");
}

#[test]
fn c_contained_daemon_is_gone_after_close() {
    let out = c_test("contain");
    assert!(out.contains("mixed: daemon gone"), "{out}");
    assert!(
        out.contains("control-group: daemon gone, HUP to the cgroup reached 2\n"),
        "{out}"
    );
    assert!(
        out.contains("cgroup_parent: made under the given parent"),
        "{out}"
    );
}

#[test]
fn c_capture_tail_and_parent_death_signal() {
    let out = c_test("setters");
    assert!(
        out.contains("parent_death_signal: the orphan got TERM"),
        "{out}"
    );
    assert!(out.contains("capture_tail: 3 lines kept"), "{out}");
    assert!(out.contains("signo 12345 is not a signal number"), "{out}");
}

/// Issue 21: a C host keeps `SIGPIPE` at its default; its guardian is `SIGKILL`ed by hand;
/// `cg_close` must succeed, not kill the host (the old `/bin/sh` guardian's dismissal wrote
/// to a pipe whose reader was dead: exit 141). The next spawn gets a new guardian.
#[test]
fn c_close_after_the_guardian_was_killed_does_not_crash_a_host_with_default_sigpipe() {
    let out = c_test("guardian_gone");
    assert!(out.contains("guardian killed by hand"), "{out}");
    assert!(
        out.contains("close after the guardian died: closed, cgroup removed, unguarded noted"),
        "{out}"
    );
    assert!(
        out.contains("second close: closed, cgroup removed"),
        "{out}"
    );
}

#[test]
fn c_cancel_interrupts_spawn_wait_and_close() {
    let out = c_test("cancel");
    assert!(out.contains("spawn: cg_spawn: interrupted"), "{out}");
    assert!(out.contains("spawn: server gone"), "{out}");
    assert!(
        out.contains("wait: cg_wait_timeout_cancel: interrupted"),
        "{out}"
    );
    assert!(out.contains("server still running"), "{out}");
    assert!(out.contains("close: cg_close_cancel: interrupted"), "{out}");
    assert!(out.contains("close: server gone"), "{out}");
}

#[test]
fn c_ready_http_and_exec() {
    let server = bin("cg-slowserver");
    let script = workspace().join("tests/src/http_server.py");
    let out = run_plain("ready_http_exec", &[&server, &script]);
    for line in [
        "http 200: ready",
        "http status 503: ready",
        "exec: ready",
        "bad input refused",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    assert!(
        out.contains("http 503: ") && out.contains("503 Chosen"),
        "{out}"
    );
    assert!(out.contains("c-probe-said-9"), "{out}");
    run_valgrind("ready_http_exec", &[&server, &script]);
}

/// Issue 23 item 4: `cg_reload` and `cg_builder_watchdog`.
#[test]
fn c_reload_and_watchdog() {
    let out = c_test("reload_watchdog");
    assert!(out.contains("reload: done"), "{out}");
    assert!(
        out.contains("reload never: ") && out.contains("no READY=1 after RELOADING=1"),
        "{out}"
    );
    assert!(out.contains("watchdog: missed"), "{out}");
}

#[test]
fn c_limits_name_the_oom_kill() {
    let _serial = childguard_tests::cgroups::serial();
    let out = c_test("limits");
    assert!(
        out.contains("hog: oom-kill, peak under 64M, cgroup removed"),
        "{out}"
    );
    assert!(out.contains("no containment: "), "{out}");
    assert!(out.contains("TasksMax=10"), "{out}");
}

#[test]
fn c_supervisor_restarts_and_gives_up() {
    let out = c_test("supervisor");
    assert!(out.contains("restarted once, closed"), "{out}");
    assert!(
        out.contains("crash loop: ") && out.contains("exit 7"),
        "{out}"
    );
    assert!(
        out.contains("bad policy: ") && out.contains("policy 9"),
        "{out}"
    );
}
