//! `childguard init`'s command line: tini's short options, read as glibc's getopt reads tini's
//! `"p:hvwgle:s"` — clustered (`-vvv`, `-e1`), permuted (options after CMD's name are still
//! ours until `--`) unless `POSIXLY_CORRECT` is set, which stops at the first non-option (tini's
//! own test runs `tini -e 1 … sh -c 'exit N'` that way) — plus tini's environment variables
//! and our long options, which tini does not have (so they never clash with an image's
//! `tini` command line):
//!
//! ```text
//! childguard init [-s] [-g] [-w] [-v…] [-e CODE…] [-p SIGNAL] [--ladder SPEC]
//!                 [--stop-budget DUR] [--ready COND --ready-file PATH] [--no-contain]
//!                 -- CMD [ARG...]
//! ```

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use childguard::{Ladder, Ready, Signal};

use crate::args::UsageError;

/// The environment variables read (tini's, and ours).
pub const SUBREAPER_ENVS: [&str; 2] = ["TINI_SUBREAPER", "CHILDGUARD_SUBREAPER"];
/// `-g` by environment.
pub const KILL_GROUP_ENV: &str = "TINI_KILL_PROCESS_GROUP";
/// The verbosity by environment (a number).
pub const VERBOSITY_ENV: &str = "TINI_VERBOSITY";
/// `--stop-budget` by environment.
pub const STOP_BUDGET_ENV: &str = "CHILDGUARD_STOP_BUDGET";

/// The stop budget when none is given: `docker stop`'s default 10 s grace, minus a margin of
/// 1 s for the engine's own latency.
pub const DEFAULT_STOP_BUDGET: Duration = Duration::from_secs(9);

/// The default ladder: the stop signal, then `KILL`. The `TERM` grace is whatever the budget
/// leaves (see `stop::fit`).
pub const DEFAULT_LADDER: &str = "TERM:8s,KILL:1s";

/// `childguard init` options.
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// `-s`, `TINI_SUBREAPER`, `CHILDGUARD_SUBREAPER`.
    pub subreaper: bool,
    /// `-g`, `TINI_KILL_PROCESS_GROUP`: signals go to CMD's process group.
    pub kill_group: bool,
    /// `-w`: a warning per zombie reaped.
    pub warn_on_reap: bool,
    /// tini's verbosity: 1 by default (warnings), `-v` adds one, `TINI_VERBOSITY` sets it.
    pub verbosity: u32,
    /// `-e CODE`: CMD exit codes reported as 0.
    pub expect: [bool; 256],
    /// `-p SIGNAL`: our parent-death signal.
    pub parent_death: Option<Signal>,
    /// `--ladder` (else `CHILDGUARD_LADDER`, else [`DEFAULT_LADDER`]).
    pub ladder: Ladder,
    /// `--stop-budget` (else `CHILDGUARD_STOP_BUDGET`, else [`DEFAULT_STOP_BUDGET`]).
    pub stop_budget: Duration,
    /// `--ready COND` (`tcp:HOST:PORT`, `unix:PATH`, `http:URL`, `exec:CMD`; more than one:
    /// all of them).
    pub ready: Option<Ready>,
    /// `--ready-file PATH`.
    pub ready_file: Option<PathBuf>,
    /// CMD in a cgroup of its own when one can be made (not with `--no-contain`).
    pub contain: bool,
    /// CMD and its arguments (never empty).
    pub command: Vec<OsString>,
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    /// Run CMD.
    Run(Box<InitOptions>),
    /// Print this on stdout and exit 0 (`-h`, `-l`, `--version`).
    Print(String),
}

/// An error of `childguard init` (exit 1, as tini's parse errors).
fn usage(message: impl Into<String>) -> UsageError {
    UsageError::init(message)
}

