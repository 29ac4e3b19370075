//! Issue 52 item 5: the close reports and timelines the docs show as output are the output of
//! the commands they name, checked. A doc marks such a block with a comment line
//!
//! ```text
//! <!-- output checked: tests/tests/doc_outputs.rs, NAME -->
//! ```
//!
//! right before its fenced block; the test NAME here runs the command the doc names and asserts
//! that what it printed has the block's shape: the same words in the same order — which rungs,
//! to whom, what each reached, what ended the close, what was left — with every number free
//! (pids, milliseconds, counts: times vary from run to run and are not checked) and `…`
//! standing for any text (a cgroup's path, a tool list). A block edited so that it no longer
//! says what the command prints fails here, and so does a command whose output changed shape.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use childguard_tests::init::descendants_of;
use childguard_tests::stdio_peers::{npx, tests_dir};
use childguard_tests::*;

/// The fenced block right after `<!-- output checked: tests/tests/doc_outputs.rs, NAME -->`
/// in `docs/DOC` (or the repository's `DOC`), without its fences.
fn doc_block(doc: &str, name: &str) -> String {
    let path = tests_dir().join("..").join(doc);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let marker = format!("<!-- output checked: tests/tests/doc_outputs.rs, {name} -->");
    let at = text
        .find(&marker)
        .unwrap_or_else(|| panic!("{doc} has no `{marker}`"));
    let mut lines = text[at + marker.len()..].lines().skip(1);
    let fence = lines.next().unwrap_or_default().trim_start();
    assert!(
        fence.starts_with("```"),
        "{doc}: `{marker}` is not followed by a fenced block but by {fence:?}"
    );
    let body: Vec<&str> = lines
        .take_while(|l| !l.trim_start().starts_with("```"))
        .collect();
    assert!(
        !body.is_empty(),
        "{doc}: the block after `{marker}` is empty"
    );
    body.join("\n")
}

