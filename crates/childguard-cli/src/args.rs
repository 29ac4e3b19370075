//! Command-line parsing, by hand (as slowserver does): every error names the argument.

use std::ffi::OsString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use childguard::Ladder;

use crate::{duration, help, messages, SLOWSERVER_SUBCOMMAND};

/// What the command line asks for.
#[derive(Debug)]
pub enum Invocation {
    /// `childguard run …`.
    Run(Box<RunOptions>),
    /// `childguard demo`.
    Demo,
    /// `childguard init …`, with the arguments after `init` (parsed by `init`, which exits 1
    /// on a bad one, as tini does).
    Init(Vec<OsString>),
    /// `childguard with …`.
    With(crate::with::WithOptions),
    /// `childguard probe …`.
    Probe(Box<crate::probe::ProbeOptions>),
    /// Print this help text and exit 0.
    Help(&'static str),
    /// `--version`.
    Version,
    /// The hidden slowserver subcommand, with its arguments.
    Slowserver(Vec<OsString>),
}

/// How `--report` writes the close report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    /// The `CloseReport` `Display` line.
    Text,
    /// The `CloseReport` as one line of JSON.
    Json,
}

/// What a signal childguard receives does (`--on-signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnSignal {
    /// INT, TERM, HUP, QUIT, USR1, USR2 and any signal the ladder names are forwarded to CMD
    /// at once, in place of the first rung (with its grace), and the ladder goes on from its
    /// second rung; any other caught signal climbs the ladder as written.
    #[default]
    Forward,
    /// Every caught signal climbs the ladder as written (for a server whose first rung must be
    /// the one the ladder says, e.g. postgres' INT).
    Ladder,
}

/// `childguard run` options.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// `--ladder`, else `CHILDGUARD_LADDER`, else the library default.
    pub ladder: Ladder,
    /// `--timeout` (`None`: no timeout, also for `--timeout 0`).
    pub timeout: Option<Duration>,
    /// `--group`.
    pub group: bool,
    /// `PR_SET_PDEATHSIG` with the first rung's signal: on unless `--no-exit-with-parent` (or
    /// not on Linux).
    pub exit_with_parent: bool,
    /// `--contain[=BACKEND]` (a limit implies `--contain=cgroup`).
    pub contain: Option<childguard::Containment>,
    /// `--container ENGINE`: CMD launches a container with ENGINE, stopped through it.
    pub container_engine: Option<OsString>,
    /// `--memory-max`, `--memory-high`, `--tasks-max`, `--cpu-quota` on CMD's cgroup.
    pub limits: childguard::Limits,
    /// `--restart` (with `--restart-delay`, `--restart-limit`): CMD started again when it
    /// exits, as the policy says (`run_restarting`).
    pub restart: Option<childguard::Restart>,
    /// `--on-signal`.
    pub on_signal: OnSignal,
    /// `--activate` (`Some(None)`) or `--activate=NAME` (`Some(Some(NAME))`).
    pub activate: Option<Option<String>>,
    /// `--stop-on-stdin-eof`.
    pub stop_on_stdin_eof: bool,
    /// `--stdio-server`: CMD is a stdio server of our parent (an MCP/LSP host), on our stdin
    /// and stdout; the ladder starts when the host closes our stdin or exits (see `host`).
    pub stdio_server: bool,
    /// `--report`.
    pub report: Option<ReportFormat>,
    /// `--preserve-status`.
    pub preserve_status: bool,
    /// Run as GNU `timeout` (`childguard timeout`): a received `SIGALRM` is the timeout, and
    /// a CMD `KILL`ed after the timeout gives 137.
    pub gnu_timeout: bool,
    /// `timeout -v`: name each signal sent on stderr.
    pub verbose: bool,
    /// CMD and its arguments (never empty).
    pub command: Vec<OsString>,
}

/// A bad command line. The message names the offending argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError {
    message: String,
    /// The help command to suggest.
    hint: &'static str,
}

