//! `MAINPID=`: the server's main process, when it is not our child (a wrapper such as
//! `runuser` or a shell that forks the server; systemd's `PIDFile=`/`MAINPID=`).
//!
//! Accepted only for a process of the server's own: with containment, one in the child's
//! cgroup; without, a descendant of the child (its parent chain in `/proc`, as for
//! [`NotifyAccess::All`](crate::NotifyAccess::All)) — the same judge as a datagram's sender
//! (`notify_access.rs`), asked of a pidfd opened on the named process first, so that the
//! process checked is the one we keep (a pid reused after the check is not ours: the pidfd
//! names the old process). Anything else is refused and noted: `MAINPID=0`, garbage, a
//! process outside the tree, one that does not exist. `MAINPID=` naming the child itself
//! goes back to the child.
//!
//! From then on each catchable rung of the close goes to the main process instead of the
//! child (through its pidfd, `SIGCONT` after it), and `KILL` to both; once the main process
//! has exited, the rungs go to the child again. The child itself is still what the close waits
//! for and reaps: a wrapper that waits for its server exits with it; one that does not gets
//! the remaining rungs, and `KILL` reaches it (its group or cgroup) as without `MAINPID=`.

use std::io;

use super::super::notify_access::{Access, Sender};
use super::{NotifyAccess, NotifySocket};
use crate::base::signal::Signal;
use crate::close::target::{Pinned, Target};

/// The accepted main process: a [`Pinned`] target, the same the watchdog's climb and init's
/// sweep signal — one mechanism for "a process named by a pidfd that somebody else reaps"
/// (exited? signal it, `ESRCH` meaning gone), not a copy of it here.
#[derive(Debug)]
pub(crate) struct MainPid {
    pub(crate) pid: u32,
    target: Pinned,
}

impl NotifySocket {
    /// `MAINPID=value` from `sender` (who may speak).
    pub(super) fn main_pid(&mut self, sender: u32, value: &str) {
        let pid = match value.parse::<u32>() {
            Ok(pid) if pid > 0 && i32::try_from(pid).is_ok() => pid,
            _ => {
                return self.note_main(format!(
                    "MAINPID={value:?} from pid {sender} refused: not a process id"
                ))
            }
        };
        if pid == self.access.child {
            self.main = None;
            return self.note_main(format!("MAINPID={pid}: the child itself"));
        }
        let pidfd = match crate::process::pid(pid).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
                .map_err(io::Error::from)
        }) {
            Ok(pidfd) => pidfd,
            Err(e) => {
                return self.note_main(format!("MAINPID={pid} refused: no such process ({e})"))
            }
        };
        let judged = pidfd.try_clone().map(|copy| {
            let named = Sender {
                pid: Some(pid),
                pidfd: Some(Ok(copy)),
            };
            let any = Access {
                rule: NotifyAccess::All,
                ..self.access.clone()
            };
            any.judge(&named)
        });
        match judged {
            Ok(Ok(_)) => {
                self.main = Some(MainPid {
                    pid,
                    target: Pinned::new(pidfd, pid, false),
                });
                self.main_pid_now = Some(pid);
                self.note_main(format!(
                    "MAINPID={pid} accepted: the close's catchable rungs go to it"
                ));
            }
            Ok(Err(why)) => {
                // The judge speaks of a datagram's sender: keep the reason only.
                let why = why.split_once(", ").map_or(why.as_str(), |(_, w)| w);
                self.note_main(format!("MAINPID={pid} refused: {why}"));
            }
            Err(e) => self.note_main(format!("MAINPID={pid} refused: {e}")),
        }
    }

    /// Whether a main process was named and still counts.
    pub(crate) fn has_main(&self) -> bool {
        self.main.is_some()
    }

    fn note_main(&mut self, note: String) {
        // Bounded as the ignored datagrams are: a server repeating MAINPID= cannot grow it.
        if self.main_notes.len() < 16 {
            self.main_notes.push(note);
        }
    }

    /// See [`Listener::signal_main`](crate::close::climb::Listener::signal_main).
    pub(crate) fn signal_main(&mut self, signal: Signal) -> Option<io::Result<u32>> {
        if signal == Signal::NONE {
            return None;
        }
        let main = self.main.as_mut()?;
        let pid = main.pid;
        let sent = match main.target.signal_counting(signal) {
            // Exited (its pidfd readable, or ESRCH): the rungs go to the child again.
            Ok((false, _)) => {
                self.main = None;
                self.note_main(format!(
                    "the main process {pid} exited: the rungs go to the child again"
                ));
                return None;
            }
            Ok((true, _)) => {
                if signal.is_catchable() {
                    // Best effort, as the climb's own SIGCONT: a server that exited on the
                    // signal already needs none (the pinned target then sends nothing).
                    let _ = main.target.signal_counting(Signal::CONT);
                }
                Ok(pid)
            }
            Err(e) => Err(e),
        };
        self.note_main(match &sent {
            Ok(_) => format!("{signal} to the main process {pid}"),
            Err(e) => format!("{signal} to the main process {pid} failed: {e}"),
        });
        Some(sent)
    }
}