/// Whitespace runs made one space, and every number (`12`, `2001.4`) made `#`.
fn normalized(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let spaced = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut it = spaced.chars().peekable();
    while let Some(c) = it.next() {
        if c.is_ascii_digit() {
            while it.peek().is_some_and(|d| d.is_ascii_digit()) {
                it.next();
            }
            // A decimal part: `.` followed by a digit (not a sentence's full stop).
            let mut rest = it.clone();
            if rest.next() == Some('.') && rest.peek().is_some_and(|d| d.is_ascii_digit()) {
                it.next();
                while it.peek().is_some_and(|d| d.is_ascii_digit()) {
                    it.next();
                }
            }
            out.push('#');
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `actual` has the shape of `template` (see the module's docs): after
/// [`normalized`], the pieces of the template between its `…` are found in `actual` in order,
/// the first at its start and the last at its end.
fn has_shape(template: &str, actual: &str) -> Result<(), String> {
    let template = normalized(template);
    let actual = normalized(actual);
    let pieces: Vec<&str> = template.split('…').collect();
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if pieces.len() == 1 {
        return match template == actual {
            true => Ok(()),
            false => Err(format!("expected\n  {template}\ngot\n  {actual}")),
        };
    }
    if !actual.starts_with(first) {
        return Err(format!(
            "does not begin with {first:?}\n  template: {template}\n  actual:   {actual}"
        ));
    }
    let mut at = first.len();
    for piece in &pieces[1..pieces.len() - 1] {
        match actual[at..].find(piece) {
            Some(i) => at += i + piece.len(),
            None => {
                return Err(format!(
                    "{piece:?} not found after {:?}\n  template: {template}\n  actual:   {actual}",
                    &actual[..at]
                ))
            }
        }
    }
    if actual.len() < at + last.len() || !actual.ends_with(last) {
        return Err(format!(
            "does not end with {last:?}\n  template: {template}\n  actual:   {actual}"
        ));
    }
    Ok(())
}

fn assert_shape(doc: &str, name: &str, actual: &str) {
    let block = doc_block(doc, name);
    if let Err(e) = has_shape(&block, actual) {
        panic!("{doc}, block {name}: the output has not the shape the doc shows: {e}");
    }
}

/// The lines childguard's CLI wrote about itself (`childguard: …`), without a server's own
/// stderr lines between them.
fn cli_lines(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.starts_with("childguard: "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A directory with `slowserver` in it (the fixture server under the name the docs use), for
/// the front of `PATH`.
fn slowserver_dir(name: &str) -> PathBuf {
    let dir = fresh_dir(name);
    std::os::unix::fs::symlink(bin("cg-slowserver"), dir.join("slowserver"))
        .expect("symlink slowserver");
    dir
}

fn with_path(cmd: &mut Command, dir: &Path) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    cmd.env("PATH", std::env::join_paths(dirs).unwrap());
}

/// docs/cli.md's `--report` examples: `childguard run --timeout 200ms --ladder
/// HUP:100ms,KILL:1s --report FORMAT [--no-skip-ignored] -- slowserver --ignore HUP
/// --ignore-eof`.
fn run_ignoring_hup(name: &str, extra: &[&str], format: &str) -> Output {
    let dir = slowserver_dir(name);
    let mut cmd = Command::new(bin("cg-childguard"));
    cmd.args(["run"])
        .args(extra)
        .args(["--timeout", "200ms", "--ladder", "HUP:100ms,KILL:1s"])
        .args(["--report", format, "--", "slowserver", "--ignore", "HUP"])
        .arg("--ignore-eof")
        .stdin(Stdio::null());
    with_path(&mut cmd, &dir);
    let out = cmd.output().expect("childguard run");
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The ignored HUP skipped, KILL at once, the timeout's note.
#[test]
fn cli_report_text() {
    let out = run_ignoring_hup("doc_cli_report_text", &[], "text");
    assert_shape("docs/cli.md", "cli_report_text", &cli_lines(&out.stderr));
}

/// With `--no-skip-ignored` the ignored HUP is sent and its grace spent before the KILL.
#[test]
fn cli_report_text_no_skip() {
    let out = run_ignoring_hup(
        "doc_cli_report_text_no_skip",
        &["--no-skip-ignored"],
        "text",
    );
    assert_shape(
        "docs/cli.md",
        "cli_report_text_no_skip",
        &cli_lines(&out.stderr),
    );
}

/// Where `shown` (the doc's JSON) and `actual` differ in shape: the same keys at every level,
/// arrays of the same length, the same strings, booleans and nulls; any number for a number.
fn json_difference(
    at: &str,
    shown: &serde_json::Value,
    actual: &serde_json::Value,
) -> Option<String> {
    use serde_json::Value;
    match (shown, actual) {
        (Value::Number(_), Value::Number(_)) => None,
        (Value::Object(a), Value::Object(b)) => {
            let keys_a: Vec<&String> = a.keys().collect();
            let keys_b: Vec<&String> = b.keys().collect();
            if keys_a != keys_b {
                let missing: Vec<_> = b.keys().filter(|k| !a.contains_key(*k)).collect();
                let extra: Vec<_> = a.keys().filter(|k| !b.contains_key(*k)).collect();
                return Some(format!(
                    "{at}: keys differ (not shown: {missing:?}; shown but not printed: {extra:?})"
                ));
            }
            a.iter()
                .find_map(|(k, v)| json_difference(&format!("{at}.{k}"), v, &b[k]))
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                return Some(format!(
                    "{at}: {} items shown, {} printed",
                    a.len(),
                    b.len()
                ));
            }
            a.iter()
                .zip(b)
                .enumerate()
                .find_map(|(i, (x, y))| json_difference(&format!("{at}[{i}]"), x, y))
        }
        (a, b) if a == b => None,
        (a, b) => Some(format!("{at}: shown {a}, printed {b}")),
    }
}

/// The same report as JSON: the doc's (expanded) object has the keys, the strings and the
/// nulls the CLI prints.
#[test]
fn cli_report_json() {
    let out = run_ignoring_hup("doc_cli_report_json", &[], "json");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let printed: serde_json::Value = stderr
        .lines()
        .find_map(|l| serde_json::from_str(l.trim_start_matches("childguard: ")).ok())
        .unwrap_or_else(|| panic!("no JSON report on stderr: {stderr}"));
    let block = doc_block("docs/cli.md", "cli_report_json");
    let shown: serde_json::Value = serde_json::from_str(&block)
        .unwrap_or_else(|e| panic!("docs/cli.md, block cli_report_json: not JSON: {e}"));
    if let Some(diff) = json_difference("report", &shown, &printed) {
        panic!("docs/cli.md, block cli_report_json: {diff}\nprinted: {printed}");
    }
}

/// `childguard demo`: the server closed mid-read by the default ladder's HUP, to its group.
#[test]
fn cli_demo() {
    let out = Command::new(bin("cg-childguard"))
        .arg("demo")
        .stdin(Stdio::null())
        .output()
        .expect("childguard demo");
    assert!(out.status.success(), "{out:?}");
    assert_shape(
        "docs/cli.md",
        "cli_demo",
        &String::from_utf8_lossy(&out.stdout),
    );
}

/// docs/stdio-servers.md, "no grace waited for a launcher gone": `childguard run --contain
/// --timeout 10s --report text -- npx --no-install mcp-server-everything`, the server up (it
/// answered an `initialize`) when the timeout fires. The HUP ends `npx`, is passed on to the
/// processes left in its cgroup, and ends them: no TERM, no KILL, nothing left.
#[test]
fn npx_launcher_gone() {
    let name = "doc_npx_launcher_gone";
    let Some(npx) = npx(name, "mcp-server-everything", &[]) else {
        return;
    };
    let mut cmd = Command::new(bin("cg-childguard"));
    cmd.args([
        "run",
        "--contain",
        "--timeout",
        "10s",
        "--report",
        "text",
        "--",
    ])
    .arg(npx.get_program())
    .args(npx.get_args())
    .current_dir(tests_dir())
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut run = cmd.spawn().expect("childguard run");
    let mut stdin = run.stdin.take().expect("stdin");
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"doc","version":"1"}}}}}}"#
    )
    .expect("write initialize");
    let mut stdout = BufReader::new(run.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read the answer");
    let tree = descendants_of(run.id());
    // Kept open (stdin and stdout) until childguard exits: the timeout ends it, not an EOF.
    let out = run.wait_with_output().expect("wait");
    drop((stdin, stdout));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        line.contains(r#""id":1"#),
        "no initialize answer before the 10 s timeout (npx too slow to start?): {line:?} {stderr}"
    );
    assert!(tree.len() >= 2, "npx launched no server: {tree:?}");
    assert_eq!(out.status.code(), Some(124), "{stderr}");
    assert_shape(
        "docs/stdio-servers.md",
        "npx_launcher_gone",
        &cli_lines(&out.stderr),
    );
    let left = left_after(&tree, Duration::from_secs(2));
    assert!(left.is_empty(), "left: {left:?} of {tree:?}: {stderr}");
}

