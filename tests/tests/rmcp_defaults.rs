//! Issue 52 item 2: the rmcp adapter's defaults match what rmcp's `TokioChildProcess` users
//! come from — the server's stderr passed on to ours line by line (and kept in the tail), a
//! start-up failure's error naming the server's last stderr lines, a `tokio::process::Command`
//! taken as well as std's, `exit_with_parent` on.
//!
//! The failing server is `npx --offline --no-install childguard-no-such-mcp-server`: a package
//! that exists nowhere, asked of npm without the network, so npm always fails the same way
//! (`npm error code ENOTCACHED`, then the request it could not make) and exits 1 before
//! answering `initialize`. Online and without `--offline` the same run prints npm's
//! `npm error code E404` (see docs/stdio-servers.md).

use std::process::{Command, Stdio};
use std::time::Duration;

use childguard::Ending;
use childguard_rmcp::ChildTransport;
use childguard_tests::stdio_peers::{program, tests_dir};
use childguard_tests::*;

const NO_SUCH_SERVER: &str = "childguard-no-such-mcp-server";

/// Far above any wait here (an `npx` start on a loaded machine included).
const GENEROUS: Duration = Duration::from_secs(60);

/// `npx --offline --no-install NO_SUCH_SERVER`, run in `tests/`, as a tokio `Command`.
fn failing_npx(test: &str) -> Option<tokio::process::Command> {
    program(test, "npx", "npm")?;
    let mut cmd = tokio::process::Command::new("npx");
    cmd.args(["--offline", "--no-install", NO_SUCH_SERVER])
        .current_dir(tests_dir());
    Some(cmd)
}

/// npm's own line saying why: `npm error code ENOTCACHED` (npm >= 10; `npm ERR! code …`
/// before).
fn names_npms_error(text: &str) -> bool {
    text.lines()
        .any(|l| l.contains("npm") && l.contains("code ENOTCACHED"))
}

/// In-process: `ChildTransport::spawn(tokio::process::Command)` then `serve(())`. rmcp alone
/// says `connection closed: initialize response`; the `StartError` says how npx ended and
/// shows npm's lines, which the close report's tail also keeps.
#[test]
fn a_server_that_fails_to_start_is_named_in_its_own_words() {
    let name = "a_server_that_fails_to_start_is_named_in_its_own_words";
    let Some(cmd) = failing_npx(name) else {
        return;
    };
    multi_thread_runtime().block_on(async {
        let transport = ChildTransport::spawn(cmd).expect("npx starts");
        let started = tokio::time::timeout(GENEROUS, transport.serve(()))
            .await
            .expect("serve returns within 60 s");
        let err = started.expect_err("no such server: the start fails");
        let text = err.to_string();
        eprintln!("{text}");
        assert!(
            matches!(
                err.error(),
                rmcp::service::ClientInitializeError::ConnectionClosed(_)
            ),
            "{text}"
        );
        assert!(text.contains("initialize response"), "{text}");
        assert!(names_npms_error(&text), "npm's error line missing: {text}");
        assert!(text.contains(NO_SUCH_SERVER), "{text}");
        assert!(text.contains("`npx` (pid "), "{text}");
        let report = err.report().expect("the close report");
        // npx exited 1 by itself: before the close, or at its EOF (whichever came first).
        assert!(
            matches!(report.ended_by, Ending::BeforeClose | Ending::Eof),
            "{report}"
        );
        assert_eq!(report.status.and_then(|s| s.code()), Some(1), "{report}");
        assert!(report.signals.is_empty(), "{report}");
        let tail = report.output_tail.as_deref().unwrap_or_default();
        assert!(names_npms_error(tail), "tail: {tail:?}");
        assert!(
            err.stderr_lines().iter().any(|l| names_npms_error(l)),
            "{:?}",
            err.stderr_lines()
        );
    });
}

/// As a user's program (`cg-rmcp-client start`, a `#[tokio::main]`-like client): npm's lines
/// reach the program's stderr as npm writes them (`[npx PID] npm error code ENOTCACHED`, the
/// passthrough, as `TokioChildProcess` lets them through), and its error, printed on stdout,
/// names them too.
#[test]
fn a_failed_start_shows_npms_error_on_our_stderr_and_in_the_error() {
    let name = "a_failed_start_shows_npms_error_on_our_stderr_and_in_the_error";
    if program(name, "npx", "npm").is_none() {
        return;
    }
    let out = Command::new(bin("cg-rmcp-client"))
        .args(["start", "npx", "--offline", "--no-install", NO_SUCH_SERVER])
        .current_dir(tests_dir())
        .stdin(Stdio::null())
        .output()
        .expect("run cg-rmcp-client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let error = stdout
        .lines()
        .position(|l| l.starts_with("error: "))
        .map(|i| stdout.lines().skip(i).collect::<Vec<_>>().join("\n"))
        .unwrap_or_else(|| panic!("no error printed: {stdout}"));
    assert!(
        error.contains("connection closed: initialize response"),
        "{error}"
    );
    assert!(names_npms_error(&error), "{error}");
    // The passthrough: each line with the server's name and pid in front.
    let passed = stderr
        .lines()
        .filter(|l| l.starts_with("[npx ") && names_npms_error(l))
        .count();
    assert_eq!(passed, 1, "npm's line passed through once: {stderr}");
}
