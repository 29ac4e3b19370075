//! `childguard with`: start servers, wait until each is ready, run a command against them,
//! then close every server with its ladder and exit with the command's status.
//!
//! ```text
//! childguard with [--ready COND] [--ready-timeout DUR] [--ladder SPEC] [--end WORD]
//!                -- SERVER [ARG...] [WORD] [--then [--ready COND] … -- SERVER2 [ARG...]] -- CMD [ARG...]
//! ```
//!
//! A server's arguments end at the first `--` or `--then`; with `--end WORD` they end at WORD
//! instead, so that they can contain `--` themselves (`runuser -u pg -- postgres …`,
//! `env -- …`, `npm run x -- --flag`). A word the user names is the terminator `find -exec … ;`
//! has: today's lines keep working, nothing is counted (a count breaks silently when an
//! argument is added), and nothing is quoted twice (one string for the whole server would need
//! childguard to split words as a shell does).
//!
//! Readiness is the library's ([`Ready`]): `notify` (`READY=1` on a private `NOTIFY_SOCKET`),
//! `tcp:HOST:PORT` or `unix:PATH` (a connection is accepted), `line:TEXT` (a line of the
//! server's output contains TEXT), `http://…` / `http+unix://…` / `http:STATUS:URL` (a `GET`
//! answers 2xx, or STATUS), `exec:CMD` (the probe CMD, split into words by `words.rs`, exits
//! 0). `--ready` given more than once means every one
//! ([`Ready::all`]); `--ready-any`, the first that holds ([`Ready::any`]). Each server leads
//! its own process group (so its ladder reaches its workers), gets the parent-death signal,
//! and has its output captured and passed through (`[program pid] line` on stderr), so that a
//! server that dies — before it is ready, or while CMD runs — fails the run at once (exit 125)
//! with its output tail. A signal during the start-up ends the run before CMD (128+N).

use std::ffi::OsString;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use childguard::{Capture, ChildHandle, ConnectTo, HttpCheck, Ladder, Ready};

use crate::args::UsageError;
use crate::duration;
use crate::events::{Event, Events};
use crate::exit_code;
use crate::messages::say;
use crate::with_started::Started;

/// One server to start.
#[derive(Debug, Clone)]
pub struct Server {
    /// `--ready` conditions: every one must hold.
    ready: Vec<Ready>,
    /// `--ready-any` conditions: the first that holds.
    ready_any: Vec<Ready>,
    ready_timeout: Option<Duration>,
    /// `--watchdog DUR` (needs `--ready notify`).
    watchdog: Option<Duration>,
    ladder: Option<Ladder>,
    /// `--no-skip-ignored`: send every rung, also those the server ignores.
    no_skip_ignored: bool,
    /// `--end WORD`: the word that ends SERVER's arguments, in place of `--` / `--then`.
    end: Option<OsString>,
    /// `--memory-max`, `--memory-high`, `--tasks-max`, `--cpu-quota`: the server runs in a
    /// cgroup of its own with these limits.
    limits: childguard::Limits,
    /// `--restart` (with `--restart-delay`, `--restart-limit`): the server is supervised, and
    /// a crash restarts it instead of ending the run (`with_started.rs`).
    restart: Option<childguard::Restart>,
    command: Vec<OsString>,
}

/// `childguard with` options.
#[derive(Debug)]
pub struct WithOptions {
    servers: Vec<Server>,
    command: Vec<OsString>,
}

fn usage(message: impl Into<String>) -> UsageError {
    UsageError::with(message)
}