/// A long option as given: `--name=value` (the value inline) or `--name` (the value, if it
/// takes one, is the next argument). What `with` and `probe` share; `init` and `timeout`
/// follow tini's and coreutils' own rules and have parsers of their own.
pub(crate) struct LongOpt {
    pub(crate) name: String,
    inline: Option<String>,
}

impl LongOpt {
    /// Splits `text` at its first `=` when it is a long option.
    pub(crate) fn split(text: &str) -> LongOpt {
        match text.split_once('=') {
            Some((n, v)) if n.starts_with("--") => LongOpt {
                name: n.to_string(),
                inline: Some(v.to_string()),
            },
            _ => LongOpt {
                name: text.to_string(),
                inline: None,
            },
        }
    }

    /// Whether a value came inline (`--name=value`): an error for a flag.
    pub(crate) fn has_inline_value(&self) -> bool {
        self.inline.is_some()
    }

    /// The option's value: the inline one, else the next of `args`; none is `usage`'s error
    /// "NAME needs a value".
    pub(crate) fn value(
        &self,
        args: &mut impl Iterator<Item = std::ffi::OsString>,
        usage: fn(String) -> UsageError,
    ) -> Result<String, UsageError> {
        match &self.inline {
            Some(v) => Ok(v.clone()),
            None => args
                .next()
                .map(|v| v.to_string_lossy().into_owned())
                .ok_or_else(|| usage(format!("{} needs a value", self.name))),
        }
    }
}

/// `--ready-timeout DUR` (`0`/`inf`: none), as `with` and `probe` take it.
pub(crate) fn ready_timeout(
    text: &str,
    usage: fn(String) -> UsageError,
) -> Result<Option<std::time::Duration>, UsageError> {
    crate::duration::parse_timeout(text).map_err(|why| {
        usage(format!(
            "invalid value for --ready-timeout: {text:?}: {why}"
        ))
    })
}

impl UsageError {
    fn top(message: impl Into<String>) -> UsageError {
        UsageError {
            message: message.into(),
            hint: "childguard --help",
        }
    }

    /// An error of `childguard with`.
    pub fn with(message: impl Into<String>) -> UsageError {
        UsageError {
            message: message.into(),
            hint: "childguard with --help",
        }
    }

    /// An error of `childguard probe`.
    pub fn probe(message: impl Into<String>) -> UsageError {
        UsageError {
            message: message.into(),
            hint: "childguard probe --help",
        }
    }

    /// An error of `childguard timeout` (or `timeout`), pointing at its help.
    pub fn timeout(message: impl Into<String>) -> UsageError {
        UsageError {
            message: message.into(),
            hint: "timeout --help",
        }
    }

    /// An error of `childguard init` (or `tini`), which is Linux only.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub fn init(message: impl Into<String>) -> UsageError {
        UsageError {
            message: message.into(),
            hint: "childguard init -h",
        }
    }

    fn run(message: impl Into<String>) -> UsageError {
        UsageError {
            message: message.into(),
            hint: "childguard run --help",
        }
    }

    /// The help command to suggest after the message.
    pub fn hint(&self) -> &'static str {
        self.hint
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UsageError {}

/// Parses the arguments after the program name.
pub fn parse<I>(args: I) -> Result<Invocation, UsageError>
where
    I: IntoIterator<Item = OsString>,
{
    let mut args = args.into_iter();
    let Some(first) = args.next() else {
        return Err(UsageError::top("missing subcommand: run or demo"));
    };
    match first.to_str() {
        Some("run") => parse_run(args),
        Some("with") => match crate::with::parse(args)? {
            Some(options) => Ok(Invocation::With(options)),
            None => Ok(Invocation::Help(help::WITH)),
        },
        Some("probe") => match crate::probe::parse(args)? {
            Some(options) => Ok(Invocation::Probe(Box::new(options))),
            None => Ok(Invocation::Help(help::PROBE)),
        },
        Some("timeout") => {
            messages::set_program("timeout");
            crate::timeout::parse(args)
        }
        Some("demo") => parse_demo(args),
        Some("init") => Ok(Invocation::Init(args.collect())),
        Some("help") => Ok(Invocation::Help(help_topic(args.next())?)),
        Some("-h" | "--help") => Ok(Invocation::Help(help::TOP)),
        Some("-V" | "--version") => Ok(Invocation::Version),
        Some(SLOWSERVER_SUBCOMMAND) => Ok(Invocation::Slowserver(args.collect())),
        _ => Err(UsageError::top(format!(
            "unknown subcommand {first:?} (expected run or demo)"
        ))),
    }
}

