//! No grace waited for a launcher gone (issue 31 item 2).
//!
//! A server is often started through a launcher — `npx` → `npm exec` → `sh -c` → `node`,
//! `uvx`, `sh -c "…"` — and the child we spawned, the *main* process of the climb, is that
//! launcher. A rung that reaches the main alone (contained with `KillMode::Mixed`: the
//! catchable rungs go to the main, or its group) may end the launcher in a millisecond while
//! the real server, further down the tree, never got the signal. Waiting out that rung's
//! grace, and the next rung's (whose signal would go to the main, now gone), only to end at
//! the cgroup's `KILL`, cost 3 s for nothing (`childguard run --contain` of `npx … server`:
//! 3,007 ms).
//!
//! So when a step of the climb finds the main exited while others remain (the target is not
//! gone: its cgroup has members, its group has members), the climb goes on against them at
//! once: the rung that ended the main goes to every process left, unless it reached them
//! already (a rung to the whole group or the whole cgroup), and its grace is counted from
//! then; the rest of the ladder follows from there. The report lists the signal with
//! [`SentSignal::to_rest`](crate::SentSignal::to_rest).
//!
//! Not passed on: the EOF wait (the others share the main's stdin and socket, and saw the
//! same EOF), an uncatchable rung (`KILL` reaches the whole cgroup, or the whole group, by
//! itself), a main that exited before any rung was sent (the next rung goes to those left
//! when it is due: see `Process::signal_counting`).
//!
//! Race avoided (*the main's exit and the others' signal*): the exit is seen at a step,
//! after the main's pidfd woke the wait, at most one wake-up after it happened; processes
//! that the main's exit ended too (its group, with `process_group`) are not re-signalled
//! because the rung reached them already (`to_group`), and members that exit between the
//! listing and the signal are skipped by their pidfds (`containment/members.rs`).

use std::io;
use std::time::Instant;

use super::Climb;
use crate::close::report::SentSignal;
use crate::close::target::Target;
use crate::core::wait::later;

impl Climb {
    /// At a step: if the main process has exited since the last step and the rung that ended
    /// it did not reach the others, sends it to them now and restarts its grace. Once per
    /// climb.
    pub(super) fn pass_on_main_exit<T: Target + ?Sized>(
        &mut self,
        target: &mut T,
        now: Instant,
    ) -> io::Result<()> {
        if self.main_exit_passed || !target.main_exited() {
            return Ok(());
        }
        self.main_exit_passed = true;
        let Some(last) = self.sent.last().copied() else {
            return Ok(());
        };
        if last.to_group || last.to_cgroup || last.to_rest || !last.signal.is_catchable() {
            return Ok(());
        }
        let Some(rung) = self.ladder.rungs().get(last.rung).copied() else {
            return Ok(());
        };
        let (_, reached) = match target.signal_counting(rung.signal) {
            Ok(counted) => counted,
            Err(e) => {
                self.give_up(rung.signal, e, now);
                return Ok(());
            }
        };
        if reached == Some(0) {
            return Ok(()); // nobody left to pass it to
        }
        if let Err(e) = target.signal_counting(crate::base::signal::Signal::CONT) {
            self.give_up(crate::base::signal::Signal::CONT, e, now);
            return Ok(());
        }
        crate::base::trace::rung(target.pid(), last.rung, rung.signal, reached);
        let mut sent = SentSignal::new(
            rung.signal,
            now.saturating_duration_since(self.started),
            last.rung,
            target.leads_group(),
        );
        sent.to_cgroup = target.reaches_cgroup(rung.signal);
        sent.reached = reached;
        sent.to_rest = true;
        self.sent.push(sent);
        // The grace of the rung that ended the main, counted from now; the rest follow.
        self.deadline = later(now, rung.grace);
        self.hard_deadline = later(self.deadline, self.extend_max);
        Ok(())
    }
}
