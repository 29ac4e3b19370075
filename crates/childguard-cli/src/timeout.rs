//! `childguard timeout` (also the program run as `timeout`): GNU `timeout(1)`'s command line,
//! translated into the options of `childguard run`, so the same supervision and close path
//! serve both.
//!
//! ```text
//! timeout [-s SIG] [-k DUR] [--foreground] [--preserve-status] [-v] DURATION CMD [ARG...]
//! ```
//!
//! Options are read as getopt_long reads them: up to the first operand; short options may be
//! clustered (`-vk5`, `-s0`); long ones take `=VALUE` or the next argument and may be
//! abbreviated to any unique prefix (`--kill=5`). The translation:
//!
//! - `-s SIG` (default `TERM`) is the first rung, `-k DUR` adds a `KILL` rung after DUR. A last
//!   rung's wait is unbounded in practice ([`MAX_GRACE`]), as `timeout` waits for its command.
//! - without `--foreground`, CMD leads a new process group and every signal goes to the group
//!   (timeout puts itself and CMD in a new group and signals it).
//! - a `SIGALRM` childguard receives is the timeout firing, as for `timeout`'s own timer.
//! - after a timeout, a CMD that died of `KILL` gives 137, not 124: timeout reports that it had
//!   to kill (it is itself in the group it `KILL`s; with `--foreground` it forces the status).
//! - every rung is sent, as `timeout` sends `-s SIG` whatever CMD does with it: skipping a rung
//!   CMD ignores (`run`'s default) is off unless asked with `--skip-ignored` (ours, not GNU's; an
//!   abbreviation GNU's options share, `--s`, still means `--signal`).

use std::ffi::OsString;
use std::time::Duration;

use childguard::{Ladder, Rung, Signal, MAX_GRACE};

use crate::args::{Invocation, OnSignal, RunOptions, UsageError};
use crate::{duration, help};

/// The long options, for prefix matching.
const LONG: [&str; 7] = [
    "--foreground",
    "--kill-after",
    "--preserve-status",
    "--signal",
    "--verbose",
    "--help",
    "--version",
];

/// Long options of ours, matched only when no GNU option matches (so `--s` stays `--signal`).
const OURS: [&str; 1] = ["--skip-ignored"];

/// Parses `timeout`'s arguments (after the program name).
pub fn parse<I>(args: I) -> Result<Invocation, UsageError>
where
    I: IntoIterator<Item = OsString>,
{
    let mut args = args.into_iter();
    let mut signal = Signal::TERM;
    let mut kill_after: Option<Duration> = None;
    let mut foreground = false;
    let mut preserve_status = false;
    let mut verbose = false;
    let mut skip_ignored = false;
    let mut operands = Vec::new();
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str().map(str::to_owned) else {
            operands.push(arg);
            break;
        };
        if text == "--" {
            break;
        }
        if !text.starts_with('-') || text == "-" {
            operands.push(arg);
            break;
        }
        // (option, inline value)
        let mut opts: Vec<(char, Option<String>)> = Vec::new();
        if let Some(long) = text.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let full = long_option(name, &text)?;
            let letter = match full {
                "--foreground" => 'f',
                "--kill-after" => 'k',
                "--preserve-status" => 'p',
                "--signal" => 's',
                "--verbose" => 'v',
                "--skip-ignored" => 'i',
                "--help" => 'h',
                _ => 'V',
            };
            if inline.is_some() && !matches!(letter, 'k' | 's') {
                return Err(usage(format!("option '{full}' doesn't allow an argument")));
            }
            opts.push((letter, inline));
        } else {
            let letters = text[1..].char_indices();
            for (at, letter) in letters {
                match letter {
                    'k' | 's' => {
                        let rest = &text[1 + at + letter.len_utf8()..];
                        opts.push((letter, (!rest.is_empty()).then(|| rest.to_string())));
                        break;
                    }
                    'f' | 'p' | 'v' => opts.push((letter, None)),
                    _ => return Err(usage(format!("invalid option -- '{letter}'"))),
                }
            }
        }
        for (letter, inline) in opts {
            let mut value = || -> Result<String, UsageError> {
                match inline.clone() {
                    Some(v) => Ok(v),
                    None => args
                        .next()
                        .ok_or_else(|| usage(format!("option requires an argument -- '{letter}'")))?
                        .into_string()
                        .map_err(|v| usage(format!("invalid argument {v:?}"))),
                }
            };
            match letter {
                'f' => foreground = true,
                'p' => preserve_status = true,
                'v' => verbose = true,
                'i' => skip_ignored = true,
                'h' => return Ok(Invocation::Help(help::TIMEOUT)),
                'V' => return Ok(Invocation::Version),
                'k' => {
                    let text = value()?;
                    kill_after = duration::parse_gnu(&text)
                        .map_err(|_| usage(format!("invalid time interval '{text}'")))?;
                }
                _ => {
                    let text = value()?;
                    signal = text
                        .parse::<Signal>()
                        .map_err(|_| usage(format!("{text}: invalid signal")))?;
                }
            }
        }
    }
    operands.extend(args);
    let mut operands = operands.into_iter();
    let (Some(interval), Some(program)) = (operands.next(), operands.next()) else {
        return Err(usage("missing operand".to_string()));
    };
    let interval_text = interval.to_string_lossy().into_owned();
    let timeout = duration::parse_gnu(&interval_text)
        .map_err(|_| usage(format!("invalid time interval '{interval_text}'")))?;
    let command: Vec<OsString> = std::iter::once(program).chain(operands).collect();
    Ok(Invocation::Run(Box::new(RunOptions {
        ladder: ladder(signal, kill_after).skip_ignored(skip_ignored),
        timeout,
        group: !foreground,
        exit_with_parent: cfg!(any(target_os = "linux", target_os = "android")),
        contain: None,
        limits: childguard::Limits::default(),
        container_engine: None,
        restart: None,
        on_signal: OnSignal::Forward,
        activate: None,
        stop_on_stdin_eof: false,
        stdio_server: false,
        report: None,
        preserve_status,
        gnu_timeout: true,
        verbose,
        command,
    })))
}