fn help_topic(topic: Option<OsString>) -> Result<&'static str, UsageError> {
    match topic.as_ref().map(|t| t.to_str()) {
        None => Ok(help::TOP),
        Some(Some("run")) => Ok(help::RUN),
        Some(Some("demo")) => Ok(help::DEMO),
        Some(Some("timeout")) => Ok(help::TIMEOUT),
        Some(Some("with")) => Ok(help::WITH),
        Some(Some("init")) => Ok(help::INIT),
        Some(Some("probe")) => Ok(help::PROBE),
        Some(_) => Err(UsageError::top(format!(
            "no help for {:?} (try run or demo)",
            topic.unwrap_or_default()
        ))),
    }
}

fn parse_demo(mut args: impl Iterator<Item = OsString>) -> Result<Invocation, UsageError> {
    let Some(arg) = args.next() else {
        return Ok(Invocation::Demo);
    };
    match arg.to_str() {
        Some("-h" | "--help") => Ok(Invocation::Help(help::DEMO)),
        _ => Err(UsageError {
            message: format!("demo takes no arguments (got {arg:?})"),
            hint: "childguard demo --help",
        }),
    }
}

/// Flags as they are being collected.
#[derive(Debug, Default)]
struct Flags {
    ladder: Option<Ladder>,
    timeout: Option<Duration>,
    group: bool,
    exit_with_parent: bool,
    contain: Option<childguard::Containment>,
    container_engine: Option<OsString>,
    no_exit_with_parent: bool,
    on_signal: OnSignal,
    activate: Option<Option<String>>,
    stop_on_stdin_eof: bool,
    stdio_server: bool,
    report: Option<ReportFormat>,
    preserve_status: bool,
    no_skip_ignored: bool,
    limits: childguard::Limits,
    restart: RestartFlags,
}

fn parse_run(mut args: impl Iterator<Item = OsString>) -> Result<Invocation, UsageError> {
    let mut flags = Flags::default();
    let mut command = Vec::new();
    while let Some(arg) = args.next() {
        if arg == "--" {
            command.extend(args);
            break;
        }
        // The first argument that is not an option starts CMD (as in `timeout 5 sleep 10`).
        if !arg.as_bytes().starts_with(b"-") || arg == "-" {
            command.push(arg);
            command.extend(args);
            break;
        }
        let Some(text) = arg.to_str() else {
            return Err(UsageError::run(format!("unknown option {arg:?}")));
        };
        if let Some(help) = flag(&mut flags, text, &mut args)? {
            return Ok(help);
        }
    }
    if command.is_empty() {
        return Err(UsageError::run(
            "missing CMD to run (e.g. `childguard run -- sleep 10`)",
        ));
    }
    if flags.stdio_server && flags.stop_on_stdin_eof {
        return Err(UsageError::run(
            "--stdio-server and --stop-on-stdin-eof cannot go together: --stdio-server leaves \
             stdin to CMD (the host's messages) and only watches it close; \
             --stop-on-stdin-eof reads it itself and gives CMD /dev/null",
        ));
    }
    if flags.stdio_server && flags.activate.is_some() {
        return Err(UsageError::run(
            "--stdio-server and --activate cannot go together: --activate prints the socket \
             path on stdout, which is the host's channel to CMD with --stdio-server",
        ));
    }
    let restart = restart_options(&flags)?;
    let ladder = match flags.ladder {
        Some(ladder) => ladder,
        None => Ladder::from_env_or_default().map_err(|e| UsageError::run(e.to_string()))?,
    };
    // `--no-skip-ignored` is `NOSKIP,` before the ladder (run.rs passes it to the builder).
    let ladder = match flags.no_skip_ignored {
        true => ladder.skip_ignored(false),
        false => ladder,
    };
    Ok(Invocation::Run(Box::new(RunOptions {
        ladder,
        timeout: flags.timeout,
        group: flags.group,
        // A limit is a limit on CMD's cgroup: it implies one.
        contain: match flags.contain {
            None if !flags.limits.is_empty() => Some(childguard::Containment::Cgroup),
            contain => contain,
        },
        limits: flags.limits,
        container_engine: flags.container_engine,
        restart,
        // On by default where the kernel has it; `--exit-with-parent` insists (and fails
        // elsewhere).
        exit_with_parent: flags.exit_with_parent
            || (cfg!(any(target_os = "linux", target_os = "android"))
                && !flags.no_exit_with_parent),
        on_signal: flags.on_signal,
        activate: flags.activate,
        stop_on_stdin_eof: flags.stop_on_stdin_eof,
        stdio_server: flags.stdio_server,
        report: flags.report,
        preserve_status: flags.preserve_status,
        gnu_timeout: false,
        verbose: false,
        command,
    })))
}

