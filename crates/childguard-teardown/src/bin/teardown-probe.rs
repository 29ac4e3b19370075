//! `teardown-probe`: the test fixture of `childguard-teardown` (used by `tests/helper.rs`).
//!
//! ```text
//! teardown-probe [--no-enable] [--twice] [--from-thread] [--alloc-mib N]
//! ```
//!
//! Calls `enable()` (unless `--no-enable`; a second time with `--twice`; on a short-lived thread
//! that has exited before going on with `--from-thread`), then maps N MiB and touches every
//! page, then prints one line
//!
//! ```text
//! READY pid=<pid> helper=<pid or 0> second=<pid or 0>
//! ```
//!
//! then answers each `is-alive` line on stdin with `ALIVE true` or `ALIVE false`
//! ([`Teardown::is_alive`]), and exits 0 at EOF on stdin. Errors go to stderr with exit status 1; usage errors exit 2.

#![deny(unsafe_code)]

use std::hint;
use std::io::{self, BufRead, Write};
use std::process;
use std::thread;

use childguard_teardown::{enable, Teardown};

#[derive(Debug, Default)]
struct Options {
    no_enable: bool,
    twice: bool,
    from_thread: bool,
    alloc_mib: usize,
}

fn main() {
    let options = parse().unwrap_or_else(|msg| {
        eprintln!("teardown-probe: {msg}");
        process::exit(2)
    });

    let (first, second) = if options.no_enable {
        (None, None)
    } else {
        let first = if options.from_thread {
            // The thread that made the helper is gone before we go on.
            thread::spawn(enable)
                .join()
                .unwrap_or_else(|_| fail("enable thread panicked"))
        } else {
            enable()
        };
        let first = first.unwrap_or_else(|e| fail(&e.to_string()));
        let second = options
            .twice
            .then(|| enable().unwrap_or_else(|e| fail(&e.to_string())));
        (Some(first), second)
    };

    let memory = touch(options.alloc_mib << 20);

    let pid_of = |t: Option<Teardown>| t.map_or(0, |t| t.helper_pid());
    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "READY pid={} helper={} second={}",
        process::id(),
        pid_of(first),
        pid_of(second)
    )
    .and_then(|()| out.flush());

    // Answer `is-alive` lines until EOF on stdin (or an error), keeping the memory.
    for line in io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "is-alive" {
            let alive = first.is_some_and(|t| t.is_alive());
            let _ = writeln!(out, "ALIVE {alive}").and_then(|()| out.flush());
        }
    }
    hint::black_box(&memory);
    process::exit(0)
}

/// `bytes` of heap, one write per 4 KiB page so all of it is resident.
fn touch(bytes: usize) -> Vec<u8> {
    let mut memory = vec![0u8; bytes];
    for byte in memory.iter_mut().step_by(4096) {
        *byte = 1;
    }
    hint::black_box(&mut memory);
    memory
}

fn parse() -> Result<Options, String> {
    let mut options = Options::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--no-enable" => options.no_enable = true,
            "--twice" => options.twice = true,
            "--from-thread" => options.from_thread = true,
            "--alloc-mib" => {
                let value = args.next().ok_or("--alloc-mib needs a value")?;
                options.alloc_mib = value
                    .parse()
                    .map_err(|e| format!("invalid value for --alloc-mib: '{value}': {e}"))?;
            }
            _ => return Err(format!("unknown argument '{arg}'")),
        }
    }
    Ok(options)
}

fn fail(msg: &str) -> ! {
    eprintln!("teardown-probe: {msg}");
    process::exit(1)
}
