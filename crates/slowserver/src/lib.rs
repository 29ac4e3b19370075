//! `slowserver`: a fixture server for childguard's tests that misbehaves on
//! request.
//!
//! It talks a line protocol on stdin (fd 0) and stdout (fd 1), which may be
//! pipes or a Unix socket.
//!
//! # Startup
//!
//! Parse arguments (bad usage: message on stderr, exit 2), honour
//! `--exit-immediately`, `--async-teardown`, ignore SIGPIPE and the `--ignore`
//! signals, install handlers (with `--log` or `--slow-exit`), `--alloc`,
//! `--fork-grandchild`, then print exactly one line to stdout and flush it:
//!
//! ```text
//! READY pid=<pid> grandchild=<gpid or 0>
//! ```
//!
//! then `--stop-self`, then serve.
//!
//! # Flags
//!
//! - `--ignore SIGS`: comma list of signal names (`HUP,TERM`, `sigint`, ...)
//!   set to `SIG_IGN`; ignored signals are never logged.
//! - `--ignore-eof`: on EOF on stdin, block forever instead of exiting.
//! - `--delay-read DUR`: sleep DUR (humantime: `200ms`, `10s`) before each
//!   `READ` answer; EOF is only noticed at the next line read.
//! - `--slow-exit DUR`: on EOF, or on a HUP/TERM/INT that is not ignored,
//!   sleep DUR before exiting (0 for EOF, 128+signo for a signal).
//! - `--fork-grandchild`: re-exec itself as a worker that shares fds 0-2,
//!   stays in the process group, ignores nothing and sleeps forever.
//! - `--stop-self`: raise SIGSTOP right after READY.
//! - `--alloc GIB`: map GIB (fractional) gibibytes of anonymous memory and
//!   touch every 4 KiB page before READY; `--hugepages` adds
//!   `madvise(MADV_HUGEPAGE)` on Linux.
//! - `--async-teardown`: before anything else (after `--exit-immediately`),
//!   start the `childguard-teardown` helper: a `cleanup/<pid>` process sharing
//!   our memory, which frees it after we exit, so whoever waits for us sees
//!   the exit without paying for the `--alloc` teardown. Failure (e.g. not
//!   Linux, or Linux before 5.3) is reported on stderr with exit 1.
//! - `--exit-immediately CODE`: exit with CODE before anything else.
//! - `--log FILE`: append each HUP, TERM, INT, CONT, USR1 received (name
//!   without `SIG`, one a line) to FILE; HUP/TERM/INT then end the process
//!   (after `--slow-exit`, else by the signal itself).
//! - Becoming ready, in this order before the READY line:
//!   `--stderr-flood BYTES` (numbered 100-byte log lines on stderr),
//!   `--ready-after DUR` (a sleep), `--ready-stamp FILE` (the `CLOCK_MONOTONIC`
//!   instant in ns), `--listen PATH` (a Unix listener whose connections are
//!   closed at once); then, after the READY line, `--notify` (`STATUS=ready`,
//!   `READY=1` on `$NOTIFY_SOCKET`). With `--notify`, HUP/TERM/INT first send `STOPPING=1`
//!   (plus `EXTEND_TIMEOUT_USEC=` of `--notify-extend DUR`), then act as with
//!   `--log`/`--slow-exit`.
//!
//! Without `--log` and `--slow-exit`, signals keep their default actions.
//!
//! # Protocol
//!
//! - `PING` -> `PONG`
//! - `READ n` -> exactly n NUL bytes
//! - `EXIT code` -> exit with code
//! - anything else -> `ERR unknown command` (`ERR bad argument` when a known
//!   command has a malformed argument)
//! - EOF -> exit 0 unless `--ignore-eof`; a write error -> exit 0 quietly.

#![deny(unsafe_code)]

/// Flags and protocol constants, for tests that talk to slowserver.
pub const READY_PREFIX: &str = "READY ";

mod args;
mod escape;
mod exit;
mod grandchild;
mod lifeline;
mod memory;
mod protocol;
mod ready;
mod server;
mod signals;
mod sys;

use std::ffi::OsString;
use std::fmt::Display;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::process;

use args::{Config, Mode};

/// The whole program, for embedding: `reexec_prefix` are the arguments that make
/// `current_exe()` act as slowserver again (empty for the `slowserver` binary; e.g.
/// `["slowserver"]` for a binary that dispatches on a subcommand). It is used to start the
/// `--fork-grandchild` worker.
pub fn main_with(reexec_prefix: Vec<OsString>, args: Vec<OsString>) -> ! {
    let _ = grandchild::REEXEC_PREFIX.set(reexec_prefix);
    let config = match args::parse(args) {
        Ok(Mode::Serve(config)) => *config,
        Ok(Mode::Help) => {
            print!("{}", args::USAGE);
            process::exit(0);
        }
        Ok(Mode::GrandchildWorker) => grandchild::run_worker(),
        Ok(Mode::DaemonStage) => escape::run_daemon_stage(),
        Ok(Mode::Daemon) => escape::run_daemon(),
        Ok(Mode::BusyWorker(worker)) => escape::run_busy_worker(worker),
        Err(err) => {
            eprintln!("slowserver: {err}");
            eprintln!("Try 'slowserver --help' for more information.");
            process::exit(2);
        }
    };
    if let Some(code) = config.exit_immediately {
        process::exit(code);
    }
    run(&config)
}