/// Parses the arguments after `with`; `Ok(None)` for `--help`.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<WithOptions>, UsageError> {
    let mut args = args.into_iter().peekable();
    let mut servers = Vec::new();
    loop {
        let mut server = Server {
            ready: Vec::new(),
            ready_any: Vec::new(),
            ready_timeout: None,
            watchdog: None,
            ladder: None,
            no_skip_ignored: false,
            end: None,
            limits: childguard::Limits::default(),
            restart: None,
            command: Vec::new(),
        };
        let mut restart = crate::args::RestartFlags::default();
        // Options up to `--`.
        loop {
            let Some(arg) = args.next() else {
                return Err(usage("missing `-- SERVER …` (e.g. `childguard with --ready unix:/tmp/s -- redis-server … -- CMD`)"));
            };
            let text = arg.to_string_lossy().into_owned();
            if text == "--" {
                break;
            }
            let opt = crate::args::LongOpt::split(&text);
            let mut value = || opt.value(&mut args, usage);
            match opt.name.as_str() {
                "-h" | "--help" => return Ok(None),
                "--ready" => server.ready.push(parse_ready(&value()?)?),
                "--ready-any" => server.ready_any.push(parse_ready(&value()?)?),
                "--ready-timeout" => {
                    let text = value()?;
                    server.ready_timeout = crate::args::ready_timeout(&text, usage)?;
                }
                "--watchdog" => {
                    let text = value()?;
                    server.watchdog = Some(
                        duration::parse_timeout(&text)
                            .ok()
                            .flatten()
                            .filter(|d| !d.is_zero())
                            .ok_or_else(|| {
                                usage(format!(
                                    "invalid value for --watchdog: {text:?}: a duration above zero"
                                ))
                            })?,
                    );
                }
                "--ladder" => {
                    let text = value()?;
                    server.ladder = Some(text.parse::<Ladder>().map_err(|e| {
                        usage(format!("invalid value for --ladder: {text:?}: {e}"))
                    })?);
                }
                "--end" => server.end = Some(end_word(value()?)?),
                "--restart" | "--restart-delay" | "--restart-limit" => {
                    let text = value()?;
                    restart.set(&opt.name, &text).map_err(usage)?;
                }
                "--memory-max" | "--memory-high" | "--tasks-max" | "--cpu-quota" => {
                    let text = value()?;
                    server
                        .limits
                        .set(&opt.name[2..], &text)
                        .map_err(|why| usage(format!("invalid value for {}: {why}", opt.name)))?;
                }
                "--no-skip-ignored" if !opt.has_inline_value() => server.no_skip_ignored = true,
                _ => return Err(usage(format!("unknown option '{text}'"))),
            }
        }
        let then = match &server.end {
            None => server_until_separator(&mut args, &mut server.command),
            Some(end) => server_until_end(&mut args, &mut server.command, end)?,
        };
        if server.command.is_empty() {
            return Err(usage("a server after `--` is missing"));
        }
        server.restart = restart.restart().map_err(usage)?;
        check_ready(&server)?;
        servers.push(server);
        if !then {
            break;
        }
    }
    let command: Vec<OsString> = args.collect();
    if command.is_empty() {
        return Err(usage("missing `-- CMD` to run once the servers are ready"));
    }
    Ok(Some(WithOptions { servers, command }))
}

/// `--end WORD`'s word: anything but empty, `--` or `--then` (which it stands in for).
fn end_word(word: String) -> Result<OsString, UsageError> {
    if word.is_empty() || word == "--" || word == "--then" {
        return Err(usage(format!(
            "invalid value for --end: {word:?}: the word must be one that is not `--` or \
             `--then` (it ends a server's arguments that contain those), e.g. --end END"
        )));
    }
    Ok(OsString::from(word))
}

/// SERVER and its arguments, up to `--then` (another server follows: `true`) or `--` (CMD).
fn server_until_separator(
    args: &mut impl Iterator<Item = OsString>,
    command: &mut Vec<OsString>,
) -> bool {
    for arg in args.by_ref() {
        if arg == "--" {
            return false;
        }
        if arg == "--then" {
            return true;
        }
        command.push(arg);
    }
    false
}

/// With `--end WORD`: SERVER and its arguments up to WORD — `--` and `--then` among them are
/// the server's own (`runuser -u pg -- postgres …`) — then `--` (CMD) or `--then` (another
/// server), as after a server's arguments without `--end`. Returns whether `--then` came.
fn server_until_end(
    args: &mut impl Iterator<Item = OsString>,
    command: &mut Vec<OsString>,
    end: &OsString,
) -> Result<bool, UsageError> {
    let word = end.to_string_lossy();
    for arg in args.by_ref() {
        if arg == *end {
            return match args.next() {
                Some(next) if next == "--" => Ok(false),
                Some(next) if next == "--then" => Ok(true),
                Some(next) => Err(usage(format!(
                    "after `{word}` (the end of the server's arguments, --end) comes `-- CMD` \
                     or `--then`, not {next:?}"
                ))),
                None => Err(usage(format!(
                    "missing `-- CMD` after `{word}` (the end of the server's arguments, --end)"
                ))),
            };
        }
        command.push(arg);
    }
    let server = command.first().map(|p| p.to_string_lossy().into_owned());
    Err(usage(format!(
        "--end {word}: the arguments of server {:?} never reach `{word}` (write it after the \
         server's last argument: -- SERVER [ARG...] {word} -- CMD)",
        server.unwrap_or_default()
    )))
}

