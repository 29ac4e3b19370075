//! Every close path of a [`ChildHandle`]: [`close`](ChildHandle::close),
//! [`close_with`](ChildHandle::close_with) and the drop through one `close_path`, whose steps
//! are named calls in order; [`begin_close`](ChildHandle::begin_close) and
//! [`Closing::finish`], shared with the tokio face and `output`; the close of a handle
//! inherited through `fork()`; and `abandon`, for a child whose start failed.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::base::signal::Signal;
use crate::close::climb::Climb;
use crate::close::close_control::CloseControl;
use crate::close::ladder::{Ladder, Rung};
use crate::close::report::{CloseReport, Ending};
use crate::error::{Error, ErrorKind, Result};
use crate::handle::builder::Reap;
use crate::handle::ChildHandle;
use crate::process::Process;
use crate::reaper::{self, Job};
use crate::spawn::activation::SocketDir;
use crate::spawn::capture::Captured;
use crate::spawn::stdio::Pipes;

impl ChildHandle {
    /// Ends a child whose start failed (activation connect, capture, readiness): `SIGKILL` (to
    /// the group with `process_group`) and reap, bounded like any close; the socket directory
    /// goes too. Returns the output tail, for the error.
    pub(crate) fn abandon(self) -> Option<String> {
        self.abandon_with_report().ok().and_then(|r| r.output_tail)
    }

    /// [`abandon`](ChildHandle::abandon), returning the close report.
    pub(crate) fn abandon_with_report(mut self) -> Result<CloseReport> {
        if let Ok(ladder) = Ladder::new([Rung::new(Signal::KILL, Duration::from_secs(1))]) {
            self.ladder = ladder;
        }
        self.reap = Reap::Blocking;
        self.close_path(CloseControl::new())
    }

    /// Shuts the socket down, closes it, climbs the ladder and reaps the child (see the close
    /// timeline above). `Drop` does the same and discards the report.
    ///
    /// An error names the step that failed ([`ErrorKind::Signal`]: the kernel refused a rung,
    /// e.g. `EPERM` from an LSM; [`ErrorKind::Wait`]: waiting or reaping failed) and carries the
    /// report ([`Error::close_report`]). Whatever failed, the child is not dropped unreaped: it was
    /// reaped, or handed to the background reaper, which watches it (sending nothing more
    /// after a refused signal) and reaps it when it exits. If no reaper thread can be started
    /// either, the close still returns within its bound, with a report that notes the child
    /// was left unreaped; it is handed over at the next hand-off or
    /// [`reaper::drain`](crate::reaper::drain).
    pub fn close(mut self) -> Result<CloseReport> {
        self.close_path(CloseControl::new())
    }

    /// [`close`](ChildHandle::close), told things while it climbs (see [`CloseControl`]):
    /// a ladder to climb instead of the handle's, an fd whose readability means "go to the
    /// next rung now", and a callback before each rung's signal. The steps, their order and
    /// the report are `close()`'s; only the waits between the rungs watch more.
    ///
    /// This is how a supervisor that receives signals of its own (the `childguard` CLI: a
    /// second Ctrl-C escalates at once) drives the library's climb instead of its own.
    pub fn close_with(mut self, control: CloseControl<'_>) -> Result<CloseReport> {
        self.close_path(control)
    }

    /// The one close path: shutdown → close → ladder → reap, each a named step.
    pub(super) fn close_path(&mut self, mut control: CloseControl<'_>) -> Result<CloseReport> {
        let _span = crate::base::trace::close_span(
            self.program.as_deref(),
            self.process.as_ref().map(Process::pid),
        );
        if let Some(ladder) = control.ladder.take() {
            self.ladder = ladder;
        }
        let reap = self.reap;
        let mut closing = self.begin_close();
        let Some((mut process, mut climb)) = closing.child.take() else {
            return closing.finish(None, Ok(true));
        };
        // A NOTIFY_SOCKET is in the climb (`begin_close`): read before every step, for
        // EXTEND_TIMEOUT_USEC= and STOPPING=1, here and in the reaper alike.
        let climbed = match closing.earlier_exit.take() {
            Some(e) => Err(e),
            None if reap == Reap::Blocking => climb.run_blocking(&mut process, &mut control),
            None => climb_ladder(&mut climb, &mut process, reap),
        };
        let finished = closing.finish(Some((process, climb)), climbed);
        crate::handle::interruptible::after_close(finished, control.take_interrupted())
    }