/// Everything after argument parsing, in the documented startup order.
fn run(config: &Config) -> ! {
    // First: a failure stops us before anything is allocated, opened or spawned. (Order does
    // not matter for coverage: the helper shares the address space, so --alloc is included.)
    if config.async_teardown {
        childguard_teardown::enable().unwrap_or_else(|e| fail("--async-teardown", e));
    }

    // Writes to a vanished peer must fail with EPIPE, not kill us.
    signals::ignore(&[libc::SIGPIPE]).unwrap_or_else(|e| fail("cannot ignore SIGPIPE", e));
    signals::ignore(&config.ignore).unwrap_or_else(|e| fail("--ignore", e));

    let log = config.log.as_ref().map(|path| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| fail(&format!("--log {}", path.display()), e))
    });
    let notifier = config.notify.then(|| {
        ready::Notifier::from_env(config.notify_extend).unwrap_or_else(|e| fail("--notify", e))
    });
    let handling = signals::Handling {
        log,
        slow_exit: config.slow_exit,
        notify: notifier.clone(),
        reload: config.reload.filter(|_| notifier.is_some()),
    };
    signals::install(&config.ignore, handling)
        .unwrap_or_else(|e| fail("cannot install signal handlers", e));

    // Held (never dropped: every exit is process::exit) so it stays resident.
    let _memory = config.alloc_gib.map(|gib| {
        memory::allocate(gib, config.hugepages)
            .unwrap_or_else(|e| fail(&format!("--alloc {gib}"), e))
    });

    let grandchild = if config.fork_grandchild {
        grandchild::spawn().unwrap_or_else(|e| fail("--fork-grandchild", e))
    } else if config.daemonize {
        escape::daemonize().unwrap_or_else(|e| fail("--daemonize", e))
    } else {
        0
    };
    // Our parent now: the process whose exit ends the workers with --lifeline.
    let lifeline = config
        .lifeline
        .then(|| lifeline::Lifeline::of_parent().unwrap_or_else(|e| fail("--lifeline", e)));
    let workers = escape::spawn_workers(config.workers, config.setsid, lifeline.as_ref())
        .unwrap_or_else(|e| fail("--workers", e));

    if let Some(bytes) = config.stderr_flood {
        ready::flood_stderr(bytes).unwrap_or_else(|e| fail("--stderr-flood", e));
    }
    if let Some(delay) = config.ready_after {
        std::thread::sleep(delay);
    }
    if let Some(path) = &config.ready_stamp {
        std::fs::write(path, ready::monotonic_ns().to_string())
            .unwrap_or_else(|e| fail(&format!("--ready-stamp {}", path.display()), e));
    }
    if let Some(path) = &config.listen {
        ready::listen(path).unwrap_or_else(|e| fail(&format!("--listen {}", path.display()), e));
    }
    if announce_ready(grandchild, &workers).is_err() {
        // Nobody is listening: leave as quietly as a later write error would.
        process::exit(0);
    }
    // After the READY line: a supervisor woken by READY=1 finds the line already there.
    if let Some(notifier) = &notifier {
        if let Some(log) = &config.main_worker {
            let pid =
                grandchild::spawn_main_worker(log).unwrap_or_else(|e| fail("--main-worker", e));
            notifier
                .send(&format!("MAINPID={pid}\n"))
                .unwrap_or_else(|e| fail("--main-worker", e));
        }
        // Before READY=1: a supervisor that saw READY=1 has read these too (one queue, in order).
        for message in &config.notify_send {
            notifier
                .send(message)
                .unwrap_or_else(|e| fail("--notify-send", e));
        }
        if config.barrier {
            notifier
                .barrier(std::time::Duration::from_secs(20))
                .unwrap_or_else(|e| fail("--barrier", e));
        }
        if !config.no_ready {
            notifier.ready().unwrap_or_else(|e| fail("--notify", e));
        }
        ready::watchdog(
            notifier,
            config.watchdog_every,
            config.watchdog_for,
            config.watchdog_trigger,
        )
        .unwrap_or_else(|e| fail("--watchdog-every", e));
    }

    if config.stop_self {
        signal_hook::low_level::raise(libc::SIGSTOP).unwrap_or_else(|e| fail("--stop-self", e));
    }

    server::serve(server::Settings {
        delay_read: config.delay_read,
        slow_exit: config.slow_exit,
        ignore_eof: config.ignore_eof,
    })
}

/// Prints the single `READY pid=<pid> grandchild=<gpid or 0>[ workers=<p1,p2,…>]` line.
fn announce_ready(grandchild: u32, workers: &[u32]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    write!(out, "READY pid={} grandchild={grandchild}", process::id())?;
    if !workers.is_empty() {
        let list: Vec<String> = workers.iter().map(u32::to_string).collect();
        write!(out, " workers={}", list.join(","))?;
    }
    writeln!(out)?;
    out.flush()
}

/// Reports a startup failure on stderr and exits 1.
fn fail(what: &str, err: impl Display) -> ! {
    eprintln!("slowserver: {what}: {err}");
    process::exit(1)
}