/// One server's readiness options make one condition: not both kinds of list, and at most
/// one `line:` (the capture watches one text).
fn check_ready(server: &Server) -> Result<(), UsageError> {
    if !server.ready.is_empty() && !server.ready_any.is_empty() {
        return Err(usage(
            "--ready (every one must hold) and --ready-any (the first that holds) cannot be \
             mixed for one server",
        ));
    }
    let lines = server
        .ready
        .iter()
        .chain(&server.ready_any)
        .filter(|r| matches!(r, Ready::Output(_)))
        .count();
    if lines > 1 {
        return Err(usage(
            "at most one line:TEXT condition per server (its output is watched for one text)",
        ));
    }
    Ok(())
}

/// The server's one readiness condition, if any: a single `--ready`/`--ready-any` as it is,
/// more as [`Ready::all`] / [`Ready::any`].
fn readiness(mut all: Vec<Ready>, mut any: Vec<Ready>) -> Option<Ready> {
    match (all.len(), any.len()) {
        (0, 0) => None,
        (1, 0) => all.pop(),
        (0, 1) => any.pop(),
        (_, 0) => Some(Ready::all(all)),
        _ => Some(Ready::any(any)),
    }
}

/// `notify`, `tcp:HOST:PORT`, `unix:PATH`, `line:TEXT`, `http:URL` or `exec:CMD`.
pub(crate) fn parse_ready(text: &str) -> Result<Ready, UsageError> {
    let bad = |why: String| usage(format!("invalid value for --ready: {text:?}: {why}"));
    if text == "notify" {
        return Ok(Ready::Notify);
    }
    match text.split_once(':') {
        Some(("tcp", address)) => {
            let addr = address
                .to_socket_addrs()
                .map_err(|e| bad(format!("{e} (expected tcp:HOST:PORT)")))?
                .next()
                .ok_or_else(|| bad("the name has no address".into()))?;
            Ok(Ready::Connect(ConnectTo::Tcp(addr)))
        }
        Some(("unix", path)) if !path.is_empty() => {
            Ok(Ready::Connect(ConnectTo::Unix(PathBuf::from(path))))
        }
        Some(("line", line)) if !line.is_empty() => Ok(Ready::Output(line.to_string())),
        Some(("http" | "http+unix" | "https", _)) => parse_http(text).map_err(bad),
        Some(("exec", command)) => {
            let argv = crate::words::split(command).map_err(|e| bad(format!("exec:CMD: {e}")))?;
            Ready::exec(argv).map_err(|e| bad(e.to_string()))
        }
        _ => Err(bad(
            "expected notify, tcp:HOST:PORT, unix:PATH, line:TEXT, http:URL or exec:CMD".into(),
        )),
    }
}

/// `http://…` / `http+unix://…` (the URL is the condition), `http:URL`, or `http:STATUS:URL`
/// (ready on exactly that status, not any 2xx).
fn parse_http(text: &str) -> Result<Ready, String> {
    let url_at = |t: &str| {
        t.starts_with("http://") || t.starts_with("http+unix://") || t.starts_with("https://")
    };
    if url_at(text) {
        return Ready::http(text).map_err(|e| e.to_string());
    }
    let rest = text.strip_prefix("http:").unwrap_or(text);
    if url_at(rest) {
        return Ready::http(rest).map_err(|e| e.to_string());
    }
    match rest.split_once(':') {
        Some((status, url)) if url_at(url) => {
            let status: u16 = status
                .parse()
                .ok()
                .filter(|s| (100..=999).contains(s))
                .ok_or_else(|| format!("status {status:?} is not an HTTP status (100-999)"))?;
            let check = HttpCheck::parse(url).map_err(|e| e.to_string())?;
            Ok(Ready::Http(check.status(status)))
        }
        _ => Err(
            "expected http://HOST[:PORT]/PATH, http+unix://%2Fpath%2Fto.sock/PATH, or http:STATUS:URL"
                .into(),
        ),
    }
}

