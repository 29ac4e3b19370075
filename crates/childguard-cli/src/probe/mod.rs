//! `childguard probe`: what each signal does to a server, measured, and the ladder that
//! follows from it.
//!
//! ```text
//! childguard probe [--ready COND | --settle-timeout DUR] [--client CMD] [--signals LIST] [--runs N] [--json] -- SERVER [ARG...]
//! ```
//!
//! For each signal and each run the server is started fresh through the library (contained
//! in a cgroup of its own when this process may make one: [`Containment::BestEffort`],
//! readiness awaited as `with` awaits it — without `--ready`, until it has *settled*: see
//! [`settle`]), a `--client` started against it, then that one
//! signal is sent to the server's main process and its exit awaited for `--window`. Then it is
//! closed with the library's close and a `KILL` ladder, and checked gone. [`measure`] does one
//! run ([`observe`] reads `/proc` for it), [`recommend`] turns the runs into verdicts and a
//! ladder, [`report`] prints them.
//!
//! [`Containment::BestEffort`]: childguard::Containment::BestEffort

mod measure;
mod observe;
mod recommend;
mod report;
mod settle;

use std::ffi::OsString;
use std::time::Duration;

use childguard::{Ready, Signal};

use crate::args::UsageError;
use crate::messages::say;
use crate::{duration, exit_code, words};

/// Exit status: no signal ended the server cleanly (the ladder recommended is `KILL` alone).
pub const NO_CLEAN_SIGNAL: i32 = 3;

/// The signals probed without `--signals`.
pub const DEFAULT_SIGNALS: &str = "HUP,INT,TERM,QUIT,USR1,USR2";
/// Runs per signal without `--runs`.
pub const DEFAULT_RUNS: usize = 3;
/// How long an exit is awaited after the signal, without `--window`.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

/// `childguard probe` options.
#[derive(Debug)]
pub struct ProbeOptions {
    /// `--ready` conditions (every one must hold), as text and parsed.
    ready: Vec<(String, Ready)>,
    /// `--ready-timeout`.
    ready_timeout: Option<Duration>,
    /// `--settle-timeout`: without `--ready`, the bound of the wait for the server to settle.
    settle_timeout: Duration,
    settle_timeout_given: bool,
    /// `--client CMD`, split into words.
    client: Option<(String, Vec<String>)>,
    /// `--client-ready COND`.
    client_ready: Option<(String, Ready)>,
    /// `--signals`.
    signals: Vec<Signal>,
    /// `--runs`.
    runs: usize,
    /// `--window`.
    window: Duration,
    /// `--json`.
    json: bool,
    /// `--user NAME`: uid and gid the server (and the client) run as.
    user: Option<(String, u32, u32)>,
    /// SERVER and its arguments.
    command: Vec<OsString>,
}

fn usage(message: impl Into<String>) -> UsageError {
    UsageError::probe(message)
}