    /// Steps 0–2 of the close path (note an earlier exit, shutdown, close), shared with the
    /// tokio face: what is left is the climb, which each driver does its own way, and
    /// [`Closing::finish`]. Marks the handle closed.
    pub(crate) fn begin_close(&mut self) -> Closing {
        if self.process.as_ref().is_some_and(Process::is_inherited) {
            return self.let_go_inherited();
        }
        self.closed = true;
        let mut process = self.process.take();
        let earlier_exit = observe_earlier_exit(process.as_mut()).err();
        if let Some(p) = process.as_mut() {
            p.snapshot_descendants();
        }
        let started = Instant::now();
        // The handle is done with its program name: the report carries it from here.
        let mut report = CloseReport::new(
            self.program.take(),
            process.as_ref().map(Process::server_pid),
        );
        report
            .notes
            .extend(process.as_ref().and_then(Process::fallback_note));
        report.notes.extend(
            self.spawned_by_std
                .take()
                .map(|why| format!("spawned by std's path, not our own clone3 spawn: {why}")),
        );
        report.containment_fallback = self.containment_fallback.take();
        report.containment = self.containment.clone();
        shut_down_and_close(self.socket.take(), started, &mut report);
        // Our end of a piped stdin goes with the socket: EOF for a server reading it — also
        // when it was handed out as an async writer half (a write under way finishes first; a
        // writer waiting for room is woken, and gets `BrokenPipe`). Its stdout/stderr stay
        // open until the child is reaped or handed to the reaper (`Closing::finish`), so a
        // server logging its shutdown is not killed by `SIGPIPE` (see `crate::spawn::stdio`).
        self.pipes.close_stdin("the handle was closed");
        let pipes = std::mem::take(&mut self.pipes);
        remove_socket_dir(self.socket_dir.take(), &mut report);
        let notify = self.notify.take();
        #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
        let mut earlier_kill = self.last_kill;
        #[cfg(target_os = "linux")]
        if let Some(notify) = &notify {
            // The close climbs from here: a watchdog deadline must not start another climb,
            // and one under way stops; the close resumes behind its last signal, as after a
            // `kill` (whichever came last).
            if let Some(watchdog) = notify.stop_watchdog() {
                earlier_kill = earlier_kill.filter(|k| k.1 > watchdog.1).or(Some(watchdog));
            }
        }
        let child = process.map(|p| {
            let mut climb = Climb::begin(
                &self.ladder,
                started,
                earlier_kill,
                self.release_memory,
                self.skip_ignored,
            );
            // The climb reads the NOTIFY_SOCKET, whoever drives it (blocking, reaper, tokio).
            if let Some(notify) = notify {
                climb.listen_to(notify);
            }
            (p, climb)
        });
        Closing {
            started,
            report,
            child,
            earlier_exit,
            capture: self.capture.take(),
            capture_settled: false,
            pipes,
        }
    }

    /// The close of a handle inherited through `fork()` without `exec` (see
    /// [`Process::is_inherited`]): the child, its socket, socket directory, cgroup and guardian
    /// are the parent's. A normal close here would end them for the parent: the shutdown acts
    /// on the shared socket (the parent's server sees EOF), the pidfd and `cgroup.kill` reach
    /// the parent's child, the socket directories would be removed, the guardian dismissed. So
    /// this process only closes its copies of the socket and pipes; everything whose drop
    /// would act on the parent's state (the process with its pidfd, cgroup and guardian, the
    /// socket directory, the capture, the `NOTIFY_SOCKET`) is forgotten: its fds stay open,
    /// close-on-exec, until this process execs or exits. The report says so; nothing is
    /// signalled or waited for.
    fn let_go_inherited(&mut self) -> Closing {
        self.closed = true;
        let started = Instant::now();
        let process = self.process.take();
        let mut report = CloseReport::new(
            self.program.take(),
            process.as_ref().map(Process::server_pid),
        );
        if let Some(process) = &process {
            report.notes.push(format!(
                "inherited through fork(): the child belongs to process {}, which spawned it; \
                 this process only closed its copies of the handle's fds",
                process.owner()
            ));
        }
        std::mem::forget(process);
        std::mem::forget(self.socket_dir.take());
        std::mem::forget(self.capture.take());
        // Off Linux a NotifySocket has nothing to drop; forgetting it is then a no-op.
        #[allow(clippy::forget_non_drop)]
        std::mem::forget(self.notify.take());
        // Closing (not shutting down) our copy of the socket leaves the parent's connection be.
        drop(self.socket.take());
        Closing {
            started,
            report,
            child: None,
            earlier_exit: None,
            capture: None,
            capture_settled: false,
            pipes: Pipes::default(),
        }
    }
}

/// Step 0: notes an exit that happened before the close, before its clock starts.
fn observe_earlier_exit(process: Option<&mut Process>) -> io::Result<()> {
    process.map_or(Ok(()), |p| p.check_exit().map(drop))
}

