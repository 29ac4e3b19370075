//! The server's environment is the one the caller built — with `env_clear` or without — plus
//! exactly the variables its mode adds (`LISTEN_FDS`, `LISTEN_FDNAMES`, `LISTEN_PID` with
//! socket activation, `NOTIFY_SOCKET` with notify readiness, `WATCHDOG_USEC` and `WATCHDOG_PID`
//! with a watchdog), in every socket mode (issue 22).
//!
//! The "secret" is a variable of this test process (cargo sets several, `CARGO_PKG_NAME`
//! among them): after `env_clear` it must not reach the server, and without `env_clear` the
//! caller's `env_remove` of it must hold. No `set_var` in this multithreaded process: the
//! environment is only read. The server is `cg-env-dump`, which writes its environment to a
//! file before it accepts on fd 3 or sends `READY=1`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use childguard::{ChildHandle, Ready, SocketMode};
use childguard_tests::{bin, eventually, ladder, scratch};

type Env = BTreeMap<OsString, OsString>;

const GIVEN: &str = "CG_ENV_TEST_GIVEN";
const NAME: &str = "envtest";

/// A variable of this process that is not one the tests set or a mode adds: the secret.
fn secret() -> OsString {
    std::env::vars_os()
        .map(|(k, _)| k)
        .find(|k| {
            k != "PATH"
                && k != GIVEN
                && k != "NOTIFY_SOCKET"
                && !k.as_bytes().starts_with(b"LISTEN_")
        })
        .expect(
            "precondition: this test process has a variable besides PATH (cargo test sets \
             CARGO_PKG_NAME and others) to play the secret",
        )
}

/// The file's `KEY=VALUE\0` entries.
fn parse(bytes: &[u8]) -> Env {
    bytes
        .split(|&b| b == 0)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let at = e.iter().position(|&b| b == b'=').expect("KEY=VALUE");
            (
                OsString::from_vec(e[..at].to_vec()),
                OsString::from_vec(e[at + 1..].to_vec()),
            )
        })
        .collect()
}

/// The dump, waiting for it (it appears whole, by a rename) when the spawn did not.
fn dump(file: &Path) -> Env {
    assert!(
        eventually(Duration::from_secs(60), || file.exists()),
        "cg-env-dump wrote no {} within 60 s",
        file.display()
    );
    parse(&std::fs::read(file).expect("reading the dump"))
}

fn names(env: &Env) -> Vec<String> {
    env.keys()
        .map(|k| k.to_string_lossy().into_owned())
        .collect()
}

/// Spawns cg-env-dump in `mode` (notify readiness or not), its Command cleared or not, and
/// asserts the environment it got.
fn check(mode: &SocketMode, notify: bool, watchdog: bool, clear: bool) {
    let what = format!("{mode:?}, notify {notify}, watchdog {watchdog}, env_clear {clear}");
    let file = scratch("env-dump");
    let secret = secret();
    let mut cmd = Command::new(bin("cg-env-dump"));
    cmd.arg(&file);
    if notify {
        cmd.arg("--notify");
    }
    let mut expected: Env = if clear {
        cmd.env_clear().env("PATH", "/usr/bin:/bin");
        Env::from([("PATH".into(), "/usr/bin:/bin".into())])
    } else {
        cmd.env_remove(&secret);
        let mut ours: Env = std::env::vars_os().collect();
        ours.remove(&secret);
        ours
    };
    cmd.env(GIVEN, "given");
    expected.insert(GIVEN.into(), "given".into());
    let mut builder = ChildHandle::builder(cmd)
        .socket(mode.clone())
        .ladder(ladder("TERM:10s,KILL:10s"));
    if notify {
        builder = builder.ready(Ready::Notify);
    }
    if watchdog {
        // Far away: never missed here. An inherited WATCHDOG_PID must not pass.
        builder = builder.watchdog(std::time::Duration::from_secs(600));
        expected.remove(std::ffi::OsStr::new("WATCHDOG_PID"));
    }
    let handle = builder.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = dump(&file);
    if watchdog {
        // As systemd sets them: the interval, and the server's own pid (written by the child
        // between fork and exec: with activation beside LISTEN_PID).
        let pid = handle.id().expect("pid").to_string();
        expected.insert("WATCHDOG_USEC".into(), "600000000".into());
        expected.insert("WATCHDOG_PID".into(), pid.into());
    }
    if let SocketMode::Activation { .. } = mode {
        expected.retain(|k, _| !k.as_bytes().starts_with(b"LISTEN_"));
        let pid = handle.id().expect("pid").to_string();
        for (k, v) in [
            ("LISTEN_FDS", "1"),
            ("LISTEN_FDNAMES", NAME),
            ("LISTEN_PID", &pid),
        ] {
            expected.insert(k.into(), v.into());
        }
    }
    if notify {
        let path = got
            .get(std::ffi::OsStr::new("NOTIFY_SOCKET"))
            .unwrap_or_else(|| panic!("{what}: no NOTIFY_SOCKET in {:?}", names(&got)));
        assert!(
            Path::new(path).is_absolute(),
            "{what}: NOTIFY_SOCKET {path:?}"
        );
        expected.insert("NOTIFY_SOCKET".into(), path.clone());
    }
    assert!(
        !got.contains_key(&secret),
        "{what}: the secret {secret:?} reached the server; it got {:?}",
        names(&got)
    );
    assert_eq!(
        names(&got),
        names(&expected),
        "{what}: the server's variables (left) are not the caller's plus the mode's (right)"
    );
    assert_eq!(got, expected, "{what}: the values differ");
    let report = handle
        .close()
        .unwrap_or_else(|e| panic!("{what}: close: {e}"));
    assert!(report.reaped.is_some(), "{what}: {report}");
    for f in [
        file.clone(),
        PathBuf::from(format!("{}.argv", file.display())),
    ] {
        let _ = std::fs::remove_file(f);
    }
}

