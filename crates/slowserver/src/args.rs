//! Command-line parsing, by hand.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use libc::c_int;

use crate::escape::{BUSY_WORKER_FLAG, DAEMON_FLAG, DAEMON_STAGE_FLAG};
use crate::grandchild::WORKER_FLAG;
use crate::signals;

/// The `--help` text.
pub const USAGE: &str = "\
Usage: slowserver [OPTIONS]

A test fixture server that misbehaves on request. Prints one line
`READY pid=<pid> grandchild=<gpid or 0>` on stdout, then serves a line
protocol on stdin/stdout.

Options:
  --ignore SIGS            set SIGS (comma list, e.g. HUP,TERM or sigint) to SIG_IGN
  --ignore-eof             on EOF on stdin, stay alive forever instead of exiting
  --delay-read DUR         sleep DUR (e.g. 200ms, 10s) before answering each READ
  --slow-exit DUR          sleep DUR before exiting on EOF or on HUP/TERM/INT
                           (signal exits then use code 128+signo)
  --fork-grandchild        spawn a worker that shares stdin/stdout and sleeps forever
  --stop-self              raise SIGSTOP on itself right after READY
  --alloc GIB              map and touch GIB gibibytes (may be fractional) before READY
  --hugepages              with --alloc: madvise(MADV_HUGEPAGE) first (Linux only)
  --async-teardown         start a cleanup/<pid> helper first that frees the memory after
                           we exit, so our parent's waitpid returns at once (Linux only)
  --exit-immediately CODE  exit with CODE before doing anything else
  --log FILE               append each signal received (e.g. HUP) to FILE, one a line;
                           HUP/TERM/INT then still end the process (after --slow-exit,
                           whose end is logged as EXIT <code>)
  --daemonize              double fork + setsid a daemon that keeps a copy of stdin (the
                           socket) and ignores HUP/TERM; its pid is READY's grandchild=
  --workers N              start N children that burn CPU; READY ends with workers=P1,P2,…
  --setsid                 with --workers: each worker calls setsid (its own session)
  --lifeline               with --workers: each worker exits (within ~10 ms) once the process
                           that started us (our parent at start) has exited, so a killed
                           benchmark leaves no worker burning CPU (Linux: its pidfd)
  --ready-after DUR        sleep DUR before becoming ready (READY line, --notify, --listen)
  --ready-stamp FILE       write the CLOCK_MONOTONIC instant (ns) of becoming ready to FILE
  --notify                 send READY=1 and STATUS=ready to $NOTIFY_SOCKET when ready, and
                           STOPPING=1 on HUP/TERM/INT (which then end the process as usual)
  --notify-extend DUR      with --notify: with STOPPING=1 also send EXTEND_TIMEOUT_USEC=DUR
  --watchdog-every DUR     with --notify: from READY=1 on, send WATCHDOG=1 every DUR
  --watchdog-for DUR       with --watchdog-every: stop sending after DUR (a hung server)
  --watchdog-trigger DUR   with --notify: DUR after READY=1, send WATCHDOG=trigger
  --notify-send TEXT       with --notify: right before READY=1, send TEXT as one datagram
                           (`\n` in TEXT is a newline; repeatable, sent in order)
  --reload DUR|never|exit  with --notify: HUP is a reload, not an exit: send RELOADING=1
                           and MONOTONIC_USEC=, then READY=1 DUR later (never: no READY=1;
                           exit: exit 3 instead)
  --main-worker LOG        with --notify: start a worker (this program again, logging its
                           signals to LOG) and send MAINPID=<its pid> before READY=1; we
                           exit when it does, with its code (128+signal if signalled)
  --no-ready               with --notify: never send READY=1 (--notify-send still goes)
  --barrier                with --notify: before READY=1, sd_notify_barrier(3): BARRIER=1
                           with a pipe's write end, then wait up to 20 s for the
                           supervisor to close its copy (else exit 1)
  --listen PATH            when ready, listen on the Unix socket PATH (connections accepted
                           and closed at once)
  --stderr-flood BYTES     before becoming ready, write BYTES of numbered log lines to stderr
  -h, --help               print this help

