//! `childguard demo`: the README demo, with nothing else to build.
//!
//! This binary re-executes itself as the slowserver fixture (hidden subcommand), connected
//! over a socketpair, asks it for a read that takes 10 s, and closes it mid-read with the
//! default ladder. Then it prints the close timeline and what a waitpid-only close — drop the
//! socket, `waitpid` — would have cost: the server only notices EOF once its read is done, so
//! that close waits out the rest of the read. That figure is computed, not waited for.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// `println!` that never panics: `childguard demo >/dev/full` loses the text, nothing more.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

use childguard::{ChildHandle, CloseReport, Ladder, SocketMode};

use crate::{exit_code, SLOWSERVER_SUBCOMMAND};

/// How long the server's read takes.
const READ_DELAY: Duration = Duration::from_secs(10);
/// Time for the server to take the request off the socket and start sleeping in its read.
const SETTLE: Duration = Duration::from_millis(50);

/// Runs the demo; returns the exit code.
pub fn run() -> i32 {
    match demo() {
        Ok(()) => 0,
        Err(e) => {
            crate::messages::say!("demo: {e}");
            exit_code::FAILED
        }
    }
}

fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let ladder = Ladder::default();
    let mut server = Command::new(std::env::current_exe()?);
    let delay = humantime::format_duration(READ_DELAY).to_string();
    server.args([SLOWSERVER_SUBCOMMAND, "--delay-read", &delay]);
    let handle = ChildHandle::builder(server)
        .socket(SocketMode::Stdio)
        .ladder(ladder.clone())
        .process_group(true)
        // Every signal at its default, whatever started us: under `nohup` the server would
        // inherit an ignored SIGHUP and the timeline would show its rung skipped.
        .start_signals(&[], &[])
        .spawn()?;
    let socket = handle.socket().ok_or("the handle has no socket")?;
    read_ready(socket)?;
    out!(
        "Spawned slowserver[{}] over a socketpair; sent `READ 1` (answered after {delay}).",
        handle.id().unwrap_or(0)
    );
    let mut writer = socket;
    writer.write_all(b"READ 1\n")?;
    let read_sent = Instant::now();
    thread::sleep(SETTLE);

    out!("Closing it mid-read with the ladder {ladder} …");
    let close_started = Instant::now();
    let report = handle.close()?;
    let waitpid_only = (read_sent + READ_DELAY).saturating_duration_since(close_started);

    out!();
    print_timeline(&report);
    out!();
    out!("report: {report}");
    out!();
    out!("childguard close:    {}", ms(report.total));
    out!(
        "waitpid-only close: ≈ {:.2} s (estimate: the time the read still had left; the server \
         notices EOF only after it)",
        waitpid_only.as_secs_f64()
    );
    Ok(())
}

/// Reads slowserver's `READY …` line.
fn read_ready(mut socket: &UnixStream) -> io::Result<()> {
    socket.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut line = Vec::new();
    let mut byte = [0u8];
    while line.last() != Some(&b'\n') {
        if socket.read(&mut byte)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed its socket before READY",
            ));
        }
        line.push(byte[0]);
    }
    if !line.starts_with(slowserver::READY_PREFIX.as_bytes()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not a READY line: {:?}", String::from_utf8_lossy(&line)),
        ));
    }
    Ok(())
}

/// One line per step of the close.
fn print_timeline(report: &CloseReport) {
    out!("Close timeline:");
    if let Some(at) = report.shutdown {
        out!("  {:>9}  shutdown(SHUT_RDWR) + close of our socket", ms(at));
    }
    for sent in &report.signals {
        let to = if sent.to_group {
            " to its process group"
        } else {
            ""
        };
        out!(
            "  {:>9}  SIG{} sent{to} (rung {})",
            ms(sent.at),
            sent.signal,
            sent.rung
        );
    }
    if let Some(at) = report.exited {
        out!("  {:>9}  exited, ended by {}", ms(at), report.ended_by);
    }
    if let Some(at) = report.reaped {
        out!("  {:>9}  reaped (pid released)", ms(at));
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
