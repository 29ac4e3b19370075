//! A CMD for the Ctrl-C tests (issue 22, item 6): counts every `SIGINT` delivered to it.
//!
//! Usage: `cg-int-counter OUT [--expect N] [--settle MS] [--tag TAG]`
//!
//! Prints `TAG-ready` (TAG: `int-counter`) on stdout once its handlers are in place (so a test
//! sends its `^C` only after that), and `TAG-got N INT` after the N-th `SIGINT` (the cue for
//! the next `^C`). After the N-th of `--expect` (default 1) it waits `--settle` (default 1000)
//! ms more, so that a copy sent a little later (the double delivery these tests are about) is
//! counted too, then writes OUT and exits 0. A `SIGHUP` or `SIGTERM` (its ladder, when it is
//! run as a server) writes OUT and exits 0 at once; nothing at all within 120 s writes OUT
//! with a last line `no signal` and exits 3, so that no test can hang on it.
//!
//! OUT has one line per signal handled, in order: `INT kernel` for a signal the kernel sent
//! (`SI_KERNEL`: what a terminal's `^C` is), `INT user` for one sent with kill(2)
//! (`SI_USER`), else `INT code=N`; likewise `HUP …`, `TERM …`.
//!
//! Each delivery is counted: signal-hook's raw-siginfo exfiltrator queues every handler
//! invocation (up to 5 per signal unread), unlike its plain iterator, which merges the
//! signals that arrive between two reads. (The kernel itself still merges a second `SIGINT`
//! that arrives while the first is pending, before the handler ran.)

#![deny(unsafe_code)]

use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithRawSiginfo;
use signal_hook::iterator::SignalsInfo;

/// `SI_KERNEL` (Linux); `SI_USER` is 0 everywhere.
const SI_KERNEL: i32 = 0x80;

/// One handled signal: its number and `si_code`.
fn describe((signo, code): (i32, i32)) -> String {
    let name = match signo {
        SIGINT => "INT",
        SIGHUP => "HUP",
        SIGTERM => "TERM",
        _ => "OTHER",
    };
    let cause = match code {
        SI_KERNEL => "kernel".to_string(),
        0 => "user".to_string(),
        code => format!("code={code}"),
    };
    format!("{name} {cause}")
}

fn finish(out: &str, lines: &[String], code: i32) -> ! {
    let mut text = String::new();
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    // Written whole, then renamed: a reader never sees half of it.
    let tmp = format!("{out}.tmp");
    std::fs::write(&tmp, text).expect("writing OUT");
    std::fs::rename(&tmp, out).expect("renaming OUT");
    std::process::exit(code);
}

/// The next signal, or `Err` at `deadline`. While `spin` (a `^C` is awaited) it first spins
/// for up to 2 s, so that the main thread is on a CPU when the signal comes: the kernel then
/// runs the handler at once (a running thread is kicked), which takes the signal out of the
/// pending set — a second copy sent a moment later (the bug) is delivered too instead of being
/// merged into the first. Blocked in a wait, the thread must first be scheduled, and a copy
/// sent meanwhile merges: the old double delivery then hid in about 1 of 3 presses.
fn next(
    rx: &mpsc::Receiver<(i32, i32)>,
    deadline: Instant,
    spin: bool,
) -> Result<(i32, i32), mpsc::RecvTimeoutError> {
    if spin {
        let until = deadline.min(Instant::now() + Duration::from_secs(2));
        while Instant::now() < until {
            match rx.try_recv() {
                Ok(info) => return Ok(info),
                Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(mpsc::RecvTimeoutError::Disconnected)
                }
            }
        }
    }
    rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = || -> ! {
        eprintln!("usage: cg-int-counter OUT [--expect N] [--settle MS] [--tag TAG]");
        std::process::exit(2);
    };
    let Some(out) = args.next() else { usage() };
    let (mut expect, mut settle_ms, mut tag) = (1usize, 1000u64, "int-counter".to_string());
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--expect" => expect = value.parse().unwrap_or_else(|_| usage()),
            "--settle" => settle_ms = value.parse().unwrap_or_else(|_| usage()),
            "--tag" => tag = value,
            _ => usage(),
        }
    }
    let settle = Duration::from_millis(settle_ms);
    let mut signals =
        SignalsInfo::<WithRawSiginfo>::new([SIGINT, SIGHUP, SIGTERM]).expect("signal handlers");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for info in signals.forever() {
            // (siginfo_t is not Send: its union holds pointers.)
            if tx.send((info.si_signo, info.si_code)).is_err() {
                return;
            }
        }
    });
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{tag}-ready");
    let _ = stdout.flush();

    let mut lines = Vec::new();
    let mut deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let awaiting = lines.len() < expect;
        match next(&rx, deadline, awaiting) {
            Ok(info) => {
                lines.push(describe(info));
                if info.0 != SIGINT {
                    finish(&out, &lines, 0);
                }
                let ints = lines.iter().filter(|l| l.starts_with("INT")).count();
                let _ = writeln!(stdout, "{tag}-got {ints} INT");
                let _ = stdout.flush();
                // The EXPECT-th INT starts the settle; later ones are only counted.
                if ints == expect {
                    deadline = Instant::now() + settle;
                }
            }
            Err(_) if lines.is_empty() => {
                lines.push("no signal".into());
                finish(&out, &lines, 3);
            }
            Err(_) => finish(&out, &lines, 0),
        }
    }
}