/// Steps 1 and 2: `shutdown(SHUT_RDWR)`, then close.
fn shut_down_and_close(socket: Option<UnixStream>, started: Instant, report: &mut CloseReport) {
    let Some(socket) = socket else { return };
    // ENOTCONN (the peer is already gone) is expected and harmless.
    if let Err(e) = rustix::net::shutdown(socket.as_fd(), rustix::net::Shutdown::Both) {
        if e != rustix::io::Errno::NOTCONN {
            report
                .notes
                .push(format!("shutdown: {}", io::Error::from(e)));
        }
    }
    report.shutdown = Some(started.elapsed());
    drop(socket);
}

/// Step 2, socket activation: remove the socket file and its private directory, now that our
/// connection is closed (the server's listener copy does not need the name).
fn remove_socket_dir(dir: Option<SocketDir>, report: &mut CloseReport) {
    let Some(dir) = dir else { return };
    let path = dir.path().display().to_string();
    if let Err(e) = dir.remove() {
        report.notes.push(format!("removing socket {path}: {e}"));
    }
}

/// Steps 3 and 4: the EOF wait and the rungs. Returns whether the child (and its group) is gone.
fn climb_ladder(climb: &mut Climb, process: &mut Process, reap: Reap) -> io::Result<bool> {
    match reap {
        Reap::Blocking => climb.run_blocking(process, &mut CloseControl::new()),
        Reap::Background => {
            if process.is_gone()? {
                return Ok(true);
            }
            climb.advance(process, Instant::now())?;
            Ok(false)
        }
    }
}

/// A close between its socket steps and its ladder (see [`ChildHandle::begin_close`]).
#[derive(Debug)]
pub(crate) struct Closing {
    started: Instant,
    report: CloseReport,
    /// The child and its climb; `None` for a socket-only handle.
    pub(crate) child: Option<(Process, Climb)>,
    /// Noting an earlier exit failed: skip the ladder, report this error.
    pub(crate) earlier_exit: Option<io::Error>,
    /// The output capture, whose tail goes into the report.
    capture: Option<Captured>,
    /// The capture was settled already (read to its end, lines passed on) by the caller.
    capture_settled: bool,
    /// The stdio pipes still held (stdout, stderr; stdin is closed): closed once the climb is
    /// over, by `finish`, whichever driver climbed (blocking, tokio).
    pipes: Pipes,
}

impl Closing {
    /// For a caller that must not block its thread (the tokio face): the capture to settle
    /// elsewhere, and [`Closing::capture_settled`] after. `None` without a capture.
    #[cfg(feature = "tokio")]
    pub(crate) fn take_capture(&mut self) -> Option<Captured> {
        self.capture.take()
    }

    /// The capture back, settled, with the note [`Captured::settle`] gave.
    #[cfg(feature = "tokio")]
    pub(crate) fn capture_settled(&mut self, capture: Captured, note: Option<String>) {
        self.capture = Some(capture);
        self.capture_settled = true;
        self.report.notes.extend(note);
    }

    /// Step 5 and the report, once the climb is over (`climbed`: whether the child is gone).
    pub(crate) fn finish(
        mut self,
        child: Option<(Process, Climb)>,
        climbed: io::Result<bool>,
    ) -> Result<CloseReport> {
        let mut error = None;
        if let Some((process, mut climb)) = child {
            climb.record(&process, &mut self.report);
            let refused = climb.take_signal_error();
            if let Some((rung, signal, e)) = &refused {
                self.report.notes.push(format!(
                    "rung {rung} ({signal}): {e}; no further signal sent, the child is watched \
                     and reaped when it exits"
                ));
            }
            let outcome = reap_or_hand_off(process, climb, climbed, self.started, &mut self.report);
            // Each error with the kind of the step that failed; the report goes with it.
            error = match (outcome, refused) {
                (Err(e), _) => Some((ErrorKind::Wait, e)),
                (Ok(()), Some((_, _, e))) => Some((ErrorKind::Signal, e)),
                (Ok(()), None) => None,
            };
        }
        if let Some(capture) = self.capture.take() {
            // The child is gone: what it wrote is in the pipes. Let the loop read it
            // (microseconds) so the tail ends with its last words, and the callback thread pass
            // every line read on to `on_line` (issue 34 item 2) — but never wait on an async
            // runtime's thread: the tokio face settles on a blocking thread before this
            // (`settle_capture`); elsewhere on a runtime the tail is taken as it stands.
            if !self.capture_settled && !on_async_runtime() {
                let note = capture.settle(Instant::now() + CAPTURE_SYNC_MAX);
                self.report.notes.extend(note);
            }
            capture.report_into(&mut self.report);
        }
        let report = finish(self.report, self.started);
        // The child is reaped (or with the reaper): our ends of its output pipes can go.
        drop(std::mem::take(&mut self.pipes));
        match error {
            None => Ok(report),
            Some((kind, e)) => {
                Err(Error::new(kind, report.program.as_deref(), e).with_close_report(report))
            }
        }
    }
}