fn every_case(mode: SocketMode) {
    for (notify, watchdog) in [(false, false), (true, false), (true, true)] {
        for clear in [true, false] {
            check(&mode, notify, watchdog, clear);
        }
    }
}

#[test]
fn without_a_socket_the_server_gets_the_callers_environment() {
    every_case(SocketMode::None);
}

#[test]
fn over_a_socketpair_the_server_gets_the_callers_environment() {
    every_case(SocketMode::Stdio);
}

#[test]
fn socket_activated_the_server_gets_the_callers_environment_plus_listen_vars() {
    every_case(SocketMode::Activation {
        name: Some(NAME.into()),
    });
}

/// `arg0` reaches a socket-activated server as its argv[0], as it would from std.
#[test]
fn socket_activated_the_server_gets_the_callers_arg0() {
    let file = scratch("env-dump-arg0");
    let mut cmd = Command::new(bin("cg-env-dump"));
    cmd.arg0("cg-renamed").arg(&file);
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Activation { name: None })
        .ladder(ladder("TERM:10s,KILL:10s"))
        .spawn()
        .expect("spawning cg-env-dump activated");
    dump(&file);
    let argv = std::fs::read(format!("{}.argv", file.display())).expect("the argv file");
    let argv: Vec<String> = argv
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(
        argv,
        ["cg-renamed".to_string(), file.display().to_string()],
        "argv the server got"
    );
    let report = handle.close().expect("close");
    assert!(report.reaped.is_some(), "{report}");
}

/// `childguard run --activate` (the CLI has no environment options of its own): CMD gets
/// exactly the CLI's environment plus `LISTEN_*`.
#[test]
fn cli_activate_passes_its_own_environment_plus_listen_vars() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let file = scratch("env-dump-cli");
    let mut cli = Command::new(bin("cg-childguard"));
    cli.args([
        "run",
        "--activate=cli",
        "--stop-on-stdin-eof",
        "--ladder",
        "TERM:10s,KILL:10s",
        "--",
    ])
    .arg(bin("cg-env-dump"))
    .arg(&file)
    .env(GIVEN, "given")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped());
    let mut child = cli.spawn().expect("spawning cg-childguard");
    // The path is printed once the spawn returned: after the accept, so after the dump.
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .expect("the socket path line");
    assert!(Path::new(line.trim_end()).is_absolute(), "{line:?}");
    let mut got = dump(&file);
    drop(child.stdin.take()); // EOF on its stdin: the ladder
    let status = child.wait().expect("waiting for cg-childguard");
    assert!(status.code().is_some(), "cg-childguard: {status}");
    let pid = got
        .remove(std::ffi::OsStr::new("LISTEN_PID"))
        .expect("LISTEN_PID");
    assert!(
        pid.to_str().and_then(|p| p.parse::<u32>().ok()).is_some(),
        "LISTEN_PID {pid:?}"
    );
    let mut expected: Env = std::env::vars_os()
        .filter(|(k, _)| !k.as_bytes().starts_with(b"LISTEN_"))
        .collect();
    expected.insert(GIVEN.into(), "given".into());
    expected.insert("LISTEN_FDS".into(), "1".into());
    expected.insert("LISTEN_FDNAMES".into(), "cli".into());
    assert_eq!(
        names(&got),
        names(&expected),
        "the server's (left), the CLI's (right)"
    );
    assert_eq!(got, expected);
    for f in [
        file.clone(),
        PathBuf::from(format!("{}.argv", file.display())),
    ] {
        let _ = std::fs::remove_file(f);
    }
}
