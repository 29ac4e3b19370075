//! `childguard-bench`: childguard measured against a baseline, side by side in one run.
//!
//! ```text
//! childguard-bench [--json] [--reps N] [SCENARIO…]     (default: seed precision overhead)
//! childguard-bench slowserver ARGS…                    (the embedded fixture server)
//! ```
//!
//! Layout: this file parses arguments, dispatches and prints; [`row`] is the output type;
//! [`stats`] the order statistics; [`fixture`] spawns the server both ways; one file per
//! scenario under `scenarios/`, listed in [`scenarios::ALL`].

// Every `unsafe` block of the bench is in `sys`.
#![deny(unsafe_code)]

mod fixture;
mod row;
mod scenarios;
mod stats;
#[allow(unsafe_code)]
mod sys;

use std::ffi::OsString;
use std::process::ExitCode;

use row::Row;
use scenarios::Settings;

/// The error type scenarios return.
pub type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

/// The fewest repetitions a figure should rest on; fewer is allowed, with a warning.
const MIN_REPS: usize = 20;

#[derive(Debug)]
struct Cli {
    json: bool,
    settings: Settings,
    scenarios: Vec<&'static scenarios::Scenario>,
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1).peekable();
    // `childguard ARGS…`: the CLI (the probe scenario), and the hidden subcommand it re-executes
    // itself with for its own fixture.
    if args.peek().is_some_and(|a| a == "childguard") {
        std::process::exit(childguard_cli::main_with(args.skip(1)));
    }
    if args
        .peek()
        .is_some_and(|a| a == childguard_cli::SLOWSERVER_SUBCOMMAND)
    {
        std::process::exit(childguard_cli::main_with(args));
    }
    if args.peek().is_some_and(|a| a == fixture::SUBCOMMAND) {
        let rest: Vec<OsString> = args.skip(1).collect();
        slowserver::main_with(vec![fixture::SUBCOMMAND.into()], rest);
    }
    let cli = match parse(args.collect()) {
        Ok(Some(cli)) => cli,
        Ok(None) => {
            print!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("childguard-bench: {message}");
            eprintln!("Try 'childguard-bench --help' for more information.");
            return ExitCode::from(2);
        }
    };
    // Medians survive some noise, tail percentiles do not: say how busy the machine was.
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        eprintln!(
            "childguard-bench: {cpus} CPUs, load average {}",
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    let mut rows: Vec<Row> = Vec::new();
    for scenario in &cli.scenarios {
        eprintln!("childguard-bench: running {}…", scenario.name);
        match (scenario.run)(&cli.settings) {
            Ok(new) => {
                if cli.json {
                    for row in &new {
                        println!("{}", row.to_json_line());
                    }
                }
                rows.extend(new);
            }
            Err(e) => {
                eprintln!("childguard-bench: scenario {} failed: {e}", scenario.name);
                return ExitCode::FAILURE;
            }
        }
    }
    if !cli.json {
        print!("{}", row::markdown_table(&rows));
    }
    ExitCode::SUCCESS
}

/// `Ok(None)`: `--help` was asked for.
fn parse(args: Vec<OsString>) -> Result<Option<Cli>, String> {
    let mut json = false;
    let mut reps = None;
    let mut names: Vec<String> = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let arg = arg
            .into_string()
            .map_err(|a| format!("argument {a:?} is not UTF-8"))?;
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value.into())),
            _ => (arg.clone(), None),
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" if inline.is_none() => json = true,
            "--reps" => {
                let value: String = match inline {
                    Some(v) => v,
                    None => args
                        .next()
                        .and_then(|v| v.into_string().ok())
                        .ok_or("--reps needs a number")?,
                };
                let n: usize = value
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("--reps: {value:?} is not a positive number"))?;
                if n < MIN_REPS {
                    eprintln!("childguard-bench: warning: --reps {n} is below {MIN_REPS}; medians will be noisy");
                }
                reps = Some(n);
            }
            _ if flag.starts_with('-') => return Err(format!("unknown option '{arg}'")),
            _ => names.push(arg),
        }
    }
    if names.is_empty() {
        names = scenarios::DEFAULT.iter().map(|s| s.to_string()).collect();
    }
    let scenarios = names
        .iter()
        .map(|name| {
            scenarios::find(name).ok_or_else(|| {
                format!(
                    "unknown scenario '{name}' (known: {})",
                    scenarios::known_names()
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Cli {
        json,
        settings: Settings { reps },
        scenarios,
    }))
}

fn usage() -> String {
    let mut text = String::from(
        "\
Usage: childguard-bench [--json] [--reps N] [SCENARIO...]
       childguard-bench slowserver [SLOWSERVER ARGS...]

Measures childguard against a baseline, side by side in one run (repetitions interleaved),
and prints medians: a markdown table, or with --json one JSON object per line with the keys
scenario, metric, ours, baseline, baseline_name, ratio (ours/baseline), unit.
Lower is better everywhere.

Options:
  --json      one JSON object per row instead of a markdown table
  --reps N    repetitions per scenario (default: 20; precision 50; seed's baseline is
              always at most 3 reps of 10 s)
  -h, --help  print this help

Scenarios (default: ",
    );
    text.push_str(&scenarios::DEFAULT.join(" "));
    text.push_str("):\n");
    for s in scenarios::ALL {
        text.push_str(&format!("  {:<10}  {}\n", s.name, s.about));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Option<Cli>, String> {
        parse(args.iter().map(OsString::from).collect())
    }

    #[test]
    fn defaults() {
        let cli = run(&[]).unwrap().unwrap();
        assert!(!cli.json);
        assert_eq!(cli.settings.reps, None);
        let names: Vec<_> = cli.scenarios.iter().map(|s| s.name).collect();
        assert_eq!(names, scenarios::DEFAULT);
    }

    #[test]
    fn flags_and_names() {
        let cli = run(&["--json", "--reps=30", "overhead"]).unwrap().unwrap();
        assert!(cli.json);
        assert_eq!(cli.settings.reps, Some(30));
        assert_eq!(cli.scenarios.len(), 1);
        assert!(run(&["--reps", "25", "seed"]).unwrap().is_some());
        assert!(run(&["--help"]).unwrap().is_none());
    }

    #[test]
    fn errors_name_the_culprit() {
        let err = run(&["seed", "bogus"]).unwrap_err();
        assert!(
            err.contains("'bogus'") && err.contains("seed, precision, overhead"),
            "{err}"
        );
        assert!(run(&["--reps"]).unwrap_err().contains("--reps"));
        assert!(run(&["--reps", "0"]).unwrap_err().contains("--reps"));
        assert!(run(&["--fast"]).unwrap_err().contains("--fast"));
    }
}