Protocol (one request per line on stdin):
  PING       -> PONG
  READ n     -> n NUL bytes (after --delay-read)
  EXIT code  -> exit with code
  other      -> ERR unknown command (ERR bad argument for a malformed argument)
  EOF        -> exit 0 (after --slow-exit), unless --ignore-eof
";

/// Everything the command line asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// `--ignore`: signals set to `SIG_IGN` at startup.
    pub ignore: Vec<c_int>,
    /// `--ignore-eof`.
    pub ignore_eof: bool,
    /// `--delay-read`.
    pub delay_read: Option<Duration>,
    /// `--slow-exit`.
    pub slow_exit: Option<Duration>,
    /// `--fork-grandchild`.
    pub fork_grandchild: bool,
    /// `--stop-self`.
    pub stop_self: bool,
    /// `--alloc`, in gibibytes.
    pub alloc_gib: Option<f64>,
    /// `--hugepages`.
    pub hugepages: bool,
    /// `--async-teardown`.
    pub async_teardown: bool,
    /// `--exit-immediately`.
    pub exit_immediately: Option<i32>,
    /// `--log`.
    pub log: Option<PathBuf>,
    /// `--daemonize`.
    pub daemonize: bool,
    /// `--workers`.
    pub workers: usize,
    /// `--setsid`.
    pub setsid: bool,
    /// `--lifeline`.
    pub lifeline: bool,
    /// `--ready-after`.
    pub ready_after: Option<Duration>,
    /// `--ready-stamp`.
    pub ready_stamp: Option<PathBuf>,
    /// `--notify`.
    pub notify: bool,
    /// `--notify-extend`.
    pub notify_extend: Option<Duration>,
    /// `--listen`.
    pub listen: Option<PathBuf>,
    /// `--watchdog-every`.
    pub watchdog_every: Option<Duration>,
    /// `--watchdog-for`.
    pub watchdog_for: Option<Duration>,
    /// `--watchdog-trigger`.
    pub watchdog_trigger: Option<Duration>,
    /// `--notify-send`, each with `\n` made a newline.
    pub notify_send: Vec<String>,
    /// `--reload`.
    pub reload: Option<Reload>,
    /// `--no-ready`.
    pub no_ready: bool,
    /// `--barrier`.
    pub barrier: bool,
    /// `--main-worker`: the worker's log.
    pub main_worker: Option<PathBuf>,
    /// `--stderr-flood`, in bytes.
    pub stderr_flood: Option<u64>,
}

/// `--reload`: what a HUP does after `RELOADING=1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reload {
    /// `READY=1` this long after.
    After(Duration),
    /// No `READY=1` ever.
    Never,
    /// Exit 3.
    Exit,
}

/// What the process should be.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// The server, configured.
    Serve(Box<Config>),
    /// Print [`USAGE`] and exit 0.
    Help,
    /// The `--fork-grandchild` worker (hidden).
    GrandchildWorker,
    /// `--daemonize`'s intermediate process (hidden).
    DaemonStage,
    /// `--daemonize`'s daemon (hidden).
    Daemon,
    /// A `--workers` child (hidden).
    BusyWorker(BusyWorker),
}

/// How a `--workers` child runs (its hidden arguments: `setsid`, `watch=PID`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BusyWorker {
    /// Call `setsid` first.
    pub setsid: bool,
    /// Exit once this process has exited (`--lifeline`).
    pub watch: Option<u32>,
}

/// The hidden arguments after `--busy-worker`.
fn busy_worker(args: impl Iterator<Item = OsString>) -> Result<BusyWorker, UsageError> {
    let mut worker = BusyWorker::default();
    for arg in args {
        match arg.to_str() {
            Some("setsid") => worker.setsid = true,
            Some(text) if text.starts_with("watch=") => {
                let pid = &text["watch=".len()..];
                worker.watch = Some(
                    pid.parse::<u32>()
                        .ok()
                        .filter(|&p| p > 0)
                        .ok_or_else(|| invalid(BUSY_WORKER_FLAG, text, "watch= needs a pid"))?,
                );
            }
            _ => {
                return Err(UsageError(format!(
                    "{BUSY_WORKER_FLAG}: unknown argument {arg:?}"
                )))
            }
        }
    }
    Ok(worker)
}