/// Parses the arguments after `init` (or after argv[0] when run as `tini`), with `env` read
/// for the variables.
pub fn parse(
    args: Vec<OsString>,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Parsed, UsageError> {
    let mut o = InitOptions {
        subreaper: SUBREAPER_ENVS.iter().any(|name| env(name).is_some()),
        kill_group: env(KILL_GROUP_ENV).is_some(),
        warn_on_reap: false,
        // tini's atoi: a bad number is 0.
        verbosity: env(VERBOSITY_ENV).map_or(1, |v| {
            v.to_str()
                .and_then(|s| s.trim().parse::<u32>().ok())
                .unwrap_or(0)
        }),
        expect: [false; 256],
        parent_death: None,
        ladder: DEFAULT_LADDER.parse().expect("the default ladder parses"),
        stop_budget: DEFAULT_STOP_BUDGET,
        ready: None,
        ready_file: None,
        contain: true,
        command: Vec::new(),
    };
    let mut ladder: Option<Ladder> = None;
    let mut budget: Option<Duration> = None;
    let posixly_correct = env("POSIXLY_CORRECT").is_some();
    // tini: `--version` is honoured as the only argument.
    if args.len() == 1 && args[0] == "--version" {
        return Ok(Parsed::Print(version()));
    }
    let mut operands: Vec<OsString> = Vec::new();
    let mut rest = args.into_iter();
    while let Some(arg) = rest.next() {
        let Some(text) = arg.to_str().map(str::to_owned) else {
            operands.push(arg);
            if posixly_correct {
                break;
            }
            continue;
        };
        if text == "--" {
            break;
        }
        if !text.starts_with('-') || text == "-" {
            operands.push(arg);
            if posixly_correct {
                break;
            }
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (long.to_string(), None),
            };
            let mut value = || -> Result<String, UsageError> {
                match inline.clone() {
                    Some(v) => Ok(v),
                    None => rest
                        .next()
                        .ok_or_else(|| usage(format!("--{name} needs a value")))?
                        .into_string()
                        .map_err(|v| usage(format!("--{name}: {v:?} is not UTF-8"))),
                }
            };
            match name.as_str() {
                "help" => return Ok(Parsed::Print(crate::help::INIT.to_string())),
                "version" => return Ok(Parsed::Print(version())),
                "ladder" => {
                    let text = value()?;
                    ladder = Some(text.parse::<Ladder>().map_err(|e| {
                        usage(format!("invalid value for --ladder: {text:?}: {e}"))
                    })?);
                }
                "stop-budget" => budget = Some(parse_budget("--stop-budget", &value()?)?),
                "ready" => {
                    let text = value()?;
                    let ready = crate::with::parse_ready(&text)?;
                    if matches!(ready, Ready::Notify | Ready::Output(_)) {
                        return Err(usage(format!(
                            "invalid value for --ready: {text:?}: init checks CMD from \
                             outside (tcp:, unix:, http:, exec:): CMD's NOTIFY_SOCKET and \
                             output stay the container's"
                        )));
                    }
                    // More than one: every one must hold.
                    o.ready = Some(match o.ready.take() {
                        None => ready,
                        Some(Ready::All(mut all)) => {
                            all.push(ready);
                            Ready::all(all)
                        }
                        Some(first) => Ready::all([first, ready]),
                    });
                }
                "ready-file" => o.ready_file = Some(PathBuf::from(value()?)),
                "no-contain" if inline.is_none() => o.contain = false,
                _ => return Err(usage(format!("unknown option '{text}'"))),
            }
            continue;
        }
        // A cluster of short options: `-vvv`, `-e1`, `-se 3`.
        let letters: Vec<char> = text[1..].chars().collect();
        let mut i = 0;
        while i < letters.len() {
            let letter = letters[i];
            i += 1;
            let mut value = |i: &mut usize| -> Result<String, UsageError> {
                if *i < letters.len() {
                    let v: String = letters[*i..].iter().collect();
                    *i = letters.len();
                    return Ok(v);
                }
                rest.next()
                    .ok_or_else(|| usage(format!("option -{letter} needs a value")))?
                    .into_string()
                    .map_err(|v| usage(format!("-{letter}: {v:?} is not UTF-8")))
            };
            match letter {
                'h' => return Ok(Parsed::Print(crate::help::INIT.to_string())),
                'l' => return Ok(Parsed::Print(LICENSE.to_string())),
                's' => o.subreaper = true,
                'g' => o.kill_group = true,
                'w' => o.warn_on_reap = true,
                'v' => o.verbosity += 1,
                'e' => {
                    let v = value(&mut i)?;
                    let code = v.parse::<u16>().ok().filter(|&c| c <= 255).ok_or_else(|| {
                        usage(format!(
                            "invalid value for -e: {v:?} (an exit code from 0 to 255)"
                        ))
                    })?;
                    o.expect[usize::from(code)] = true;
                }
                'p' => {
                    let v = value(&mut i)?;
                    o.parent_death = Some(parse_signal(&v)?);
                }
                other => return Err(usage(format!("unknown option '-{other}' (in '{text}')"))),
            }
        }
    }
    operands.extend(rest);
    if operands.is_empty() {
        return Err(usage(
            "missing CMD to run (e.g. `childguard init -- server --port 80`)",
        ));
    }
    o.command = operands;
    o.ladder = match ladder {
        Some(ladder) => ladder,
        None => match env(childguard::LADDER_ENV) {
            Some(text) => {
                let text = text.to_string_lossy().into_owned();
                text.parse().map_err(|e| {
                    usage(format!("invalid {}: {text:?}: {e}", childguard::LADDER_ENV))
                })?
            }
            None => o.ladder,
        },
    };
    o.stop_budget = match budget {
        Some(budget) => budget,
        None => match env(STOP_BUDGET_ENV) {
            Some(text) => parse_budget(STOP_BUDGET_ENV, &text.to_string_lossy())?,
            None => DEFAULT_STOP_BUDGET,
        },
    };
    if o.ready.is_some() != o.ready_file.is_some() {
        return Err(usage(
            "--ready and --ready-file go together: the file appears when COND holds",
        ));
    }
    Ok(Parsed::Run(Box::new(o)))
}

