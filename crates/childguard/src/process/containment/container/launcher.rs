//! Reading a command line for a container launch: `docker run …`, `podman run …`,
//! `nerdctl run …` (also `… container run …`), directly, after `env`, or as the plain words of
//! a `sh -c`/`bash -c` string. What is learnt: the engine and its global options (replayed on
//! every `kill`, so it reaches the same engine: `--runtime`, `--host`, `--context`, `--root` …),
//! the options of `run` that matter (`--name`, `--rm`, `-d`), and where `run` is, so that a
//! `--name` of ours can be put right after it.
//!
//! What is not recognised is left alone (the caller then contains the launcher as any other
//! command, or the user names the engine: `Builder::container_engine`, `--container ENGINE`):
//! an option of the engine's we do not know (we cannot tell whether it takes a value), any
//! other subcommand, a shell string with anything but plain words (quotes, `$`, `;`, `|`,
//! `&`, redirections, globs).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// The engines whose `run` we read.
const ENGINES: [&str; 3] = ["docker", "podman", "nerdctl"];

/// Global options (before the subcommand) that take a value, across the three engines.
const GLOBAL_VALUED: [&str; 38] = [
    "--config",
    "-c",
    "--context",
    "-H",
    "--host",
    "-l",
    "--log-level",
    "--tlscacert",
    "--tlscert",
    "--tlskey",
    "--cgroup-manager",
    "--conmon",
    "--connection",
    "--events-backend",
    "--hooks-dir",
    "--identity",
    "--imagestore",
    "--module",
    "--network-cmd-path",
    "--network-config-dir",
    "--root",
    "--runroot",
    "--runtime",
    "--runtime-flag",
    "--storage-driver",
    "--storage-opt",
    "--tmpdir",
    "--url",
    "--volumepath",
    "--ssh",
    "--db-backend",
    "--address",
    "-a",
    "--namespace",
    "-n",
    "--snapshotter",
    "--data-root",
    "--cni-path",
];
/// Global options that take none.
const GLOBAL_FLAGS: [&str; 12] = [
    "-D",
    "--debug",
    "--tls",
    "--tlsverify",
    "--remote",
    "-r",
    "--syslog",
    "--noout",
    "--trace",
    "--debug-full",
    "--experimental",
    "--insecure-registry",
];
/// Options of `run` that take no value (all others do, unless written `--opt=value`).
const RUN_FLAGS: [&str; 32] = [
    "--interactive",
    "--tty",
    "--detach",
    "--rm",
    "--init",
    "--privileged",
    "--read-only",
    "--publish-all",
    "--quiet",
    "--no-healthcheck",
    "--oom-kill-disable",
    "--disable-content-trust",
    "--help",
    "--replace",
    "--rmi",
    "--no-hosts",
    "--sig-proxy",
    "--tls-verify",
    "--http-proxy",
    "--env-host",
    "--passwd",
    "--read-only-tmpfs",
    "--use-cgroupns",
    "--no-reset",
    "--preserve-fds-all",
    "--cgroupns-host",
    "--insecure",
    "--rootfs",
    "--unsetenv-all",
    "--userns-remap",
    "--network-alias-all",
    "--keep-id",
];
/// Short options of `run` that take no value, alone or in a cluster (`-it`).
const RUN_SHORT_FLAGS: &[u8] = b"itdPq";

/// A container launch read from a command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    /// The engine as written (`podman`, `/usr/bin/docker`).
    pub(crate) engine: OsString,
    /// Its global options, as written, replayed before every subcommand we send it.
    pub(crate) globals: Vec<OsString>,
    /// `--name` as the user gave it, if any.
    pub(crate) name: Option<String>,
    /// `--rm`: the engine removes the container once it exits; we remove what is left.
    pub(crate) remove: bool,
    /// `-d`/`--detach`: the client returns at once (refused: nothing is attached to close).
    pub(crate) detach: bool,
    /// `NAME=VALUE` set by an `env` in front, for the engine's environment too.
    pub(crate) env: Vec<(OsString, OsString)>,
    /// `env -i` in front: the engine's environment is only `env`.
    pub(crate) env_clear: bool,
    /// Where the launch sits in the command line.
    place: Place,
}

/// Where `run` is, to put `--name` after it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    /// The argv's index of the word `run`.
    Argv(usize),
    /// `sh -c STRING`: the argv's index of STRING, and the word index of `run` in it.
    Shell { arg: usize, word: usize },
}

/// Reads `argv` (program first). `None`: not a container launch we recognise.
pub(crate) fn recognise(argv: &[OsString]) -> Option<Launch> {
    let mut env = Vec::new();
    let mut env_clear = false;
    let mut at = 0;
    if base(argv.first()?) == "env" {
        at = 1;
        while let Some(word) = argv.get(at) {
            let w = word.as_bytes();
            if w == b"-i" || w == b"--ignore-environment" || w == b"-" {
                env_clear = true;
            } else if w == b"--" {
            } else if w.first() == Some(&b'-') {
                return None;
            } else if let Some(eq) = w.iter().position(|&b| b == b'=') {
                env.push((
                    OsStr::from_bytes(&w[..eq]).to_os_string(),
                    OsStr::from_bytes(&w[eq + 1..]).to_os_string(),
                ));
            } else {
                break;
            }
            at += 1;
        }
    }
    let program = argv.get(at)?;
    if matches!(base(program).as_str(), "sh" | "bash" | "dash") && at == 0 {
        return shell(argv);
    }
    let mut launch = engine_words(&argv[at..])?;
    launch.env = env;
    launch.env_clear = env_clear;
    if let Place::Argv(i) = &mut launch.place {
        *i += at;
    }
    Some(launch)
}