/// `-s SIG` and `-k DUR` as a ladder: `SIG` then, after DUR, `KILL`; the last rung waits as
/// long as the command takes (in practice: [`MAX_GRACE`]).
fn ladder(signal: Signal, kill_after: Option<Duration>) -> Ladder {
    let rungs = match kill_after {
        Some(after) => vec![
            Rung::new(signal, after.min(MAX_GRACE)),
            Rung::new(Signal::KILL, MAX_GRACE),
        ],
        None => vec![Rung::new(signal, MAX_GRACE)],
    };
    Ladder::new(rungs).unwrap_or_default()
}

/// The long option `name` (without `--`) abbreviates, if exactly one.
fn long_option(name: &str, text: &str) -> Result<&'static str, UsageError> {
    let wanted = format!("--{name}");
    if let Some(exact) = LONG.iter().chain(&OURS).find(|l| **l == wanted) {
        return Ok(exact);
    }
    let prefix_of = |options: &[&'static str]| -> Vec<&'static str> {
        let matching = options.iter().copied();
        matching.filter(|l| l.starts_with(&wanted)).collect()
    };
    let mut matches = prefix_of(&LONG);
    if matches.is_empty() {
        matches = prefix_of(&OURS);
    }
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(usage(format!("unrecognized option '{text}'"))),
        _ => Err(usage(format!("option '{text}' is ambiguous"))),
    }
}

fn usage(message: String) -> UsageError {
    UsageError::timeout(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_options(args: &[&str]) -> RunOptions {
        match parse(args.iter().map(OsString::from)) {
            Ok(Invocation::Run(o)) => *o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn options_as_getopt_reads_them() {
        let o = run_options(&["-vk5", "-s0", "--pres", "--fore", "1", "sleep", "-s", "2"]);
        assert!(o.verbose && o.preserve_status && !o.group);
        assert_eq!(
            o.ladder.to_string(),
            format!("NOSKIP,0:5s,KILL:{}s", MAX_GRACE.as_secs())
        );
        assert_eq!(o.command, ["sleep", "-s", "2"]);
        let o = run_options(&["--signal=INT", "--kill", "1", "--", "2", "x"]);
        assert_eq!(o.ladder.rungs()[0].signal, Signal::INT);
        assert!(o.group, "timeout's default: a new process group");
        assert_eq!(o.timeout, Some(Duration::from_secs(2)));
        let o = run_options(&["0", "true"]);
        assert_eq!(o.timeout, None);
    }

    #[test]
    fn rungs_are_all_sent_unless_skip_ignored_is_asked() {
        assert!(!run_options(&["1", "x"]).ladder.skips_ignored());
        for asked in ["--skip-ignored", "--sk", "--skip"] {
            assert!(
                run_options(&[asked, "1", "x"]).ladder.skips_ignored(),
                "{asked}"
            );
        }
        // GNU's abbreviation of --signal is not taken from it.
        let o = run_options(&["--s", "INT", "1", "x"]);
        assert_eq!(o.ladder.rungs()[0].signal, Signal::INT);
        assert!(!o.ladder.skips_ignored());
        assert!(parse(["--skip-ignored=1", "1", "x"].map(OsString::from)).is_err());
    }

    #[test]
    fn errors() {
        for args in [
            &["invalid", "sleep", "0"][..],
            &["--kill-after=invalid", "1", "sleep", "0"],
            &["--signal=invalid", "1", "sleep", "0"],
            &["42D", "sleep", "0"],
            &["1"],
            &[],
            &["--ver", "1", "x"],
            &["-x", "1", "x"],
            &["--verbose=1", "1", "x"],
            &["-s"],
        ] {
            let parsed = parse(args.iter().map(OsString::from));
            assert!(parsed.is_err(), "{args:?}: {parsed:?}");
        }
    }
}
