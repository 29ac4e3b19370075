//! A stdio host of the suite's own (issue 50, test bed (b): `tests/runc_contain.rs`), for a
//! container whose rootfs has no Python: it spawns its argv as an MCP host spawns a stdio
//! server — stdin and stdout piped, stderr inherited — proves the channel works, and then
//! closes the session as a host does, or hangs until the test `SIGKILL`s it. std only, so
//! that it builds as a small static binary (`-C target-feature=+crt-static`, as
//! crates/childguard-cli/install.sh builds the CLI).
//!
//! Usage: `cg-stdio-host MODE -- PROGRAM [ARGS…]`, MODE `close` or `hang`. On its stdout, one
//! line each, flushed:
//!
//! - `CHILD <pid>`: PROGRAM spawned (its pid, as this process sees it);
//! - `ECHO <line>`: the line written to PROGRAM's stdin came back on its stdout;
//! - `READY`: the session is up.
//!
//! Then `close`: waits for a line (or EOF) on its own stdin — the test's cue — then closes
//! PROGRAM's stdin, waits for PROGRAM to exit and prints `EXITED <code|signal:N> <ms>` (the
//! time from the close to PROGRAM's exit) and exits 0. `hang`: sleeps until it is killed.
//!
//! Anything that goes wrong prints `FAILED <why>` and exits 1; bad usage exits 2. A watchdog
//! exits 3 after 300 s, so that nothing waits on it for ever.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// A line on stdout, flushed at once (the test reads them as they come).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn fail(why: &str) -> ExitCode {
    say(&format!("FAILED {why}"));
    ExitCode::from(1)
}

fn main() -> ExitCode {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(300));
        say("WATCHDOG");
        std::process::exit(3);
    });
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, program) = match args.as_slice() {
        [mode, dashes, program @ ..]
            if (mode == "close" || mode == "hang") && dashes == "--" && !program.is_empty() =>
        {
            (mode.as_str(), program)
        }
        _ => {
            eprintln!("usage: cg-stdio-host close|hang -- PROGRAM [ARGS...]");
            return ExitCode::from(2);
        }
    };
    let mut child = match Command::new(&program[0])
        .args(&program[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return fail(&format!("spawning {}: {e}", program[0])),
    };
    say(&format!("CHILD {}", child.id()));
    let mut to = child.stdin.take().expect("piped stdin");
    let mut from = BufReader::new(child.stdout.take().expect("piped stdout"));
    let ping = format!("ping from cg-stdio-host {}", std::process::id());
    if let Err(e) = writeln!(to, "{ping}").and_then(|()| to.flush()) {
        return fail(&format!("writing to the server: {e}"));
    }
    let mut echo = String::new();
    match from.read_line(&mut echo) {
        Ok(0) => return fail("the server closed its stdout before answering"),
        Ok(_) if echo.trim_end() == ping => say(&format!("ECHO {}", echo.trim_end())),
        Ok(_) => return fail(&format!("the server answered {echo:?}, not {ping:?}")),
        Err(e) => return fail(&format!("reading the server: {e}")),
    }
    say("READY");
    if mode == "hang" {
        // Held open, as a host mid-session holds them.
        let _session = (to, from);
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    // The cue: a line, or EOF.
    let mut cue = String::new();
    let _ = std::io::stdin().lock().read_line(&mut cue);
    let closed = Instant::now();
    drop(to);
    let status = match child.wait() {
        Ok(status) => status,
        Err(e) => return fail(&format!("waiting for the server: {e}")),
    };
    let took = closed.elapsed();
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => format!("signal:{signal}"),
        (None, None) => format!("{status}"),
    };
    say(&format!("EXITED {how} {:.1}", took.as_secs_f64() * 1e3));
    drop(from);
    ExitCode::SUCCESS
}
