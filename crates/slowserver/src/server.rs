//! The serving loop: requests from stdin, answers on stdout.

use std::io::{self, BufRead, Write};
use std::process;
use std::thread;
use std::time::Duration;

use crate::exit;
use crate::protocol::{self, Request};

/// What the serving loop needs from the command line.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// `--delay-read`: sleep before answering each `READ`.
    pub delay_read: Option<Duration>,
    /// `--slow-exit`: linger before exiting on EOF.
    pub slow_exit: Option<Duration>,
    /// `--ignore-eof`: stay alive forever after EOF.
    pub ignore_eof: bool,
}

/// NUL bytes written per `write` for `READ`.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Serves requests until EOF, `EXIT`, a write error or a signal.
pub fn serve(settings: Settings) -> ! {
    let mut input = io::stdin().lock();
    let mut output = io::stdout().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            // A read error (e.g. ECONNRESET on a socket) counts as EOF.
            Ok(0) | Err(_) => on_eof(settings),
            Ok(_) => {}
        }
        let answered = match protocol::parse(&line) {
            Request::Ping => answer(&mut output, protocol::PONG),
            Request::Read(n) => {
                if let Some(delay) = settings.delay_read {
                    thread::sleep(delay);
                }
                write_zeros(&mut output, n)
            }
            Request::Exit(code) => process::exit(code),
            Request::BadArgument => answer(&mut output, protocol::ERR_BAD_ARGUMENT),
            Request::Unknown => answer(&mut output, protocol::ERR_UNKNOWN),
        };
        if answered.is_err() {
            // The peer is gone (EPIPE and the like): leave quietly.
            process::exit(0);
        }
    }
}

/// EOF on stdin: exit 0 after `--slow-exit`, or with `--ignore-eof` never.
fn on_eof(settings: Settings) -> ! {
    if settings.ignore_eof {
        exit::never();
    }
    exit::after(settings.slow_exit, 0)
}

fn answer(output: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    output.write_all(bytes)?;
    output.flush()
}

fn write_zeros(output: &mut impl Write, mut n: u64) -> io::Result<()> {
    while n > 0 {
        let chunk = usize::try_from(n).map_or(ZEROS.len(), |n| n.min(ZEROS.len()));
        output.write_all(&ZEROS[..chunk])?;
        n -= chunk as u64;
    }
    output.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_are_exact() {
        for n in [0, 1, 5, ZEROS.len() as u64, ZEROS.len() as u64 * 2 + 3] {
            let mut out = Vec::new();
            write_zeros(&mut out, n).unwrap();
            assert_eq!(out.len() as u64, n);
            assert!(out.iter().all(|&b| b == 0));
        }
    }
}