/// A bad command line; its message names the offending argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Parses the arguments after the program name.
pub fn parse<I>(args: I) -> Result<Mode, UsageError>
where
    I: IntoIterator<Item = OsString>,
{
    let mut config = Config::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str() else {
            return Err(UsageError(format!("unknown argument {arg:?}")));
        };
        // `--flag=value` as well as `--flag value`.
        let (flag, inline) = match text.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(OsString::from(value))),
            _ => (text, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| UsageError(format!("{flag} needs a value")))
        };
        let takes_no_value = |config: &mut Config, set: fn(&mut Config)| {
            if inline.is_some() {
                return Err(UsageError(format!("{flag} takes no value")));
            }
            set(config);
            Ok(())
        };
        match flag {
            "-h" | "--help" => return Ok(Mode::Help),
            WORKER_FLAG => return Ok(Mode::GrandchildWorker),
            DAEMON_STAGE_FLAG => return Ok(Mode::DaemonStage),
            DAEMON_FLAG => return Ok(Mode::Daemon),
            BUSY_WORKER_FLAG => return busy_worker(args.by_ref()).map(Mode::BusyWorker),
            "--daemonize" => takes_no_value(&mut config, |c| c.daemonize = true)?,
            "--setsid" => takes_no_value(&mut config, |c| c.setsid = true)?,
            "--lifeline" => takes_no_value(&mut config, |c| c.lifeline = true)?,
            "--workers" => {
                let n = number(flag, &value()?)?;
                config.workers = usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= 1024)
                    .ok_or_else(|| invalid(flag, &n.to_string(), "must be 0 to 1024"))?;
            }
            "--ignore" => config.ignore.extend(signal_list(flag, &value()?)?),
            "--ignore-eof" => takes_no_value(&mut config, |c| c.ignore_eof = true)?,
            "--delay-read" => config.delay_read = Some(duration(flag, &value()?)?),
            "--slow-exit" => config.slow_exit = Some(duration(flag, &value()?)?),
            "--fork-grandchild" => takes_no_value(&mut config, |c| c.fork_grandchild = true)?,
            "--stop-self" => takes_no_value(&mut config, |c| c.stop_self = true)?,
            "--alloc" => config.alloc_gib = Some(gibibytes(flag, &value()?)?),
            "--hugepages" => takes_no_value(&mut config, |c| c.hugepages = true)?,
            "--async-teardown" => takes_no_value(&mut config, |c| c.async_teardown = true)?,
            "--exit-immediately" => config.exit_immediately = Some(number(flag, &value()?)?),
            "--log" => config.log = Some(PathBuf::from(value()?)),
            "--ready-after" => config.ready_after = Some(duration(flag, &value()?)?),
            "--ready-stamp" => config.ready_stamp = Some(PathBuf::from(value()?)),
            "--notify" => takes_no_value(&mut config, |c| c.notify = true)?,
            "--notify-extend" => config.notify_extend = Some(duration(flag, &value()?)?),
            "--listen" => config.listen = Some(PathBuf::from(value()?)),
            "--no-ready" => takes_no_value(&mut config, |c| c.no_ready = true)?,
            "--barrier" => takes_no_value(&mut config, |c| c.barrier = true)?,
            "--main-worker" => config.main_worker = Some(PathBuf::from(value()?)),
            "--watchdog-every" => config.watchdog_every = Some(duration(flag, &value()?)?),
            "--watchdog-for" => config.watchdog_for = Some(duration(flag, &value()?)?),
            "--watchdog-trigger" => config.watchdog_trigger = Some(duration(flag, &value()?)?),
            "--notify-send" => {
                let value = value()?;
                config
                    .notify_send
                    .push(utf8(flag, &value)?.replace("\\n", "\n"));
            }
            "--reload" => {
                let value = value()?;
                config.reload = Some(match utf8(flag, &value)? {
                    "never" => Reload::Never,
                    "exit" => Reload::Exit,
                    _ => Reload::After(duration(flag, &value)?),
                });
            }
            "--stderr-flood" => config.stderr_flood = Some(bytes(flag, &value()?)?),
            _ => return Err(UsageError(format!("unknown argument '{text}'"))),
        }
    }
    Ok(Mode::Serve(Box::new(config)))
}