/// docs/stdio-servers.md, the rmcp adapter's example (`crates/childguard-rmcp/examples/
/// mcp_client.rs`, built here from its own source as `cg-mcp-client-example`) run as the doc
/// says: `cd tests && … mcp_client -- npx --no-install mcp-server-everything`. The long call it
/// cancels keeps node running past the EOF; the close's TERM to the group ends the whole npx
/// tree, no KILL needed.
#[test]
fn mcp_client_example() {
    let name = "doc_mcp_client_example";
    let Some(npx) = npx(name, "mcp-server-everything", &[]) else {
        return;
    };
    let out = Command::new(bin("cg-mcp-client-example"))
        .arg(npx.get_program())
        .args(npx.get_args())
        .current_dir(tests_dir())
        .stdin(Stdio::null())
        .output()
        .expect("the example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_shape("docs/stdio-servers.md", "mcp_client_example", &stdout);
}

#[test]
fn the_shape_matcher_tells_shapes_apart() {
    let report = "npx[12]: HUP +0.2ms, exited +11.5ms (signal HUP, ended by rung 0 HUP), \
                  reaped +20.3ms, cgroup /sys/fs/cgroup/x emptied and removed; total 20.4ms";
    // Numbers free, `…` any text, line breaks and runs of spaces one space.
    has_shape(
        "npx[4170]: HUP +0.1ms, exited +3.8ms (signal HUP, ended by rung 0 HUP),\n  reaped \
         +6.7ms, cgroup … emptied and removed; total 6.7ms",
        report,
    )
    .unwrap();
    has_shape("…ended by rung 0 HUP…", report).unwrap();
    // Another rung, another ending, a missing step, a text beyond the template's end.
    for wrong in [
        "npx[1]: TERM +0.2ms, exited +1ms (signal HUP, ended by rung 0 HUP), …; total 1ms",
        "npx[1]: HUP +0.2ms, exited +1ms (signal KILL, ended by rung 0 HUP), …; total 1ms",
        "npx[1]: HUP +0.2ms, exited +1ms (signal HUP, ended by rung 0 HUP); total 1ms",
        "npx[1]: HUP",
        "… emptied and removed",
    ] {
        assert!(has_shape(wrong, report).is_err(), "{wrong} matched");
    }
    assert!(has_shape("a … b … c", "a c").is_err());
    assert!(
        has_shape("ab…ba", "aba").is_err(),
        "prefix and suffix overlap"
    );
    assert_eq!(normalized("v1.2 took  3.5ms.\n 4"), "v# took #ms. #");
}
