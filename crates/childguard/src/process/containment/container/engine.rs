//! A container engine's command-line client (`docker`, `podman`, `nerdctl`), run as the user
//! runs it: the program found on the launch's `PATH`, its global options replayed, the
//! launch's environment (`DOCKER_HOST`, `CONTAINER_HOST`, `XDG_RUNTIME_DIR`, `CONTAINERS_CONF`
//! … all reach it as they reached the launcher). No engine API is spoken here: the CLI knows
//! the user's contexts, connections, rootless sockets and configs better than a client of
//! ours would.
//!
//! Each call is bounded ([`Engine::call`]): an engine that hangs (a daemon down, a lock held)
//! costs the close at most the bound, then the call is killed and reaped. Its output goes to
//! anonymous memory files, not pipes, so a chatty engine never blocks on a full pipe and no
//! reader thread is needed.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::core::wait::Wait;

/// The engine a launch runs, and how to reach it again.
#[derive(Debug, Clone)]
pub(crate) struct Engine {
    /// The client program, resolved (absolute).
    pub(crate) program: PathBuf,
    /// Global options given before `run`, replayed before every subcommand.
    pub(crate) globals: Vec<OsString>,
    /// The environment the launch had.
    pub(crate) env: Vec<(OsString, OsString)>,
}

/// What one call said.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Answer {
    /// The engine said the container does not exist (`no such container`, `No such object`).
    pub(crate) fn no_such_container(&self) -> bool {
        !self.status.success() && self.stderr.to_ascii_lowercase().contains("no such")
    }
}

impl Engine {
    /// The engine `program` (found by the caller as the launch's `execvp` would find it),
    /// with the launch's global options and environment.
    pub(crate) fn new(
        program: PathBuf,
        globals: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
    ) -> Engine {
        Engine {
            program,
            globals,
            env,
        }
    }

    /// The argv of `engine [globals] args…`.
    pub(crate) fn argv<'a>(&'a self, args: &'a [&'a OsStr]) -> Vec<&'a OsStr> {
        std::iter::once(self.program.as_os_str())
            .chain(self.globals.iter().map(OsString::as_os_str))
            .chain(args.iter().copied())
            .collect()
    }

    /// Runs `engine [globals] args…` and waits at most `bound` for it; past that it is
    /// killed, reaped, and the call fails with `TimedOut`.
    pub(crate) fn call(&self, args: &[&OsStr], bound: Duration) -> io::Result<Answer> {
        let (out, err) = (memory_file()?, memory_file()?);
        let mut child = Command::new(&self.program)
            .args(&self.globals)
            .args(args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(err.try_clone()?)
            .spawn()?;
        let pid = rustix::process::Pid::from_raw(child.id() as i32)
            .ok_or_else(|| io::Error::other("the engine's pid is 0"))?;
        // Our unreaped child: its pid cannot be reused before we wait for it. Without a pidfd
        // (an old kernel, a seccomp profile) the wait is woken by `SIGCHLD`, as for any child
        // on the portable path.
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok();
        let deadline = Instant::now() + bound;
        let status = loop {
            // Read before the look: a `SIGCHLD` after it ends the wait below.
            let seen = match &pidfd {
                Some(_) => None,
                None => Some(crate::core::sigchld::notifier()?.generation()),
            };
            if let Some(status) = child.try_wait()? {
                break Some(status);
            }
            if Instant::now() >= deadline {
                break None;
            }
            let fds: Vec<BorrowedFd<'_>> = pidfd.iter().map(|fd| fd.as_fd()).collect();
            if let Err(e) = Wait::until(deadline).fds(&fds).sigchld(seen).run() {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        };
        let Some(status) = status else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "`{}` did not answer within {bound:?} (killed)",
                    self.shown(args)
                ),
            ));
        };
        Ok(Answer {
            status,
            stdout: read_all(out)?,
            stderr: read_all(err)?,
        })
    }

    /// The error of a call that failed: the command as typed, its status, what it said.
    pub(crate) fn failed(&self, args: &[&OsStr], answer: &Answer) -> io::Error {
        io::Error::other(format!(
            "`{}` failed ({}): {}",
            self.shown(args),
            answer.status,
            answer.stderr
        ))
    }

    /// `engine [globals] args…` as a user would type it, for messages.
    pub(crate) fn shown(&self, args: &[&OsStr]) -> String {
        let argv = self.argv(args);
        let words: Vec<_> = argv.iter().map(|a| a.to_string_lossy()).collect();
        words.join(" ")
    }
}

/// An anonymous file in memory (`memfd_create(2)`), close-on-exec.
fn memory_file() -> io::Result<File> {
    let fd = rustix::fs::memfd_create(c"childguard-engine", rustix::fs::MemfdFlags::CLOEXEC)?;
    Ok(File::from(fd))
}

fn read_all(mut file: File) -> io::Result<String> {
    file.rewind()?;
    let mut bytes = Vec::new();
    file.take(64 << 10).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).trim().to_string())
}
