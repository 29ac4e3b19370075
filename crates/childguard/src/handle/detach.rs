//! [`ChildHandle::detach`]: give the child up without a close, and still reap it.

use std::fmt;
use std::io;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use crate::error::{Error, ErrorKind};
use crate::process::Process;
use crate::reaper::{self, Job};
use crate::spawn::activation::SocketDir;
use crate::ChildHandle;

/// What a detach takes out of the handle (see [`ChildHandle::take_for_detach`]).
#[derive(Debug)]
pub(crate) struct Parts {
    pub(crate) program: Option<String>,
    pub(crate) process: Option<Process>,
    pub(crate) socket: Option<UnixStream>,
    pub(crate) socket_dir: Option<SocketDir>,
}

impl ChildHandle {
    /// Gives the child up without closing it, and hands our end of the socket to the caller.
    ///
    /// What happens, and when:
    ///
    /// - **Now**: nothing is sent to the child and nothing is shut down. The child keeps
    ///   running; the returned socket (`None` if the handle had none) is yours, connected to it
    ///   as before, and closing it is up to you. The child and its pidfd go to the shared
    ///   background [`reaper`](crate::reaper) as a job with no ladder: it never signals the
    ///   child, it only waits for its exit.
    /// - **When the child exits on its own** (or someone else ends it): the reaper reaps it at
    ///   once — no zombie, and the pidfd is closed. With
    ///   [`process_group`](crate::Builder::process_group) the leader is reaped when it exits,
    ///   whatever members remain (nothing signals the group any more). With
    ///   [`SocketMode::Activation`](crate::SocketMode::Activation) the socket file and its
    ///   directory stay until then, so [`socket_path`](ChildHandle::socket_path) (ask before
    ///   detaching) keeps accepting connections, and are removed after the reap.
    /// - **The stdio pipes** the handle still holds are closed, as dropping a std `Child`
    ///   closes its pipes: take the ones the child still needs first
    ///   ([`take_stdout`](ChildHandle::take_stdout) …).
    /// - [`exit_with_parent`](crate::Builder::exit_with_parent) still holds: the child dies
    ///   with this process. Call [`reaper::drain`](crate::reaper::drain) before exiting if the
    ///   reaps should happen in this process rather than by init.
    ///
    /// This is the way out instead of `mem::forget`, which leaks the pidfd and the socket and
    /// leaves the child a zombie once it exits.
    ///
    /// # Errors
    ///
    /// If the background reaper cannot be started (no thread or fd left), nothing is given up:
    /// the [`DetachError`] carries the untouched handle back ([`DetachError::into_handle`]),
    /// which can be closed, dropped or detached again.
    pub fn detach(mut self) -> Result<Option<UnixStream>, DetachError> {
        let mut parts = self.take_for_detach();
        let Some(process) = parts.process.take() else {
            // A socket-only handle: nothing to reap.
            return Ok(parts.socket.take());
        };
        if process.is_inherited() {
            // A copy made by fork() without exec: the child and its socket directory are the
            // parent's, to reap and remove (see `ChildHandle::let_go_inherited`). Handing them
            // to our reaper would dismiss the parent's guardian and remove its directory when
            // the job ends; this process gives up its copies of their fds by forgetting them.
            std::mem::forget(process);
            std::mem::forget(parts.socket_dir.take());
            return Ok(parts.socket.take());
        }
        // Shared with the job's callback so that a failed hand-off can give it back.
        let socket_dir = Arc::new(Mutex::new(parts.socket_dir.take()));
        let for_reaper = Arc::clone(&socket_dir);
        let on_done: reaper::OnDone = Box::new(move |_: &Process| {
            // Dropping the SocketDir removes the socket file and its directory.
            drop(for_reaper.lock().unwrap_or_else(|p| p.into_inner()).take());
        });
        let job = Job {
            process,
            climb: None,
            on_done: Some(on_done),
        };
        match reaper::try_hand_off(job) {
            Ok(()) => Ok(parts.socket.take()),
            Err(failed) => {
                let (job, e) = *failed;
                parts.process = Some(job.process);
                drop(job.on_done);
                parts.socket_dir = socket_dir.lock().unwrap_or_else(|p| p.into_inner()).take();
                let error = Error::new(
                    ErrorKind::Wait,
                    parts.program.as_deref(),
                    io::Error::new(
                        e.kind(),
                        format!(
                            "cannot start the background reaper to own the detached child: {e}"
                        ),
                    ),
                );
                self.untake(parts);
                Err(DetachError {
                    handle: Box::new(self),
                    error,
                })
            }
        }
    }
}

/// A [`ChildHandle::detach`] that could not happen: the error, and the handle, unchanged.
#[derive(Debug)]
pub struct DetachError {
    handle: Box<ChildHandle>,
    error: Error,
}

impl DetachError {
    /// Why the detach failed.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The handle, as it was before the call.
    pub fn into_handle(self) -> ChildHandle {
        *self.handle
    }
}

impl fmt::Display for DetachError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "detaching failed: {}", self.error)
    }
}

impl std::error::Error for DetachError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