/// The value as UTF-8 text, or an error naming `flag`.
fn utf8<'a>(flag: &str, value: &'a OsString) -> Result<&'a str, UsageError> {
    value
        .to_str()
        .ok_or_else(|| UsageError(format!("invalid value for {flag}: {value:?} is not UTF-8")))
}

fn invalid(flag: &str, value: &str, why: impl fmt::Display) -> UsageError {
    UsageError(format!("invalid value for {flag}: '{value}': {why}"))
}

fn signal_list(flag: &str, value: &OsString) -> Result<Vec<c_int>, UsageError> {
    let text = utf8(flag, value)?;
    text.split(',')
        .map(|name| {
            signals::from_name(name).ok_or_else(|| {
                let known: Vec<&str> = signals::NAMED.iter().map(|&(n, _)| n).collect();
                invalid(
                    flag,
                    text,
                    format!("unknown signal '{name}' (known: {})", known.join(",")),
                )
            })
        })
        .collect()
}

fn duration(flag: &str, value: &OsString) -> Result<Duration, UsageError> {
    let text = utf8(flag, value)?;
    humantime::parse_duration(text).map_err(|e| invalid(flag, text, e))
}

fn gibibytes(flag: &str, value: &OsString) -> Result<f64, UsageError> {
    let text = utf8(flag, value)?;
    match text.parse::<f64>() {
        Ok(gib) if gib.is_finite() && gib > 0.0 => Ok(gib),
        Ok(_) => Err(invalid(flag, text, "must be a positive number of GiB")),
        Err(e) => Err(invalid(flag, text, e)),
    }
}

/// A byte count: digits with an optional `K`, `M` or `G` (powers of 1000).
fn bytes(flag: &str, value: &OsString) -> Result<u64, UsageError> {
    let text = utf8(flag, value)?;
    let (digits, unit) = match text.char_indices().last() {
        Some((i, 'K' | 'k')) => (&text[..i], 1_000),
        Some((i, 'M')) => (&text[..i], 1_000_000),
        Some((i, 'G')) => (&text[..i], 1_000_000_000),
        _ => (text, 1),
    };
    let n: u64 = digits.parse().map_err(|e| invalid(flag, text, e))?;
    n.checked_mul(unit)
        .ok_or_else(|| invalid(flag, text, "too large"))
}