/// A budget: a duration (`9s`, `28s`, `1m`, or seconds), more than zero.
fn parse_budget(what: &str, text: &str) -> Result<Duration, UsageError> {
    match crate::duration::parse_timeout(text) {
        Ok(Some(budget)) => Ok(budget),
        Ok(None) => Err(usage(format!(
            "invalid value for {what}: {text:?}: the budget must be more than 0"
        ))),
        Err(why) => Err(usage(format!("invalid value for {what}: {text:?}: {why}"))),
    }
}

/// `-p`'s signal: tini's names (`SIGUSR1`), also without `SIG`, or a number.
fn parse_signal(text: &str) -> Result<Signal, UsageError> {
    match text.parse::<Signal>() {
        Ok(signal) if signal != Signal::NONE => Ok(signal),
        _ => Err(usage(format!(
            "invalid value for -p: {text:?} (a signal name, e.g. SIGKILL or SIGUSR1)"
        ))),
    }
}

fn version() -> String {
    format!("childguard init {}\n", env!("CARGO_PKG_VERSION"))
}

/// `-l`.
const LICENSE: &str =
    "childguard is dual-licensed under MIT or Apache-2.0 (see its LICENSE files).\n\
`childguard init` follows the behaviour of tini (MIT, Copyright (c) 2015 Thomas Orozco); no \
tini code is included.\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_with(args: &[&str], vars: &[(&str, &str)]) -> Result<Parsed, UsageError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
        };
        parse(args.iter().map(OsString::from).collect(), &env)
    }

    fn options(args: &[&str], vars: &[(&str, &str)]) -> InitOptions {
        match parse_with(args, vars) {
            Ok(Parsed::Run(o)) => *o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn tini_options_clustered_and_separate() {
        let o = options(
            &[
                "-vvv", "-sgw", "-e1", "-e", "255", "-p", "SIGUSR1", "--", "x",
            ],
            &[],
        );
        assert_eq!(o.verbosity, 4);
        assert!(o.subreaper && o.kill_group && o.warn_on_reap);
        assert!(o.expect[1] && o.expect[255] && !o.expect[0]);
        assert_eq!(o.parent_death, Some(Signal::USR1));
        assert_eq!(o.command, ["x"]);
    }

    #[test]
    fn permuted_unless_posixly_correct() {
        // getopt permutes: `-c` after CMD's name is an option (unknown), as with tini.
        let err = parse_with(&["-e", "1", "sh", "-c", "exit 1"], &[]).unwrap_err();
        assert!(err.to_string().contains("'-c'"), "{err}");
        let o = options(
            &["-e", "1", "sh", "-c", "exit 1"],
            &[("POSIXLY_CORRECT", "1")],
        );
        assert_eq!(o.command, ["sh", "-c", "exit 1"]);
        // Permuted: options after CMD's name, operands kept in order.
        let o = options(&["cat", "-s", "file"], &[]);
        assert!(o.subreaper);
        assert_eq!(o.command, ["cat", "file"]);
    }

    #[test]
    fn environment() {
        let o = options(
            &["x"],
            &[
                ("TINI_SUBREAPER", ""),
                ("TINI_KILL_PROCESS_GROUP", "1"),
                ("TINI_VERBOSITY", "3"),
                ("CHILDGUARD_STOP_BUDGET", "28s"),
            ],
        );
        assert!(o.subreaper && o.kill_group);
        assert_eq!(o.verbosity, 3);
        assert_eq!(o.stop_budget, Duration::from_secs(28));
        assert!(options(&["x"], &[("CHILDGUARD_SUBREAPER", "1")]).subreaper);
        assert_eq!(options(&["x"], &[]).verbosity, 1);
    }

    #[test]
    fn ours_long_options() {
        let o = options(
            &[
                "--ladder",
                "INT:5s,KILL",
                "--stop-budget=3s",
                "--ready",
                "unix:/tmp/s",
                "--ready-file",
                "/tmp/ready",
                "--no-contain",
                "--",
                "x",
            ],
            &[],
        );
        assert_eq!(o.ladder.to_string(), "INT:5s,KILL:1s");
        assert_eq!(o.stop_budget, Duration::from_secs(3));
        assert!(o.ready.is_some());
        assert_eq!(o.ready_file, Some(PathBuf::from("/tmp/ready")));
        assert!(!o.contain && options(&["x"], &[]).contain);
    }

    #[test]
    fn bad_input_names_the_input() {
        let cases: &[(&[&str], &str)] = &[
            (&["-e", "300", "x"], "\"300\""),
            (&["-e", "-1", "x"], "\"-1\""),
            (&["-e"], "-e needs a value"),
            (&["-p", "SIGNOPE", "x"], "\"SIGNOPE\""),
            (&["-x", "y"], "'-x'"),
            (&[], "missing CMD"),
            (&["--"], "missing CMD"),
            (&["--stop-budget", "soon", "x"], "\"soon\""),
            (&["--stop-budget", "0", "x"], "more than 0"),
            (&["--ladder", "TERM:1x", "x"], "\"TERM:1x\""),
            (&["--ready", "unix:/s", "x"], "--ready-file"),
            (&["--bogus", "x"], "'--bogus'"),
            (
                &["--ready", "notify", "--ready-file", "/r", "x"],
                "init checks CMD from outside",
            ),
        ];
        for (args, needle) in cases {
            let err = parse_with(args, &[]).unwrap_err().to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn version_help_license() {
        for args in [&["--version"][..], &["-h"], &["-l"], &["--help"]] {
            assert!(
                matches!(parse_with(args, &[]), Ok(Parsed::Print(_))),
                "{args:?}"
            );
        }
    }
}