/// Applies one option (`--flag`, `--flag=value` or `--flag value`). Returns the help text for
/// `--help`.
fn flag(
    flags: &mut Flags,
    text: &str,
    rest: &mut impl Iterator<Item = OsString>,
) -> Result<Option<Invocation>, UsageError> {
    let (name, inline) = match text.split_once('=') {
        Some((name, value)) if name.starts_with("--") => (name, Some(value.to_string())),
        _ => (text, None),
    };
    let mut value = || -> Result<String, UsageError> {
        let value = match inline.clone() {
            Some(v) => v,
            None => rest
                .next()
                .ok_or_else(|| UsageError::run(format!("{name} needs a value")))?
                .into_string()
                .map_err(|v| {
                    UsageError::run(format!("invalid value for {name}: {v:?} is not UTF-8"))
                })?,
        };
        Ok(value)
    };
    let no_value = |set: &mut bool| {
        if inline.is_some() {
            return Err(UsageError::run(format!("{name} takes no value")));
        }
        *set = true;
        Ok(())
    };
    match name {
        "-h" | "--help" => return Ok(Some(Invocation::Help(help::RUN))),
        "-V" | "--version" => return Ok(Some(Invocation::Version)),
        "--on-signal" => {
            flags.on_signal = match value()?.as_str() {
                "forward" => OnSignal::Forward,
                "ladder" => OnSignal::Ladder,
                other => {
                    return Err(UsageError::run(format!(
                        "invalid value for --on-signal: {other:?} (expected forward or ladder)"
                    )))
                }
            };
        }
        "--ladder" => {
            let text = value()?;
            let ladder = text.parse::<Ladder>().map_err(|e| {
                UsageError::run(format!("invalid value for --ladder: {text:?}: {e}"))
            })?;
            flags.ladder = Some(ladder);
        }
        "--timeout" => {
            let text = value()?;
            flags.timeout = duration::parse_timeout(&text).map_err(|why| {
                UsageError::run(format!("invalid value for --timeout: {text:?}: {why}"))
            })?;
        }
        "--report" => {
            flags.report = Some(match value()?.as_str() {
                "text" => ReportFormat::Text,
                "json" => ReportFormat::Json,
                other => {
                    return Err(UsageError::run(format!(
                        "invalid value for --report: {other:?} (expected text or json)"
                    )))
                }
            });
        }
        "--activate" => {
            // The name is optional, so it can only be given inline: `--activate=nbd`.
            if inline.as_deref() == Some("") {
                return Err(UsageError::run(
                    "invalid value for --activate: the name is empty (use --activate alone for the default)",
                ));
            }
            flags.activate = Some(inline);
        }
        "--memory-max" | "--memory-high" | "--tasks-max" | "--cpu-quota" => {
            let text = value()?;
            flags
                .limits
                .set(&name[2..], &text)
                .map_err(|why| UsageError::run(format!("invalid value for {name}: {why}")))?;
        }
        "--restart" | "--restart-delay" | "--restart-limit" => {
            let text = value()?;
            flags.restart.set(name, &text).map_err(UsageError::run)?;
        }
        "--group" => no_value(&mut flags.group)?,
        "--exit-with-parent" => no_value(&mut flags.exit_with_parent)?,
        "--contain" => flags.contain = Some(containment(inline.as_deref())?),
        "--container" if !cfg!(target_os = "linux") => {
            return Err(UsageError::run("--container needs Linux"))
        }
        "--container" => flags.container_engine = Some(value()?.into()),
        "--no-exit-with-parent" => no_value(&mut flags.no_exit_with_parent)?,
        "--stop-on-stdin-eof" => no_value(&mut flags.stop_on_stdin_eof)?,
        "--stdio-server" => no_value(&mut flags.stdio_server)?,
        "--preserve-status" => no_value(&mut flags.preserve_status)?,
        "--no-skip-ignored" => no_value(&mut flags.no_skip_ignored)?,
        _ => return Err(UsageError::run(unknown_option(text, name))),
    }
    Ok(None)
}