fn number(flag: &str, value: &OsString) -> Result<i32, UsageError> {
    let text = utf8(flag, value)?;
    text.parse().map_err(|e| invalid(flag, text, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Mode, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    fn config(args: &[&str]) -> Config {
        match run(args) {
            Ok(Mode::Serve(config)) => *config,
            other => panic!("{args:?} gave {other:?}"),
        }
    }

    #[test]
    fn no_arguments_is_a_plain_server() {
        assert_eq!(config(&[]), Config::default());
    }

    #[test]
    fn every_flag() {
        let c = config(&[
            "--ignore",
            "HUP,sigterm",
            "--ignore=INT",
            "--ignore-eof",
            "--delay-read",
            "200ms",
            "--slow-exit=2s",
            "--fork-grandchild",
            "--stop-self",
            "--alloc",
            "0.5",
            "--hugepages",
            "--async-teardown",
            "--exit-immediately",
            "7",
            "--log",
            "/tmp/x",
        ]);
        assert_eq!(c.ignore, vec![libc::SIGHUP, libc::SIGTERM, libc::SIGINT]);
        assert!(c.ignore_eof && c.fork_grandchild && c.stop_self && c.hugepages);
        assert!(c.async_teardown);
        assert_eq!(c.delay_read, Some(Duration::from_millis(200)));
        assert_eq!(c.slow_exit, Some(Duration::from_secs(2)));
        assert_eq!(c.alloc_gib, Some(0.5));
        assert_eq!(c.exit_immediately, Some(7));
        assert_eq!(c.log, Some(PathBuf::from("/tmp/x")));
    }

    #[test]
    fn sd_notify_flags() {
        let c = config(&[
            "--watchdog-every=20ms",
            "--watchdog-for",
            "1s",
            "--watchdog-trigger",
            "2s",
            "--notify-send",
            "A=1\\nB=2",
            "--notify-send=C=3",
            "--reload",
            "100ms",
            "--main-worker",
            "/tmp/w.log",
            "--barrier",
            "--no-ready",
        ]);
        assert_eq!(c.watchdog_every, Some(Duration::from_millis(20)));
        assert_eq!(c.watchdog_for, Some(Duration::from_secs(1)));
        assert_eq!(c.watchdog_trigger, Some(Duration::from_secs(2)));
        assert_eq!(c.notify_send, ["A=1\nB=2", "C=3"]);
        assert_eq!(c.reload, Some(Reload::After(Duration::from_millis(100))));
        assert_eq!(c.main_worker, Some(PathBuf::from("/tmp/w.log")));
        assert!(c.barrier && c.no_ready);
        assert_eq!(config(&["--reload", "never"]).reload, Some(Reload::Never));
        assert_eq!(config(&["--reload", "exit"]).reload, Some(Reload::Exit));
        assert!(run(&["--reload", "sometime"]).is_err());
        assert!(run(&["--barrier=1"]).is_err());
    }

    #[test]
    fn help_and_worker() {
        assert_eq!(run(&["--help"]), Ok(Mode::Help));
        assert_eq!(run(&["-h"]), Ok(Mode::Help));
        assert_eq!(run(&[WORKER_FLAG]), Ok(Mode::GrandchildWorker));
    }

    #[test]
    fn workers_and_their_hidden_arguments() {
        let c = config(&["--workers", "3", "--setsid", "--lifeline"]);
        assert_eq!(c.workers, 3);
        assert!(c.setsid && c.lifeline);
        assert!(run(&["--lifeline=1"]).is_err());
        assert_eq!(
            run(&[BUSY_WORKER_FLAG]),
            Ok(Mode::BusyWorker(BusyWorker::default()))
        );
        assert_eq!(
            run(&[BUSY_WORKER_FLAG, "setsid", "watch=42"]),
            Ok(Mode::BusyWorker(BusyWorker {
                setsid: true,
                watch: Some(42),
            }))
        );
        for bad in ["watch=0", "watch=-1", "watch=x", "watch=", "sessions"] {
            let e = run(&[BUSY_WORKER_FLAG, bad]).expect_err(bad);
            assert!(e.to_string().contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn readiness_flags() {
        let c = config(&[
            "--notify",
            "--notify-extend",
            "3s",
            "--ready-after=200ms",
            "--ready-stamp",
            "/tmp/stamp",
            "--listen",
            "/tmp/sock",
            "--stderr-flood",
            "50M",
        ]);
        assert!(c.notify);
        assert_eq!(c.notify_extend, Some(Duration::from_secs(3)));
        assert_eq!(c.ready_after, Some(Duration::from_millis(200)));
        assert_eq!(c.ready_stamp, Some(PathBuf::from("/tmp/stamp")));
        assert_eq!(c.listen, Some(PathBuf::from("/tmp/sock")));
        assert_eq!(c.stderr_flood, Some(50_000_000));
        assert_eq!(config(&["--stderr-flood", "1234"]).stderr_flood, Some(1234));
        assert!(run(&["--stderr-flood", "9999999999999999999G"]).is_err());
        assert!(run(&["--stderr-flood", "lots"]).is_err());
        assert!(run(&["--notify=1"]).is_err());
    }

    #[test]
    fn errors_name_the_argument() {
        let cases: &[(&[&str], &str)] = &[
            (&["--bogus"], "--bogus"),
            (&["--delay-read"], "--delay-read needs a value"),
            (&["--delay-read", "soon"], "--delay-read"),
            (&["--ignore", "HUP,KILL"], "KILL"),
            (&["--alloc", "0"], "--alloc"),
            (&["--alloc", "lots"], "--alloc"),
            (&["--exit-immediately", "x"], "--exit-immediately"),
            (&["--stop-self=yes"], "--stop-self takes no value"),
            (&["--async-teardown=1"], "--async-teardown takes no value"),
        ];
        for (args, needle) in cases {
            let err = run(args).unwrap_err().to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }
}
