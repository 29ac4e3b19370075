//! `--daemonize` and `--workers N --setsid`: descendants that leave our process group, as a
//! daemon's double fork or a server's per-connection sessions do, so that only a cgroup (not
//! `killpg`) reaches them.

use std::env;
use std::io::{self, BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::args::BusyWorker;
use crate::lifeline::{Lifeline, LIFELINE_EVERY};
use crate::{exit, grandchild, signals, sys};

/// Hidden argument: the first fork of `--daemonize` (calls `setsid`, forks the daemon, exits).
pub const DAEMON_STAGE_FLAG: &str = "--daemon-stage";
/// Hidden argument: the daemon itself (ignores HUP and TERM, keeps a copy of the socket).
pub const DAEMON_FLAG: &str = "--daemon";
/// Hidden argument: a `--workers` child (`--busy-worker [setsid] [watch=PID]`: call `setsid`
/// first; exit once process PID has exited).
pub const BUSY_WORKER_FLAG: &str = "--busy-worker";

fn reexec() -> io::Result<Command> {
    let mut cmd = Command::new(env::current_exe()?);
    cmd.args(
        grandchild::REEXEC_PREFIX
            .get()
            .map(Vec::as_slice)
            .unwrap_or_default(),
    );
    Ok(cmd)
}

/// `--daemonize`: double fork + `setsid`. Returns the daemon's pid once the intermediate
/// process has exited (and been reaped), so the daemon's parent is no longer us.
pub fn daemonize() -> io::Result<u32> {
    let mut stage = reexec()?
        .arg(DAEMON_STAGE_FLAG)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(stage.stdout.take().expect("piped")).read_line(&mut line)?;
    let status = stage.wait()?;
    if !status.success() {
        return Err(io::Error::other(format!("daemon stage failed: {status}")));
    }
    line.trim()
        .parse()
        .map_err(|_| io::Error::other(format!("daemon stage printed {line:?}")))
}

/// The intermediate process: new session, fork the daemon (sharing stdin, our socket), print
/// its pid, exit.
pub fn run_daemon_stage() -> ! {
    let result = (|| -> io::Result<u32> {
        sys::new_session()?;
        let daemon = reexec()?
            .arg(DAEMON_FLAG)
            .stdin(Stdio::inherit())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(daemon.id())
    })();
    match result {
        Ok(pid) => {
            println!("{pid}");
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("slowserver: --daemonize: {e}");
            std::process::exit(1)
        }
    }
}

/// The daemon: ignores HUP and TERM (as a daemon that re-reads its config on HUP and drains
/// on TERM might, never finishing), holds stdin (the socket) and sleeps.
pub fn run_daemon() -> ! {
    signals::reset_all_to_default();
    let _ = signals::ignore(&[libc::SIGHUP, libc::SIGTERM]);
    exit::never()
}

/// `--workers N [--setsid] [--lifeline]`: N children that burn CPU, each in its own session
/// with `setsid`, each watching `lifeline`'s pid with `--lifeline`. Returns their pids once
/// every one has said (a byte on its stdout, a pipe to us) that it is set up — in its own
/// session, watching — so READY never races them. If the lifeline has exited by then, the
/// workers may be watching its pid reused: they are killed and the start fails.
pub fn spawn_workers(n: usize, setsid: bool, lifeline: Option<&Lifeline>) -> io::Result<Vec<u32>> {
    let mut children = (0..n)
        .map(|_| {
            let mut cmd = reexec()?;
            cmd.arg(BUSY_WORKER_FLAG);
            if setsid {
                cmd.arg("setsid");
            }
            if let Some(lifeline) = lifeline {
                cmd.arg(format!("watch={}", lifeline.pid()));
            }
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
        })
        .collect::<io::Result<Vec<_>>>()?;
    for child in &mut children {
        let mut byte = [0u8];
        let mut out = child.stdout.take().expect("piped");
        io::Read::read_exact(&mut out, &mut byte)
            .map_err(|e| io::Error::other(format!("worker {} did not start: {e}", child.id())))?;
    }
    if lifeline.is_some_and(Lifeline::is_gone) {
        for child in &mut children {
            let _ = child.kill();
        }
        return Err(io::Error::other(
            "--lifeline: our parent exited while the workers started",
        ));
    }
    Ok(children.iter().map(std::process::Child::id).collect())
}

/// A `--workers` child: optionally a new session, then a busy loop (default dispositions),
/// left once the watched process has exited (`--lifeline`).
pub fn run_busy_worker(worker: BusyWorker) -> ! {
    signals::reset_all_to_default();
    // Opened before we say we are set up: a lifeline already gone fails here, loudly.
    let lifeline = worker.watch.map(|pid| {
        Lifeline::watch(pid).unwrap_or_else(|e| {
            eprintln!("slowserver: --lifeline: watching process {pid}: {e}");
            std::process::exit(1);
        })
    });
    if worker.setsid {
        if let Err(e) = sys::new_session() {
            eprintln!("slowserver: --setsid: {e}");
            std::process::exit(1);
        }
    }
    // Tell the server we are set up; stdout (a pipe to it) is not used again.
    {
        use std::io::Write;
        let _ = io::stdout().write_all(b"+");
        let _ = io::stdout().flush();
    }
    let mut x = 0u64;
    let mut next_look = Instant::now() + LIFELINE_EVERY;
    loop {
        for _ in 0..4096 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        if let Some(lifeline) = &lifeline {
            if Instant::now() >= next_look {
                if lifeline.is_gone() {
                    std::process::exit(0);
                }
                next_look = Instant::now() + LIFELINE_EVERY;
            }
        }
    }
}