/// `--restart`'s policy with `--restart-delay` and `--restart-limit` (which need it), refused
/// with the options that tie a socket or stdio to one CMD.
fn restart_options(flags: &Flags) -> Result<Option<childguard::Restart>, UsageError> {
    let restart = flags.restart.restart().map_err(UsageError::run)?;
    if restart.is_some() && (flags.activate.is_some() || flags.stdio_server) {
        return Err(UsageError::run(
            "--restart cannot go with --activate or --stdio-server (their socket and stdio \
             belong to one CMD)",
        ));
    }
    Ok(restart)
}

/// `--restart`, `--restart-delay` and `--restart-limit` as given, for `run` and for each
/// server of `with`.
#[derive(Debug, Default, Clone)]
pub(crate) struct RestartFlags {
    policy: Option<childguard::RestartPolicy>,
    delay: Option<(Duration, Duration)>,
    limit: Option<(u32, Duration)>,
}

impl RestartFlags {
    /// Takes the option `name` (one of the three) with its value; `Err`: the message.
    pub(crate) fn set(&mut self, name: &str, text: &str) -> Result<(), String> {
        let bad = |why: String| format!("invalid value for {name}: {text:?}: {why}");
        match name {
            "--restart" => self.policy = Some(restart_policy(text)?),
            "--restart-delay" => self.delay = Some(restart_delay(text).map_err(bad)?),
            "--restart-limit" => self.limit = Some(restart_limit(text).map_err(bad)?),
            other => return Err(format!("{other}: not a restart option")),
        }
        Ok(())
    }

    /// The restart the options ask for (`None` without `--restart`); `Err`: a delay or a limit
    /// without a policy.
    pub(crate) fn restart(&self) -> Result<Option<childguard::Restart>, String> {
        let Some(policy) = self.policy else {
            if self.delay.is_some() || self.limit.is_some() {
                return Err(
                    "--restart-delay and --restart-limit need --restart on-failure|always".into(),
                );
            }
            return Ok(None);
        };
        let mut restart = childguard::Restart::new(policy);
        if let Some((first, max)) = self.delay {
            restart = restart.delay(first, max);
        }
        if let Some((burst, interval)) = self.limit {
            restart = restart.limit(burst, interval);
        }
        Ok(Some(restart))
    }
}

/// `--restart`'s value.
fn restart_policy(text: &str) -> Result<childguard::RestartPolicy, String> {
    match text {
        "no" => Ok(childguard::RestartPolicy::Never),
        "on-failure" => Ok(childguard::RestartPolicy::OnFailure),
        "always" => Ok(childguard::RestartPolicy::Always),
        other => Err(format!(
            "invalid value for --restart: {other:?} (expected no, on-failure or always)"
        )),
    }
}

