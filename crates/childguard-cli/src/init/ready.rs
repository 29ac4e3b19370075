//! `--ready COND --ready-file PATH`: a file that exists exactly while CMD is ready, for a
//! Kubernetes `exec` readiness probe (`test -e PATH`). A thread checks the condition from
//! outside CMD every 50 ms — the library's readiness kinds that need no part in the spawn:
//! a connect (`tcp:HOST:PORT`, `unix:PATH`), an HTTP `GET` (`http:URL`), a probe command
//! (`exec:CMD`), each one attempt of [`Ready::check_once`], the same attempt the spawn's wait
//! makes — until it holds, then writes the file (through a temporary name and a rename, so a
//! probe never sees it half-made). At the stop the file is removed first, so the endpoint is
//! taken out of service before CMD gets its first signal.
//!
//! By fd (issue 49: the directory may be one others can write to, `/tmp`): its directory is
//! opened once, when the file is first written, and every step is relative to that fd — a
//! `.tmp` left over (or planted) removed with `unlinkat` (a symlink itself, never what it
//! points to), the new one made with `O_CREAT | O_EXCL | O_NOFOLLOW` (never through a symlink,
//! never an existing file), `renameat` into place, and at the stop `unlinkat`. A write and the
//! stop's removal take one lock, so a file is never written after the stop removed it.
//!
//! `notify` and `line:` are refused (`args.rs`): they would need init's spawn of CMD to wait
//! for readiness, and PID 1 cannot block in a spawn while signals and orphans wait.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use childguard::Ready;
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::messages::say;

/// How often the thread checks.
/// The ready thread's tid (0: none). An `exec:` probe is forked by this thread (the library's
/// `Ready::check_once`), so it is listed in `/proc/self/task/TID/children`; init's reaper
/// leaves those to the probe's own handle ([`crate::init::reap::reap_others`]). Race avoided
/// (*a probe reaped by init*): init reaps every child but CMD on each SIGCHLD, and a probe that
/// exits in a millisecond (`test -e FILE`) was reaped by it first — its status lost, the check
/// counted as failed, the ready file written only when the probe happened to win (5–25 s
/// instead of 0.3 s, seen in the init tests).
pub static PROBE_THREAD: AtomicI32 = AtomicI32::new(0);

const EVERY: Duration = Duration::from_millis(50);

/// The readiness watch: the file appears once the condition holds.
#[derive(Debug)]
pub struct ReadyFile {
    path: PathBuf,
    state: Arc<Mutex<State>>,
}

/// What the thread and the stop share.
#[derive(Debug, Default)]
struct State {
    stopped: bool,
    /// The file's directory, once the file was written in it.
    written_in: Option<OwnedFd>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ReadyFile {
    /// Starts the thread that waits for `ready` and then writes `path`.
    pub fn watch(ready: Ready, path: PathBuf) -> std::io::Result<ReadyFile> {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        let file = path.clone();
        thread::Builder::new()
            .name("childguard-ready".into())
            .spawn(move || {
                PROBE_THREAD.store(
                    rustix::thread::gettid().as_raw_nonzero().get(),
                    Ordering::SeqCst,
                );
                while !lock(&shared).stopped {
                    let holds = match ready.check_once() {
                        Ok(holds) => holds,
                        Err(e) => {
                            // No retry fixes it (a probe that cannot start): said once.
                            say!("--ready: {e}; no ready file will be written");
                            return;
                        }
                    };
                    if holds {
                        // Checked again after the connect, under the lock the stop takes: a
                        // stop that came meanwhile wins, and one that comes now waits for the
                        // file, then removes it.
                        let mut state = lock(&shared);
                        if !state.stopped {
                            match write(&file) {
                                Ok(dir) => state.written_in = Some(dir),
                                Err(e) => {
                                    say!("cannot write the ready file {}: {e}", file.display());
                                }
                            }
                        }
                        return;
                    }
                    thread::sleep(EVERY);
                }
            })?;
        Ok(ReadyFile { path, state })
    }

    /// The stop: no file from now on, and the one written (if any) removed — by its name in
    /// the directory it was written in (`unlinkat`).
    pub fn withdraw(&self) {
        let mut state = lock(&self.state);
        state.stopped = true;
        if let (Some(dir), Ok((_, name))) = (state.written_in.take(), split(&self.path)) {
            let _ = rustix::fs::unlinkat(&dir, name, AtFlags::empty());
        }
    }
}

/// `path`'s directory (`.` for a bare name) and its file name.
fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a file name (ends in `..` or `/`)",
        )
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// Writes `path` through a temporary name in the same directory, then renames it; every step
/// relative to the directory, opened once (see the module docs). Returns the directory.
fn write(path: &Path) -> io::Result<OwnedFd> {
    let (dir, name) = split(path)?;
    let dir = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    write_in(dir.as_fd(), name)?;
    Ok(dir)
}

/// Writes our pid to `name` in the directory open as `dir`: `NAME.tmp` made anew, then renamed.
fn write_in(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let mut tmp = OsString::from(name);
    tmp.push(".tmp");
    // Left by a run that died between its create and its rename, or planted (a symlink to a
    // file of root's): the name goes, never what a symlink points to.
    match rustix::fs::unlinkat(dir, &tmp, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    // `O_EXCL`: a file planted after the unlink is never opened (nor a symlink followed).
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let file = rustix::fs::openat(dir, &tmp, flags, Mode::from_raw_mode(0o644))?;
    let text = format!("{}\n", std::process::id());
    io::Write::write_all(&mut std::fs::File::from(file), text.as_bytes())?;
    rustix::fs::renameat(dir, &tmp, dir, name)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cg-ready-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_file_holds_our_pid_and_a_planted_tmp_symlink_is_not_followed() {
        let dir = scratch("symlink");
        let victim = dir.join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let path = dir.join("ready");
        std::os::unix::fs::symlink(&victim, dir.join("ready.tmp")).unwrap();
        let fd = write(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        let written = std::fs::symlink_metadata(&path).unwrap();
        assert!(written.file_type().is_file());
        assert_eq!(written.mode() & 0o777, 0o644);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{}\n", std::process::id()));
        assert!(!dir.join("ready.tmp").exists());
        // Written again (over a name that is now a symlink): the symlink is replaced.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_in(fd.as_fd(), OsStr::new("ready")).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_stop_removes_the_file_in_the_directory_it_was_written_in() {
        let dir = scratch("withdraw");
        let path = dir.join("ready");
        let written_in = Some(write(&path).unwrap());
        // The directory renamed away and another put at its path: the stop removes the file it
        // wrote, not one at the path now.
        let moved = dir.with_extension("moved");
        let _ = std::fs::remove_dir_all(&moved);
        std::fs::rename(&dir, &moved).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&path, "another's").unwrap();
        let file = ReadyFile {
            path: path.clone(),
            state: Arc::new(Mutex::new(State {
                stopped: false,
                written_in,
            })),
        };
        file.withdraw();
        assert!(!moved.join("ready").exists());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "another's");
        assert!(lock(&file.state).stopped);
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&moved).unwrap();
    }

    #[test]
    fn a_path_splits_into_its_directory_and_name() {
        assert_eq!(
            split(Path::new("/run/app/ready")).unwrap(),
            (Path::new("/run/app"), OsStr::new("ready"))
        );
        assert_eq!(
            split(Path::new("ready")).unwrap(),
            (Path::new("."), OsStr::new("ready"))
        );
        assert!(split(Path::new("/")).is_err());
    }
}