/// Runs it; returns the exit code.
pub fn run(options: WithOptions) -> i32 {
    // Before any spawn: our SIGCHLD handler (and the forwarding of signals) are in place.
    let events = match Events::start(false) {
        Ok(events) => events,
        Err(e) => {
            say!("cannot listen for signals: {e}");
            return exit_code::FAILED;
        }
    };
    let mut started: Vec<Started> = Vec::new();
    if let Err(e) = events.announce_signals(true) {
        say!("cannot start the signal thread: {e}");
        return exit_code::FAILED;
    }
    for server in options.servers {
        match start(server) {
            Ok(handle) => started.push(handle),
            Err(e) => {
                // The error names what was awaited and carries the server's output tail.
                say!("{e}");
                close_all(started);
                return exit_code::FAILED;
            }
        }
        // A signal while the servers start (a Ctrl-C during a slow start-up) ends the run
        // here: CMD is not started. Left queued, it would be judged against a CMD that did not
        // exist when it came — a terminal's Ctrl-C dropped as "reached CMD already" — or
        // forwarded to a CMD that had just begun.
        if let Some(signal) = events.signals_arrived().first() {
            close_all(started);
            return 128 + signal.as_raw();
        }
    }
    // Turning it off starts nothing: it cannot fail.
    let _ = events.announce_signals(false);
    let code = run_command(&options.command, &events, &mut started);
    close_all(started);
    code
}

/// Starts a server: supervised with `--restart`, else a plain handle.
fn start(server: Server) -> childguard::Result<Started> {
    match server.restart.clone() {
        None => builder(server).spawn().map(|h| Started::Plain(Box::new(h))),
        Some(restart) => Started::supervised(move || builder(server.clone()), restart),
    }
}

fn builder(server: Server) -> childguard::Builder {
    let mut command = Command::new(&server.command[0]);
    command.args(&server.command[1..]);
    let mut builder = ChildHandle::builder(command)
        .own_spawn(true)
        .process_group(true)
        .exit_with_parent(cfg!(any(target_os = "linux", target_os = "android")))
        .capture(Capture::both().passthrough(true));
    if let Some(ladder) = server.ladder {
        builder = builder.ladder(ladder);
    }
    if server.no_skip_ignored {
        builder = builder.skip_ignored_rungs(false);
    }
    if let Some(ready) = readiness(server.ready, server.ready_any) {
        builder = builder.ready(ready);
    }
    if let Some(timeout) = server.ready_timeout {
        builder = builder.ready_timeout(timeout);
    }
    if let Some(interval) = server.watchdog {
        builder = builder.watchdog(interval);
    }
    if !server.limits.is_empty() {
        builder = builder
            .contain(childguard::Containment::Cgroup)
            .limits(server.limits);
    }
    builder
}

/// Runs CMD until it exits; a server that exits meanwhile ends it (125). Signals childguard
/// receives are forwarded to CMD, except those that already reached it: a terminal's Ctrl-C
/// goes to its whole foreground process group, CMD included (see `received`), and a second
/// copy would be a second Ctrl-C — "abort now" to pytest or terraform.
fn run_command(command: &[OsString], events: &Events, servers: &mut [Started]) -> i32 {
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    let spawned = ChildHandle::builder(cmd)
        .own_spawn(true)
        .exit_with_parent(cfg!(any(target_os = "linux", target_os = "android")))
        .ignore_sigpipe(childguard::sigpipe_ignored_at_start().unwrap_or(false))
        .spawn();
    let mut handle = match spawned {
        Ok(handle) => handle,
        Err(e) => {
            say!("{e}");
            return exit_code::for_spawn_error(&e);
        }
    };
    loop {
        match handle.try_wait() {
            Ok(Some(status)) => return exit_code::from_status(status),
            Ok(None) => {}
            Err(e) => {
                say!("{e}");
                return exit_code::FAILED;
            }
        }
        for server in servers.iter_mut() {
            if let Some(said) = server.gone() {
                for line in said {
                    say!("{line}");
                }
                let _ = handle.close();
                return exit_code::FAILED;
            }
        }
        match events.next(None) {
            Some(Event::Signal(received)) => {
                if !received.reached(handle.id()) {
                    let _ = handle.kill(received.signal, Duration::ZERO);
                }
            }
            Some(Event::ChildChanged | Event::StdinClosed | Event::ParentExited(_)) | None => {}
        }
    }
}

/// Closes the servers, last started first, each with its ladder.
fn close_all(servers: Vec<Started>) {
    for server in servers.into_iter().rev() {
        if let Err(e) = server.close() {
            say!("closing a server: {e}");
        }
    }
}