/// `DUR` or `FIRST..MAX` (humantime: `100ms`, `5s`; `0` for none).
fn restart_delay(text: &str) -> Result<(Duration, Duration), String> {
    let one = |t: &str| -> Result<Duration, String> {
        match t.trim() {
            "0" => Ok(Duration::ZERO),
            t => humantime::parse_duration(t).map_err(|e| format!("{t:?}: {e}")),
        }
    };
    match text.split_once("..") {
        Some((first, max)) => {
            let (first, max) = (one(first)?, one(max)?);
            if max < first {
                return Err("the maximum is below the first delay".into());
            }
            Ok((first, max))
        }
        None => one(text).map(|d| (d, d)),
    }
}

/// `N/DUR`: at most N starts within DUR (N at least 1).
fn restart_limit(text: &str) -> Result<(u32, Duration), String> {
    let (n, window) = text
        .split_once('/')
        .ok_or("expected N/DUR, such as 5/60s")?;
    let n: u32 = n
        .trim()
        .parse()
        .map_err(|_| format!("{n:?} is not a count of starts"))?;
    if n == 0 {
        return Err("at least 1 start".into());
    }
    let window =
        humantime::parse_duration(window.trim()).map_err(|e| format!("{window:?}: {e}"))?;
    Ok((n, window))
}

/// "unknown option", with the way to say it for timeout(1)'s options.
/// `--contain` alone (the best backend that works here, or exit 125 naming each), or
/// `--contain=BACKEND` for one by name.
fn containment(value: Option<&str>) -> Result<childguard::Containment, UsageError> {
    use childguard::Containment;
    Ok(match value {
        None => Containment::Any,
        Some("cgroup") => Containment::Cgroup,
        Some("pid-namespace") => Containment::PidNamespace,
        Some("subreaper") => Containment::Subreaper,
        Some("best-effort") => Containment::BestEffort,
        Some(other) => {
            return Err(UsageError::run(format!(
                "invalid value for --contain: {other:?} (expected cgroup, pid-namespace, \
                 subreaper or best-effort, or --contain alone for the best that works here)"
            )))
        }
    })
}