/// Parses the arguments after `probe`; `Ok(None)` for `--help`.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<ProbeOptions>, UsageError> {
    let mut args = args.into_iter();
    let mut options = ProbeOptions {
        ready: Vec::new(),
        ready_timeout: None,
        settle_timeout: settle::DEFAULT_TIMEOUT,
        settle_timeout_given: false,
        client: None,
        client_ready: None,
        signals: parse_signals(DEFAULT_SIGNALS)?,
        runs: DEFAULT_RUNS,
        window: DEFAULT_WINDOW,
        json: false,
        user: None,
        command: Vec::new(),
    };
    while let Some(arg) = args.next() {
        if arg == "--" {
            options.command.extend(args.by_ref());
            break;
        }
        let text = arg.to_string_lossy().into_owned();
        if !text.starts_with('-') {
            options.command.push(arg);
            options.command.extend(args.by_ref());
            break;
        }
        let opt = crate::args::LongOpt::split(&text);
        let mut value = || opt.value(&mut args, usage);
        match opt.name.as_str() {
            "-h" | "--help" => return Ok(None),
            "--ready" => {
                let text = value()?;
                let ready = crate::with::parse_ready(&text).map_err(|e| usage(e.to_string()))?;
                options.ready.push((text, ready));
            }
            "--ready-timeout" => {
                let text = value()?;
                options.ready_timeout = crate::args::ready_timeout(&text, usage)?;
            }
            "--settle-timeout" => {
                let text = value()?;
                options.settle_timeout = duration::parse_timeout(&text)
                    .map_err(|why| {
                        usage(format!(
                            "invalid value for --settle-timeout: {text:?}: {why}"
                        ))
                    })?
                    .ok_or_else(|| {
                        usage(format!(
                            "invalid value for --settle-timeout: {text:?}: must be more than 0"
                        ))
                    })?;
                options.settle_timeout_given = true;
            }
            "--client" => {
                let text = value()?;
                let argv = words::split(&text)
                    .map_err(|e| usage(format!("invalid value for --client: {text:?}: {e}")))?;
                options.client = Some((text, argv));
            }
            "--client-ready" => {
                let text = value()?;
                let ready = crate::with::parse_ready(&text)
                    .map_err(|e| usage(e.to_string().replace("--ready", "--client-ready")))?;
                options.client_ready = Some((text, ready));
            }
            "--signals" => options.signals = parse_signals(&value()?)?,
            "--runs" => {
                let text = value()?;
                options.runs = text.parse().ok().filter(|&n| n >= 1).ok_or_else(|| {
                    usage(format!(
                        "invalid value for --runs: {text:?} (expected a whole number, 1 or more)"
                    ))
                })?;
            }
            "--window" => {
                let text = value()?;
                options.window = duration::parse_timeout(&text)
                    .map_err(|why| usage(format!("invalid value for --window: {text:?}: {why}")))?
                    .ok_or_else(|| {
                        usage(format!(
                            "invalid value for --window: {text:?}: must be more than 0"
                        ))
                    })?;
            }
            "--user" => {
                let text = value()?;
                let (uid, gid) = lookup_user(&text).ok_or_else(|| {
                    usage(format!(
                        "invalid value for --user: no user {text:?} in /etc/passwd"
                    ))
                })?;
                options.user = Some((text, uid, gid));
            }
            "--json" => {
                if opt.has_inline_value() {
                    return Err(usage("--json takes no value"));
                }
                options.json = true;
            }
            _ => return Err(usage(format!("unknown option '{text}'"))),
        }
    }
    if options.command.is_empty() {
        return Err(usage(
            "missing SERVER to probe (e.g. `childguard probe --ready unix:/tmp/r.sock -- redis-server --port 0 --unixsocket /tmp/r.sock`)",
        ));
    }
    if options.settle_timeout_given && !options.ready.is_empty() {
        return Err(usage(
            "--settle-timeout is the bound of the wait without --ready; with --ready, \
             --ready-timeout bounds the wait",
        ));
    }
    if options.client_ready.is_some() && options.client.is_none() {
        return Err(usage("--client-ready needs --client"));
    }
    Ok(Some(options))
}

/// `HUP,INT,TERM`: names with or without `SIG`, or numbers; catchable signals only, each once.
fn parse_signals(text: &str) -> Result<Vec<Signal>, UsageError> {
    let mut signals: Vec<Signal> = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let signal: Signal = part
            .parse()
            .map_err(|e| usage(format!("invalid value for --signals: {part:?}: {e}")))?;
        if !signal.is_catchable() || signal == Signal::NONE || signal == Signal::CONT {
            return Err(usage(format!(
                "invalid value for --signals: {part:?}: only signals a server can catch are probed \
                 (not KILL, STOP, CONT or 0); KILL ends every recommended ladder"
            )));
        }
        if signals.contains(&signal) {
            return Err(usage(format!(
                "invalid value for --signals: {part:?} is named twice"
            )));
        }
        signals.push(signal);
    }
    Ok(signals)
}

/// `NAME`'s uid and gid from `/etc/passwd` (or a number, taken as a uid whose gid is the same).
fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() > 3 && (fields[0] == name || fields[2] == name))
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    })
}

/// Runs the probe; returns the exit code: 0 when a signal ends the server cleanly,
/// [`NO_CLEAN_SIGNAL`] when none does, 125 when the probe itself failed.
pub fn run(options: ProbeOptions) -> i32 {
    let mut results = Vec::new();
    for &signal in &options.signals {
        let mut runs = Vec::new();
        for index in 0..options.runs {
            match measure::one_run(&options, signal) {
                Ok(run) => runs.push(run),
                Err(e) => {
                    say!(
                        "probe of {signal}, run {} of {}: {e}",
                        index + 1,
                        options.runs
                    );
                    return exit_code::FAILED;
                }
            }
        }
        results.push(recommend::judge(signal, runs));
    }
    let recommendation = recommend::ladder(&results);
    // A signal ignored here is ignored in SERVER too unless it installs a handler (`SIG_IGN`
    // survives fork and exec): a shell's `probe … &` ignores INT and QUIT.
    let inherited: Vec<Signal> = options
        .signals
        .iter()
        .copied()
        .filter(|&s| {
            measure::disposition(std::process::id(), s) == Ok(measure::Disposition::Ignored)
        })
        .collect();
    let text = match options.json {
        true => report::json(&options, &results, &recommendation, &inherited),
        false => report::table(&options, &results, &recommendation, &inherited),
    };
    if !crate::messages::stdout(&text) {
        return exit_code::FAILED;
    }
    match recommendation.clean.is_empty() {
        true => NO_CLEAN_SIGNAL,
        false => 0,
    }
}
