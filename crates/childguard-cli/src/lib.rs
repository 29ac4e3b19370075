//! `childguard`: run any command under a signal ladder — `timeout(1)` with rungs — and report
//! how it ended.
//!
//! ```text
//! childguard run --timeout 30s --ladder HUP:1s,TERM:2s,KILL:5s --report text -- nbdkit -f memory 1G
//! childguard demo
//! ```
//!
//! Everything lives here, behind [`main_with`], so that the `childguard` binary is one line
//! and the integration tests can build the same program under another name. See
//! `docs/cli.md` for the flags, the exit codes and a comparison with coreutils `timeout`.

// Every `unsafe` block is in `sys` (the signal state `init` restores in CMD).
#![deny(unsafe_code)]

mod activate;
mod args;
mod demo;
mod duration;
mod events;
mod exit_code;
mod help;
mod host;
#[cfg(target_os = "linux")]
mod init;
mod messages;
mod probe;
#[cfg(target_os = "linux")]
pub mod procs;
mod received;
mod restarting;
mod run;
mod signal_source;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod sys;
mod timeline;
mod timeout;
mod trigger;
mod with;
mod with_started;
mod words;

use std::ffi::OsString;

use args::Invocation;

/// The hidden subcommand that turns this binary into the slowserver fixture (used by `demo`,
/// which re-executes itself with it, so the demo needs no other binary).
pub const SLOWSERVER_SUBCOMMAND: &str = "__slowserver";

/// The whole program, from the whole command line: run as `timeout` (argv[0]'s file name,
/// e.g. through `ln -s childguard timeout`) it is `childguard timeout`.
pub fn main_from<I>(argv: I) -> i32
where
    I: IntoIterator<Item = OsString>,
{
    let mut argv = argv.into_iter();
    let name = argv.next().unwrap_or_default();
    let base = std::path::Path::new(&name).file_name().unwrap_or_default();
    if base == "timeout" {
        return main_with(std::iter::once(OsString::from("timeout")).chain(argv));
    }
    // `ln -s childguard tini`: `ENTRYPOINT ["tini", "--", …]` images switch by a symlink.
    if base == "tini" {
        return init_main(argv.collect(), true);
    }
    main_with(argv)
}

/// The whole program: `args` are the arguments after the program name. Returns the exit code
/// (124–127 as in `timeout(1)`; see `docs/cli.md`).
pub fn main_with<I>(args: I) -> i32
where
    I: IntoIterator<Item = OsString>,
{
    match args::parse(args) {
        Ok(Invocation::Run(options)) => run::run(&options),
        Ok(Invocation::Demo) => demo::run(),
        Ok(Invocation::Init(rest)) => init_main(rest, false),
        Ok(Invocation::With(options)) => with::run(options),
        Ok(Invocation::Probe(options)) => probe::run(*options),
        // A help or version text that cannot be written (stdout closed or full) is a failure,
        // as in coreutils, never a panic.
        Ok(Invocation::Help(text)) => stdout_or_fail(text),
        Ok(Invocation::Version) => {
            stdout_or_fail(&format!("childguard {}\n", env!("CARGO_PKG_VERSION")))
        }
        Ok(Invocation::Slowserver(rest)) => {
            slowserver::main_with(vec![OsString::from(SLOWSERVER_SUBCOMMAND)], rest)
        }
        Err(err) => {
            messages::say!("{err}");
            messages::raw_stderr(&format!("Try '{}' for more information.\n", err.hint()));
            exit_code::FAILED
        }
    }
}

fn stdout_or_fail(text: &str) -> i32 {
    match messages::stdout(text) {
        true => 0,
        false => exit_code::FAILED,
    }
}

/// `childguard init` (`as_tini`: run as `tini`), Linux only.
#[cfg(target_os = "linux")]
fn init_main(args: Vec<OsString>, as_tini: bool) -> i32 {
    init::main(args, as_tini)
}

#[cfg(not(target_os = "linux"))]
fn init_main(_args: Vec<OsString>, _as_tini: bool) -> i32 {
    messages::say!("init is Linux only (it needs pidfds and PR_SET_CHILD_SUBREAPER)");
    1
}