/// `sh -c 'STRING' …` whose STRING is plain words, optionally after `exec`.
fn shell(argv: &[OsString]) -> Option<Launch> {
    if argv.get(1).map(|a| a.as_bytes()) != Some(b"-c") {
        return None;
    }
    let text = argv.get(2)?.to_str()?;
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=./:@,+%".contains(c);
    if !text.chars().all(|c| plain(c) || c == ' ' || c == '\t') {
        return None;
    }
    let words: Vec<OsString> = text.split_whitespace().map(OsString::from).collect();
    let skip = usize::from(words.first().is_some_and(|w| w == "exec"));
    if words.get(skip).is_some_and(|w| base(w) == "env") {
        return None;
    }
    let mut launch = engine_words(&words[skip..])?;
    if let Place::Argv(word) = launch.place {
        launch.place = Place::Shell {
            arg: 2,
            word: word + skip,
        };
    }
    Some(launch)
}

/// `ENGINE [globals] [container] run [options] …`.
fn engine_words(words: &[OsString]) -> Option<Launch> {
    let engine = words.first()?;
    if !ENGINES.contains(&base(engine).as_str()) {
        return None;
    }
    let mut at = 1;
    let mut globals = Vec::new();
    loop {
        let word = words.get(at)?;
        let w = word.to_str()?;
        if !w.starts_with('-') {
            break;
        }
        globals.push(word.clone());
        if !w.contains('=') && GLOBAL_VALUED.contains(&w) {
            globals.push(words.get(at + 1)?.clone());
            at += 1;
        } else if !w.contains('=') && !GLOBAL_FLAGS.contains(&w) {
            return None;
        }
        at += 1;
    }
    if words[at] == "container" {
        at += 1;
    }
    if words.get(at)? != "run" {
        return None;
    }
    let run = at;
    let mut launch = Launch {
        engine: engine.clone(),
        globals,
        name: None,
        remove: false,
        detach: false,
        env: Vec::new(),
        env_clear: false,
        place: Place::Argv(run),
    };
    run_options(&words[run + 1..], &mut launch)?;
    Some(launch)
}

/// The options of `run` up to the image: what we need of them.
fn run_options(words: &[OsString], launch: &mut Launch) -> Option<()> {
    let mut i = 0;
    while let Some(word) = words.get(i) {
        let w = word.to_str()?;
        if w == "--" || !w.starts_with('-') || w == "-" {
            return Some(());
        }
        let (key, value) = match w.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (w, None),
        };
        if let Some(long) = key.strip_prefix("--") {
            let flag = RUN_FLAGS.contains(&key);
            let value = match (value, flag) {
                (Some(v), _) => Some(v.to_string()),
                (None, true) => None,
                (None, false) => {
                    i += 1;
                    Some(words.get(i)?.to_str()?.to_string())
                }
            };
            let on = value.as_deref().is_none_or(|v| v != "false");
            match long {
                "name" => launch.name = value,
                "rm" => launch.remove = on,
                "detach" => launch.detach = on,
                _ => {}
            }
        } else {
            let letters = &key.as_bytes()[1..];
            let flags = letters.iter().take_while(|c| RUN_SHORT_FLAGS.contains(c));
            let flags: Vec<u8> = flags.copied().collect();
            if flags.contains(&b'd') {
                launch.detach = true;
            }
            // A valued letter last in a cluster without its value takes the next word.
            if flags.len() + 1 == letters.len() && value.is_none() {
                i += 1;
                words.get(i)?;
            }
        }
        i += 1;
    }
    Some(())
}

impl Launch {
    /// The command line with `--name NAME` right after `run` (or, in a `sh -c` string, after
    /// its word `run`).
    pub(crate) fn argv_with_name(&self, argv: &[OsString], name: &str) -> Vec<OsString> {
        let mut out = argv.to_vec();
        match self.place {
            Place::Argv(run) => {
                out.splice(run + 1..run + 1, [OsString::from("--name"), name.into()]);
            }
            Place::Shell { arg, word } => {
                let text = argv[arg].to_string_lossy();
                let mut words: Vec<&str> = text.split_whitespace().collect();
                words.splice(word + 1..word + 1, ["--name", name]);
                out[arg] = words.join(" ").into();
            }
        }
        out
    }
}

/// The file name of a program as written.
fn base(program: &OsStr) -> String {
    let bytes = program.as_bytes();
    let name = bytes.rsplit(|&b| b == b'/').next().unwrap_or(bytes);
    String::from_utf8_lossy(name).into_owned()
}

#[cfg(test)]
mod tests;