/// The longest a close waits for the capture thread to read what the exited child left. It
/// answers in microseconds; the bound is for a thread held up by a slow line callback (or a
/// panic hook printing a backtrace), and adds to the close's bound only with a capture.
pub(crate) const CAPTURE_SYNC_MAX: Duration = Duration::from_secs(1);

/// Step 5: reap what is gone; hand the rest (with any rungs still to come) to the reaper.
fn reap_or_hand_off(
    mut process: Process,
    mut climb: Climb,
    climbed: io::Result<bool>,
    started: Instant,
    report: &mut CloseReport,
) -> io::Result<()> {
    report.group_survivors = process.survivor_pids();
    report.escaped = process.escaped_pids();
    // A tree init's tree is gone once it is reaped, as a cgroup once it is empty.
    let contained = process.cgroup_report().is_some() || process.holds_tree();
    // Only a handle that had a socket can have it held by someone else. A contained child's
    // descendants are all in its cgroup, which the close waits to be empty. A group whose
    // members could not be listed is treated as off Linux: members we do not know of may
    // survive.
    let unlisted = process.survivors_unlisted().map(|e| e.to_string());
    report.socket_may_be_held = report.shutdown.is_some()
        && !contained
        && (!process.leads_group() || !cfg!(target_os = "linux") || unlisted.is_some());
    if let Some(e) = unlisted {
        report.notes.push(format!(
            "process group members could not be listed ({e}): survivors may exist"
        ));
    }
    let ladder_done = matches!(climbed, Ok(false)) && climb.is_exhausted(Instant::now());
    // What the NOTIFY_SOCKET heard so far; the socket goes on with the climb if the reaper
    // takes it (and is removed with the climb), else it is removed now, below.
    report.notify = climb.notify_report(started);
    if matches!(climbed, Ok(true))
        || (ladder_done && !process.is_running() && !process.waits_for_cgroup())
    {
        report.notify = climb.finish_notify(started);
        // Gone — or only group members outlived the ladder: release the leader now.
        report.outlived_ladder = !report.group_survivors.is_empty();
        let reaped = process.reap();
        // Also when the reap (or the cgroup's removal) failed: the report says where it is.
        report.cgroup = process.cgroup_report();
        report.notes.extend(process.take_cgroup_notes());
        report.status = reaped?;
        report.reaped = Some(started.elapsed());
        if report.status.is_none() {
            report
                .notes
                .push("exit status lost: the child was reaped by someone else".into());
        }
        return climbed.map(drop);
    }
    report.outlived_ladder = ladder_done;
    report.handed_to_reaper = true;
    // Before the hand-off: members left in the cgroup (D state) are counted now.
    report.cgroup = process.cgroup_report();
    report.notes.extend(process.take_cgroup_notes());
    if !ladder_done {
        report.ended_by = Ending::InBackground;
    }
    let pending = (!ladder_done).then_some(climb);
    let handed = reaper::hand_off(Job {
        process,
        climb: pending,
        on_done: None,
    });
    if let Err(e) = handed {
        note_parked(report, &e);
    }
    climbed.map(drop)
}

/// The report of a close whose child could not be handed to the reaper (no thread could be
/// started: `pids.max`, `RLIMIT_NPROC`). The close does not wait for the child in place — a
/// child in `D` state, or a ladder without `KILL`, would make that wait unbounded — so it
/// returns within its bound, and the child is left unreaped *for now*: it is parked, and handed
/// to the reaper (rungs still to come included) by the next hand-off or
/// [`reaper::drain`](crate::reaper::drain) that can start the thread.
fn note_parked(report: &mut CloseReport, e: &io::Error) {
    report.handed_to_reaper = false;
    report.notes.push(format!(
        "left unreaped: the background reaper could not be started ({e}); the child is parked \
         and handed to it at the next hand-off or drain()"
    ));
}

fn finish(mut report: CloseReport, started: Instant) -> CloseReport {
    report.total = started.elapsed();
    report
}

/// Whether this thread runs inside a tokio runtime (feature `tokio`; never without it).
fn on_async_runtime() -> bool {
    #[cfg(feature = "tokio")]
    return ::tokio::runtime::Handle::try_current().is_ok();
    #[cfg(not(feature = "tokio"))]
    return false;
}