fn unknown_option(text: &str, name: &str) -> String {
    let short = |letter: &str| name.starts_with(letter) && !name.starts_with("--");
    let hint = if name == "--signal" || short("-s") {
        Some("the signal is the first rung of --ladder: `-s INT -k 5` is `--ladder INT:5s,KILL`")
    } else if name == "--kill-after" || short("-k") {
        Some("the KILL is the last rung of --ladder: `-k 5` is `--ladder TERM:5s,KILL`")
    } else if name == "--foreground" {
        Some("CMD stays in childguard's process group by default; --group is timeout's default")
    } else if name == "--verbose" || short("-v") {
        Some("--report text names every signal sent and when")
    } else {
        None
    };
    match hint {
        Some(hint) => format!(
            "unknown option '{text}' ({hint}; or use `childguard timeout`, which takes timeout(1)'s options)"
        ),
        None => format!("unknown option '{text}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Invocation, UsageError> {
        parse(args.iter().map(OsString::from))
    }

    fn run_options(args: &[&str]) -> RunOptions {
        match parse_strs(args) {
            Ok(Invocation::Run(options)) => *options,
            other => panic!("{args:?} gave {other:?}"),
        }
    }

    #[test]
    fn every_flag() {
        let o = run_options(&[
            "run",
            "--ladder",
            "HUP:100ms,KILL",
            "--timeout=200ms",
            "--group",
            "--exit-with-parent",
            "--activate=nbd",
            "--stop-on-stdin-eof",
            "--report",
            "json",
            "--preserve-status",
            "--",
            "slowserver",
            "--ignore-eof",
        ]);
        assert_eq!(o.ladder.to_string(), "HUP:100ms,KILL:1s");
        assert_eq!(o.timeout, Some(Duration::from_millis(200)));
        assert!(o.group && o.exit_with_parent && o.stop_on_stdin_eof && o.preserve_status);
        assert_eq!(o.activate, Some(Some("nbd".into())));
        assert_eq!(o.report, Some(ReportFormat::Json));
        assert_eq!(o.command, ["slowserver", "--ignore-eof"]);
        assert!(!o.stdio_server);
        let o = run_options(&["run", "--stdio-server", "--contain", "--", "npx", "-y", "x"]);
        assert!(o.stdio_server && o.contain.is_some() && !o.stop_on_stdin_eof);
        assert_eq!(o.command, ["npx", "-y", "x"]);
    }

    #[test]
    fn no_skip_ignored_turns_skipping_off_as_noskip_does() {
        assert!(run_options(&["run", "x"]).ladder.skips_ignored());
        let o = run_options(&["run", "--no-skip-ignored", "--ladder", "TERM:1s,KILL", "x"]);
        assert_eq!(o.ladder.to_string(), "NOSKIP,TERM:1s,KILL:1s");
        let o = run_options(&["run", "--ladder", "NOSKIP,@redis", "x"]);
        assert!(!o.ladder.skips_ignored());
        assert!(parse_strs(&["run", "--no-skip-ignored=1", "x"]).is_err());
    }

    #[test]
    fn cmd_starts_at_first_non_option_and_keeps_its_flags() {
        let o = run_options(&["run", "--activate", "sleep", "--timeout", "5"]);
        assert_eq!(o.activate, Some(None));
        assert_eq!(o.timeout, None);
        assert_eq!(o.command, ["sleep", "--timeout", "5"]);
    }

    #[test]
    fn help_everywhere() {
        for args in [&["--help"][..], &["-h"], &["help"]] {
            assert!(matches!(parse_strs(args), Ok(Invocation::Help(help::TOP))));
        }
        assert!(matches!(
            parse_strs(&["run", "--help"]),
            Ok(Invocation::Help(help::RUN))
        ));
        assert!(matches!(
            parse_strs(&["help", "run"]),
            Ok(Invocation::Help(help::RUN))
        ));
        assert!(matches!(
            parse_strs(&["demo", "-h"]),
            Ok(Invocation::Help(help::DEMO))
        ));
    }

    #[test]
    fn ladder_presets_by_name() {
        for (preset, ladder) in [
            ("@postgres", Ladder::postgres()),
            ("@nginx", Ladder::nginx()),
            ("@redis", Ladder::redis()),
        ] {
            let Ok(Invocation::Run(run)) = parse_strs(&["run", "--ladder", preset, "x"]) else {
                panic!("{preset} did not parse");
            };
            assert_eq!(run.ladder, ladder, "{preset}");
        }
    }

    #[test]
    fn errors_name_the_argument() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "missing subcommand"),
            (&["walk"], "\"walk\""),
            (&["run"], "missing CMD"),
            (&["run", "--"], "missing CMD"),
            (&["run", "--bogus", "x"], "'--bogus'"),
            (&["run", "--ladder", "HUP:1x", "x"], "\"HUP:1x\""),
            (&["run", "--ladder"], "--ladder needs a value"),
            (
                &["run", "--ladder", "@pg", "x"],
                "unknown preset; the presets are @default",
            ),
            (&["run", "--ladder", "postgres", "x"], "spelled @postgres"),
            (&["run", "--timeout", "soon", "x"], "--timeout: \"soon\""),
            (&["run", "--report", "xml", "x"], "\"xml\""),
            (&["run", "--group=yes", "x"], "--group takes no value"),
            (&["run", "--activate=", "x"], "--activate"),
            (
                &["run", "--stdio-server", "--stop-on-stdin-eof", "x"],
                "--stdio-server and --stop-on-stdin-eof cannot go together",
            ),
            (
                &["run", "--stdio-server", "--activate", "x"],
                "--stdio-server and --activate cannot go together",
            ),
            (
                &["run", "--stdio-server=1", "x"],
                "--stdio-server takes no value",
            ),
            (&["demo", "now"], "demo takes no arguments"),
        ];
        for (args, needle) in cases {
            let err = parse_strs(args).unwrap_err().to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }
}
