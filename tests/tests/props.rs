//! Property tests (issue 6, items 1 and 3).
//!
//! - `random_interleavings_leave_nothing_behind`: random sequences of spawn / kill (also from
//!   another thread) / try_wait / wait_timeout / EXIT over the socket / close (also from another
//!   thread, also several at once) / drop, over three handle slots, slowserver behaviours and
//!   millisecond ladders. After every case: no child of ours in `/proc` (alive or zombie), the
//!   fd table back to where it was, every `CloseReport` internally consistent and its ending
//!   matching the exit status.
//! - The fuzz oracles of `fuzz/checks.rs` (ladder text, signal names, activation names) on
//!   proptest-generated input: the short, CI-sized fuzz run.
//!
//! Case counts: 512 for the interleavings and 4096 for each parser property by default;
//! `CHILDGUARD_PROPTEST_CASES=N` sets the interleavings to N (the parsers get 8 N).
//!
//! Every test here takes `SERIAL`: counting fds and children needs a process where nothing
//! else runs at the same time.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use childguard::{ChildHandle, CloseReport, Ending, Ladder, Reap, Rung, Signal, SocketMode};
use childguard_tests::*;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

#[path = "../../fuzz/checks.rs"]
mod checks;

static SERIAL: Mutex<()> = Mutex::new(());

/// What the interleavings did, printed at the end (endings seen, operations run).
static TALLY: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn tally(what: impl Into<String>) {
    *TALLY
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(what.into())
        .or_default() += 1;
}

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Interleaving cases: 512 unless `CHILDGUARD_PROPTEST_CASES` says otherwise.
fn cases() -> u32 {
    std::env::var("CHILDGUARD_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

/// How long a close, drop or kill may run past what its ladder or grace allows (scheduling on a
/// loaded two-core CI machine, debug build; thousands of closes a run, so the tail counts: a
/// 0.5–1 s stall of the closing thread happens). The graces here are at most 5 ms a rung:
/// 2 s is still far below what a broken close takes — waiting for an exit that never comes
/// (forever), or climbing the default ladder instead (3 s to its KILL for a server that
/// ignores HUP and TERM, 8 s in all).
const SLACK: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------------
// The model: what a slowserver does, and what a test did to it.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    /// Exits 0 on EOF; HUP, TERM, INT, USR1 kill it.
    Plain,
    IgnoreHup,
    IgnoreHupTerm,
    /// Catches HUP/TERM/INT and exits 128+n after 3 ms; ignores EOF.
    SlowExit,
    /// Stops itself after READY; ignores EOF.
    Stopped,
    /// Forks a worker that shares the socket; exits 0 on EOF.
    Grandchild,
    /// Exits 3 at once, before READY.
    ExitSoon,
    /// Has a `READ` in flight (20 ms) when the close comes; exits 0 on EOF or EPIPE.
    ReadInFlight,
}

impl Behaviour {
    fn args(self) -> &'static [&'static str] {
        match self {
            Behaviour::Plain => &[],
            Behaviour::IgnoreHup => &["--ignore", "HUP", "--ignore-eof"],
            Behaviour::IgnoreHupTerm => &["--ignore", "HUP,TERM", "--ignore-eof"],
            Behaviour::SlowExit => &["--slow-exit", "3ms", "--ignore-eof"],
            Behaviour::Stopped => &["--stop-self", "--ignore-eof"],
            Behaviour::Grandchild => &["--fork-grandchild"],
            Behaviour::ExitSoon => &["--exit-immediately", "3"],
            Behaviour::ReadInFlight => &["--delay-read", "20ms"],
        }
    }

    fn exits_on_eof(self) -> bool {
        matches!(
            self,
            Behaviour::Plain | Behaviour::Grandchild | Behaviour::ReadInFlight
        )
    }

    /// Whether `signal` can be what killed it (not ignored, not caught, terminating).
    fn can_die_of(self, signal: Signal) -> bool {
        let terminating = [
            Signal::HUP,
            Signal::TERM,
            Signal::INT,
            Signal::USR1,
            Signal::KILL,
        ];
        if !terminating.contains(&signal) {
            return false;
        }
        match self {
            Behaviour::IgnoreHup => signal != Signal::HUP,
            Behaviour::IgnoreHupTerm => signal != Signal::HUP && signal != Signal::TERM,
            Behaviour::SlowExit => ![Signal::HUP, Signal::TERM, Signal::INT].contains(&signal),
            _ => true,
        }
    }
}

#[derive(Debug, Clone)]
struct Spec {
    behaviour: Behaviour,
    ladder: Ladder,
    group: bool,
    background: bool,
    portable: bool,
    exit_with_parent: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Spawn(usize, Box<Spec>),
    Kill(usize, Signal, Duration),
    KillFromThread(usize, Signal, Duration),
    TryWait(usize),
    WaitTimeout(usize, Duration),
    SendExit(usize, i32),
    Close(usize),
    CloseFromThread(usize),
    Drop(usize),
    CloseAllAtOnce,
}

const SLOTS: usize = 3;

/// A child the case spawned, pinned by a pidfd of our own so that the cleanup can never
/// signal a recycled pid.
#[derive(Debug)]
struct Tracked {
    pid: u32,
    pin: OwnedFd,
    grandchild: Option<(u32, OwnedFd)>,
    spec: Spec,
    /// Signals passed to `kill` (sent, or not sent because the child had already exited).
    killed_with: Vec<Signal>,
    /// Codes asked for with `EXIT n`.
    exit_codes: Vec<i32>,
    /// A status `kill`/`try_wait`/`wait_timeout` returned.
    seen_status: Option<ExitStatus>,
}

#[derive(Debug)]
struct Live {
    handle: ChildHandle,
    tracked: Tracked,
}

// ---------------------------------------------------------------------------------------------
// Strategies.

fn rung_signal() -> impl Strategy<Value = Signal> {
    prop_oneof![
        3 => Just(Signal::HUP),
        2 => Just(Signal::TERM),
        1 => Just(Signal::INT),
        1 => Just(Signal::USR1),
        2 => Just(Signal::KILL),
    ]
}

fn kill_signal() -> impl Strategy<Value = Signal> {
    prop_oneof![
        4 => rung_signal(),
        1 => Just(Signal::STOP),
        1 => Just(Signal::CONT),
    ]
}

/// 0 to 5 ms, in microseconds.
fn grace() -> impl Strategy<Value = Duration> {
    (0u64..=5_000).prop_map(Duration::from_micros)
}

fn ladder() -> impl Strategy<Value = Ladder> {
    (
        proptest::option::weighted(0.3, grace()),
        proptest::collection::vec((rung_signal(), grace()), 1..=3),
        proptest::bool::weighted(0.8),
    )
        .prop_map(|(eof, rungs, end_with_kill)| {
            let mut rungs: Vec<Rung> = rungs.into_iter().map(|(s, g)| Rung::new(s, g)).collect();
            if end_with_kill && !rungs.iter().any(|r| r.signal == Signal::KILL) {
                rungs.push(Rung::new(Signal::KILL, Duration::from_millis(5)));
            }
            let ladder = Ladder::new(rungs).expect("non-empty");
            match eof {
                Some(g) => ladder.with_eof_grace(g),
                None => ladder,
            }
        })
}

fn behaviour() -> impl Strategy<Value = Behaviour> {
    prop_oneof![
        3 => Just(Behaviour::Plain),
        2 => Just(Behaviour::IgnoreHup),
        1 => Just(Behaviour::IgnoreHupTerm),
        1 => Just(Behaviour::SlowExit),
        1 => Just(Behaviour::Stopped),
        1 => Just(Behaviour::Grandchild),
        1 => Just(Behaviour::ExitSoon),
        1 => Just(Behaviour::ReadInFlight),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        behaviour(),
        ladder(),
        proptest::bool::weighted(0.3),
        proptest::bool::weighted(0.25),
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.15),
    )
        .prop_map(
            |(behaviour, ladder, group, background, portable, exit_with_parent)| Spec {
                behaviour,
                ladder,
                group,
                background,
                portable,
                exit_with_parent,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    let slot = 0..SLOTS;
    prop_oneof![
        4 => (slot.clone(), spec()).prop_map(|(s, spec)| Op::Spawn(s, Box::new(spec))),
        2 => (slot.clone(), kill_signal(), grace()).prop_map(|(s, sig, g)| Op::Kill(s, sig, g)),
        1 => (slot.clone(), kill_signal(), grace())
            .prop_map(|(s, sig, g)| Op::KillFromThread(s, sig, g)),
        1 => slot.clone().prop_map(Op::TryWait),
        1 => (slot.clone(), grace()).prop_map(|(s, g)| Op::WaitTimeout(s, g)),
        1 => (slot.clone(), 1..=4i32).prop_map(|(s, c)| Op::SendExit(s, c)),
        2 => slot.clone().prop_map(Op::Close),
        1 => slot.clone().prop_map(Op::CloseFromThread),
        1 => slot.prop_map(Op::Drop),
        1 => Just(Op::CloseAllAtOnce),
    ]
}

// ---------------------------------------------------------------------------------------------
// Running a case.

type Check = Result<(), TestCaseError>;

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)+)));
        }
    };
}

fn spawn(spec: &Spec) -> Result<Live, TestCaseError> {
    let handle = ChildHandle::builder(slowserver(spec.behaviour.args()))
        .socket(SocketMode::Stdio)
        .ladder(spec.ladder.clone())
        .process_group(spec.group)
        .reap(if spec.background {
            Reap::Background
        } else {
            Reap::Blocking
        })
        .force_portable(spec.portable)
        .exit_with_parent(spec.exit_with_parent)
        .spawn()
        .map_err(|e| TestCaseError::fail(format!("spawn {spec:?}: {e}")))?;
    let pid = handle.id().expect("a spawned handle has a pid");
    // The child is ours and unreaped: the pidfd pins exactly it.
    let pin = pidfd(pid);
    let mut grandchild = None;
    if spec.behaviour != Behaviour::ExitSoon {
        let ready = read_ready(&handle);
        if ready.grandchild != 0 {
            grandchild = Some((ready.grandchild, pidfd(ready.grandchild)));
        }
        if spec.behaviour == Behaviour::ReadInFlight {
            let mut socket = handle.socket().expect("socket");
            socket.write_all(b"READ 1\n").expect("READ");
        }
    }
    Ok(Live {
        handle,
        tracked: Tracked {
            pid,
            pin,
            grandchild,
            spec: spec.clone(),
            killed_with: Vec::new(),
            exit_codes: Vec::new(),
            seen_status: None,
        },
    })
}

/// Whether `status` is one this child can have, given what was sent to it (`sent`: ladder
/// signals before the exit plus every `kill`), and whether its socket was shut down.
fn status_allowed(t: &Tracked, status: ExitStatus, sent: &[Signal], shut_down: bool) -> bool {
    let b = t.spec.behaviour;
    if let Some(k) = status.signal() {
        return sent.iter().any(|s| s.as_raw() == k && b.can_die_of(*s));
    }
    let Some(code) = status.code() else {
        return false;
    };
    let caught = [Signal::HUP, Signal::TERM, Signal::INT];
    (code == 0 && shut_down && b.exits_on_eof())
        || (code == 3 && b == Behaviour::ExitSoon)
        || t.exit_codes.contains(&code)
        || (b == Behaviour::SlowExit
            && sent
                .iter()
                .any(|s| caught.contains(s) && code == 128 + s.as_raw()))
}

/// Checks a status returned before the close (by kill, try_wait, wait_timeout), and that it
/// never changes.
fn saw_status(t: &mut Tracked, status: Option<ExitStatus>, what: &str) -> Check {
    let Some(status) = status else {
        return Ok(());
    };
    ensure!(
        status_allowed(t, status, &t.killed_with, false),
        "{what}: status {status:?} impossible for {:?} after kills {:?}",
        t.spec.behaviour,
        t.killed_with
    );
    if let Some(seen) = t.seen_status {
        ensure!(
            seen == status,
            "{what}: status changed from {seen:?} to {status:?}"
        );
    }
    t.seen_status = Some(status);
    Ok(())
}

/// The report's own consistency, and its ending against the exit status.
fn check_report(t: &Tracked, r: &CloseReport, took: Duration) -> Check {
    let ladder = &t.spec.ladder;
    let ctx = || format!("{r}\n{r:?}\nspec {:?}", t.spec);
    ensure!(r.pid == Some(t.pid), "pid: {}", ctx());
    ensure!(!r.to_string().contains('\n'), "Display: {}", ctx());
    let shutdown = r
        .shutdown
        .ok_or_else(|| TestCaseError::fail(format!("no shutdown: {}", ctx())))?;
    ensure!(shutdown <= r.total, "shutdown after total: {}", ctx());
    // Signals: in time order, rung indices increasing, each the rung's own signal.
    for pair in r.signals.windows(2) {
        ensure!(
            pair[0].at <= pair[1].at && pair[0].rung < pair[1].rung,
            "signals out of order: {}",
            ctx()
        );
    }
    for s in &r.signals {
        ensure!(
            ladder.rungs().get(s.rung).map(|rung| rung.signal) == Some(s.signal),
            "signal {s:?} is not rung {}'s: {}",
            s.rung,
            ctx()
        );
        ensure!(s.to_group == t.spec.group, "to_group: {}", ctx());
        ensure!(
            shutdown <= s.at && s.at <= r.total,
            "signal outside shutdown..total: {}",
            ctx()
        );
    }
    // exited ≤ reaped ≤ total; the status is known exactly when the exit is (nobody else reaps).
    ensure!(
        r.status.is_some() == r.exited.is_some(),
        "status vs exited: {}",
        ctx()
    );
    if let (Some(e), Some(p)) = (r.exited, r.reaped) {
        ensure!(e <= p, "exited after reaped: {}", ctx());
    }
    if let Some(p) = r.reaped {
        ensure!(p <= r.total, "reaped after total: {}", ctx());
    }
    ensure!(
        r.handed_to_reaper == r.reaped.is_none(),
        "handed_to_reaper vs reaped: {}",
        ctx()
    );
    ensure!(
        r.socket_may_be_held != t.spec.group,
        "socket_may_be_held: {}",
        ctx()
    );
    ensure!(r.notes.is_empty(), "notes: {}", ctx());
    ensure!(
        took <= ladder.total_grace() + SLACK && r.total <= took,
        "close took {took:?}, ladder allows {:?}: {}",
        ladder.total_grace(),
        ctx()
    );
    // Signals before the observed exit; after it, only a group can still be signalled.
    let before_exit: Vec<Signal> = r
        .signals
        .iter()
        .filter(|s| r.exited.is_none_or(|e| s.at <= e))
        .map(|s| s.signal)
        .collect();
    if !t.spec.group {
        ensure!(
            before_exit.len() == r.signals.len(),
            "a signal after the exit: {}",
            ctx()
        );
    }
    let mut sent = before_exit.clone();
    sent.extend(&t.killed_with);
    let last_rung = r
        .signals
        .iter()
        .rev()
        .find(|s| r.exited.is_some_and(|e| s.at <= e));
    match r.ended_by {
        Ending::Rung { index, signal } => {
            ensure!(
                last_rung.map(|s| (s.rung, s.signal)) == Some((index, signal)),
                "ending is not the last rung before the exit: {}",
                ctx()
            );
            ensure!(r.exited.is_some_and(|e| shutdown <= e), "{}", ctx());
        }
        Ending::Kill { signal } => {
            ensure!(last_rung.is_none(), "kill ending after a rung: {}", ctx());
            ensure!(
                t.killed_with.contains(&signal),
                "ending names a kill that never happened: {}",
                ctx()
            );
        }
        Ending::Eof | Ending::BeforeClose => {
            ensure!(
                last_rung.is_none(),
                "{:?} after a rung: {}",
                r.ended_by,
                ctx()
            );
            ensure!(
                r.status.is_some_and(|s| s.code().is_some()),
                "{:?} but no exit code: {}",
                r.ended_by,
                ctx()
            );
            if r.ended_by == Ending::Eof {
                ensure!(r.exited.is_some_and(|e| shutdown <= e), "{}", ctx());
            }
        }
        Ending::Outlived => ensure!(
            r.outlived_ladder && r.handed_to_reaper && r.status.is_none(),
            "outlived: {}",
            ctx()
        ),
        Ending::InBackground => ensure!(
            t.spec.background && r.handed_to_reaper,
            "in background: {}",
            ctx()
        ),
        other => ensure!(false, "unexpected ending {other:?}: {}", ctx()),
    }
    if let Some(status) = r.status {
        ensure!(
            status_allowed(t, status, &sent, true),
            "status {status:?} does not match the ending (sent {sent:?}): {}",
            ctx()
        );
        if let Some(seen) = t.seen_status {
            ensure!(seen == status, "status changed from {seen:?}: {}", ctx());
        }
    }
    if r.reaped.is_some() {
        ensure!(
            proc_ppid(t.pid) != Some(std::process::id()),
            "reported reaped but still our child: {}",
            ctx()
        );
    }
    Ok(())
}

fn close_checked(live: Live, done: &mut Vec<Tracked>) -> Check {
    let started = Instant::now();
    let closed = live.handle.close();
    let report = match closed {
        Ok(r) => r,
        Err(e) => {
            done.push(live.tracked);
            return Err(TestCaseError::fail(format!("close: {e}")));
        }
    };
    let took = started.elapsed();
    tally(format!("ending {}", report.ended_by));
    // Tracked first: the cleanup must see this child even if its report is wrong.
    done.push(live.tracked);
    check_report(done.last().expect("just pushed"), &report, took)
}

fn kill_checked(live: &mut Live, signal: Signal, grace: Duration, what: &str) -> Check {
    live.tracked.killed_with.push(signal);
    let started = Instant::now();
    let result = live
        .handle
        .kill(signal, grace)
        .map_err(|e| TestCaseError::fail(format!("{what}({signal}): {e}")))?;
    ensure!(
        started.elapsed() <= grace + SLACK,
        "{what} took {:?} for a grace of {grace:?}",
        started.elapsed()
    );
    saw_status(&mut live.tracked, result, what)
}

fn run_op(op: &Op, slots: &mut [Option<Live>], done: &mut Vec<Tracked>) -> Check {
    let name = format!("{op:?}");
    let name = name.split(['(', ' ']).next().unwrap_or_default();
    let occupied = match op {
        Op::Spawn(..) | Op::CloseAllAtOnce => true,
        Op::Kill(i, ..)
        | Op::KillFromThread(i, ..)
        | Op::TryWait(i)
        | Op::WaitTimeout(i, _)
        | Op::SendExit(i, _)
        | Op::Close(i)
        | Op::CloseFromThread(i)
        | Op::Drop(i) => slots[*i].is_some(),
    };
    if occupied {
        tally(format!("op {name}"));
    }
    match op {
        Op::Spawn(i, spec) => {
            if let Some(old) = slots[*i].take() {
                close_checked(old, done)?;
            }
            slots[*i] = Some(spawn(spec)?);
        }
        Op::Kill(i, signal, grace) => {
            if let Some(live) = slots[*i].as_mut() {
                kill_checked(live, *signal, *grace, "kill")?;
            }
        }
        Op::KillFromThread(i, signal, grace) => {
            if let Some(mut live) = slots[*i].take() {
                let (signal, grace) = (*signal, *grace);
                let (live, checked) = std::thread::spawn(move || {
                    let checked = kill_checked(&mut live, signal, grace, "kill from thread");
                    (live, checked)
                })
                .join()
                .expect("kill thread");
                slots[*i] = Some(live);
                checked?;
            }
        }
        Op::TryWait(i) => {
            if let Some(live) = slots[*i].as_mut() {
                let status = live
                    .handle
                    .try_wait()
                    .map_err(|e| TestCaseError::fail(format!("try_wait: {e}")))?;
                saw_status(&mut live.tracked, status, "try_wait")?;
            }
        }
        Op::WaitTimeout(i, timeout) => {
            if let Some(live) = slots[*i].as_mut() {
                let status = live
                    .handle
                    .wait_timeout(*timeout)
                    .map_err(|e| TestCaseError::fail(format!("wait_timeout: {e}")))?;
                saw_status(&mut live.tracked, status, "wait_timeout")?;
            }
        }
        Op::SendExit(i, code) => {
            if let Some(live) = slots[*i].as_mut() {
                live.tracked.exit_codes.push(*code);
                let mut socket = live.handle.socket().expect("socket");
                // The server may be gone already (EPIPE): fine.
                let _ = socket.write_all(format!("EXIT {code}\n").as_bytes());
            }
        }
        Op::Close(i) => {
            if let Some(live) = slots[*i].take() {
                close_checked(live, done)?;
            }
        }
        Op::CloseFromThread(i) => {
            if let Some(live) = slots[*i].take() {
                let (checked, tracked) = std::thread::spawn(move || {
                    let mut done = Vec::new();
                    let checked = close_checked(live, &mut done);
                    (checked, done)
                })
                .join()
                .expect("close thread");
                done.extend(tracked);
                checked?;
            }
        }
        Op::Drop(i) => {
            if let Some(live) = slots[*i].take() {
                let bound = live.tracked.spec.ladder.total_grace() + SLACK;
                let started = Instant::now();
                drop(live.handle);
                let took = started.elapsed();
                done.push(live.tracked);
                ensure!(took <= bound, "drop took {took:?}, bound {bound:?}");
            }
        }
        Op::CloseAllAtOnce => {
            let threads: Vec<_> = slots
                .iter_mut()
                .filter_map(Option::take)
                .map(|live| {
                    std::thread::spawn(move || {
                        let mut done = Vec::new();
                        let checked = close_checked(live, &mut done);
                        (checked, done)
                    })
                })
                .collect();
            let mut first_err = Ok(());
            for t in threads {
                let (checked, tracked) = t.join().expect("close thread");
                done.extend(tracked);
                if first_err.is_ok() {
                    first_err = checked;
                }
            }
            first_err?;
        }
    }
    Ok(())
}

fn pidfd_kill(pin: &OwnedFd) {
    // ESRCH (already gone) is fine: the pidfd names exactly our process, never a recycled pid.
    let _ = rustix::process::pidfd_send_signal(pin, rustix::process::Signal::KILL);
}

/// Ends the case: closes what is left, ends children whose ladder cannot (no KILL rung), drains
/// the reaper, and checks that nothing is left.
fn finish(mut slots: Vec<Option<Live>>, mut done: Vec<Tracked>, fds_before: usize) -> Check {
    let mut first_err = Ok(());
    for live in slots.iter_mut().filter_map(Option::take) {
        let checked = close_checked(live, &mut done);
        if first_err.is_ok() {
            first_err = checked;
        }
    }
    let result = first_err.and_then(|()| leaves_nothing(&done, fds_before));
    if result.is_err() {
        scrub(&done);
    }
    result
}

/// Whether the close's ladder still has a KILL rung to send. A `kill(sig)` before the close
/// counts as a rung taken: the climb resumes behind the *first* rung sending `sig`
/// (docs/design.md), so a later repeat of `sig` never makes it skip a KILL rung in between.
fn ladder_ends_it(t: &Tracked) -> bool {
    let rungs = t.spec.ladder.rungs();
    let resume = t
        .killed_with
        .last()
        .and_then(|sig| rungs.iter().position(|r| r.signal == *sig))
        .map_or(0, |i| i + 1);
    rungs[resume..].iter().any(|r| r.signal == Signal::KILL)
}

fn leaves_nothing(done: &[Tracked], fds_before: usize) -> Check {
    for t in done {
        if !ladder_ends_it(t) {
            pidfd_kill(&t.pin);
        }
        // Without a process group the worker is not the library's to end.
        if let (false, Some((_, pin))) = (t.spec.group, &t.grandchild) {
            pidfd_kill(pin);
        }
    }
    let longest = done
        .iter()
        .map(|t| t.spec.ladder.total_grace())
        .max()
        .unwrap_or_default();
    let drained = childguard::reaper::drain(Instant::now() + longest + Duration::from_secs(5));
    ensure!(
        drained,
        "the reaper still owns {} children",
        childguard::reaper::in_flight()
    );
    let left = our_children();
    ensure!(left.is_empty(), "children left in /proc: {left:?}");
    for t in done {
        if let Some((gc, _)) = &t.grandchild {
            ensure!(
                // Generous: a SIGKILLed grandchild is gone in ms; a survivor never goes.
                eventually(Duration::from_secs(10), || !is_alive(*gc)),
                "grandchild {gc} of {:?} survived",
                t.spec
            );
        }
    }
    // Our pins are the only fds the case itself holds; count without them.
    let pins: usize = done
        .iter()
        .map(|t| 1 + usize::from(t.grandchild.is_some()))
        .sum();
    // Eventually: `spawn()` with `exit_with_parent` can return a moment before the spawner
    // thread drops the child's ends of the socket (faults.rs::
    // spawn_returns_holding_only_our_end_of_the_socket); a leak is an fd that stays.
    eventually(Duration::from_secs(10), || fd_count() - pins == fds_before);
    let fds_after = fd_count() - pins;
    ensure!(
        fds_after == fds_before,
        "fd count {fds_before} -> {fds_after}"
    );
    Ok(())
}

/// After a failed case: ends and reaps everything the case spawned (through our pidfds, never
/// by a pid that may have been recycled), so that the next case starts clean.
fn scrub(done: &[Tracked]) {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    for t in done {
        pidfd_kill(&t.pin);
        if let Some((_, pin)) = &t.grandchild {
            pidfd_kill(pin);
        }
    }
    childguard::reaper::drain(Instant::now() + Duration::from_secs(5));
    for t in done {
        let _ = waitid(
            WaitId::PidFd(std::os::fd::AsFd::as_fd(&t.pin)),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        );
    }
}

fn run_case(ops: &[Op]) -> Check {
    let fds_before = fd_count();
    let mut slots: Vec<Option<Live>> = (0..SLOTS).map(|_| None).collect();
    let mut done = Vec::new();
    let mut result = Ok(());
    for op in ops {
        result = run_op(op, &mut slots, &mut done);
        if result.is_err() {
            break;
        }
    }
    let finished = finish(slots, done, fds_before);
    result.and(finished)
}

/// Creates the library's process-wide, lazily made fds (the SIGCHLD notifier, the reaper's
/// wake pipe and its SIGCHLD registration) so that they do not count as a leak of the first
/// case that happens to need them.
fn warm_up() {
    let handle = ChildHandle::builder(slowserver(&["--ignore", "HUP", "--ignore-eof"]))
        .socket(SocketMode::Stdio)
        .ladder("HUP:1ms,KILL:1s".parse().unwrap())
        .force_portable(true)
        .reap(Reap::Background)
        .spawn()
        .unwrap();
    read_ready(&handle);
    drop(handle);
    assert!(childguard::reaper::drain(
        Instant::now() + Duration::from_secs(5)
    ));
}

#[test]
fn random_interleavings_leave_nothing_behind() {
    let _serial = serial();
    warm_up();
    let config = ProptestConfig {
        cases: cases(),
        max_shrink_iters: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let started = Instant::now();
    let result = runner.run(&proptest::collection::vec(op(), 1..10), |ops| {
        run_case(&ops)
    });
    eprintln!(
        "{} interleaving cases in {:.1}s; {:?}",
        cases(),
        started.elapsed().as_secs_f64(),
        TALLY.lock().unwrap_or_else(|p| p.into_inner())
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// Fuzz-like parser properties (the CI-sized run of fuzz/checks.rs).

fn parser_config() -> ProptestConfig {
    ProptestConfig {
        cases: cases() * 8,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Pieces of ladder text, valid and not, so that generated strings often parse.
const TOKENS: &[&str] = &[
    "EOF",
    "eof",
    "HUP",
    "sighup",
    "SIGTERM",
    "term",
    "KILL",
    "kill",
    "USR1",
    "RTMIN",
    "15",
    "9",
    "0",
    "34",
    "64",
    "65",
    "999",
    "-1",
    "+9",
    "SIG",
    "HUPP",
    ":",
    ":",
    ",",
    ",",
    " ",
    "\t",
    "\u{a0}",
    "1s",
    "10ms",
    "1us",
    "3ns",
    "0s",
    "1min",
    "2h",
    "1s500ms",
    "1.5s",
    "1 s",
    "ms",
    "18446744073709551615s",
    "584542046090y",
    "500000000000y",
    "600y",
    "999999999ns",
    "é",
    "",
];

fn token_soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::sample::select(TOKENS), 0..12).prop_map(|t| t.concat())
}

/// A well-formed ladder text over the whole range of durations humantime accepts.
fn ladder_text_from_parts() -> impl Strategy<Value = String> {
    let signal = proptest::sample::select(&["HUP", "SIGTERM", "int", "9", "USR2", "34"][..]);
    let duration = (0u64..=u64::MAX / 2, 0u32..1_000_000_000)
        .prop_map(|(s, n)| format!("{s}s {n}ns"))
        .boxed();
    let small = (0u64..10_000).prop_map(|ms| format!("{ms}ms")).boxed();
    let grace = prop_oneof![3 => small, 1 => duration];
    (
        proptest::option::of(grace.clone()),
        proptest::collection::vec((signal, grace), 1..4),
    )
        .prop_map(|(eof, rungs)| {
            let mut parts: Vec<String> = eof.map(|g| format!("EOF:{g}")).into_iter().collect();
            parts.extend(rungs.into_iter().map(|(s, g)| format!("{s}:{g}")));
            parts.join(",")
        })
}

#[test]
fn fuzz_ladder_text() {
    let _serial = serial();
    let mut runner = TestRunner::new(parser_config());
    let inputs = prop_oneof![
        token_soup(),
        ladder_text_from_parts(),
        any::<String>(),
        proptest::collection::vec(any::<u8>(), 0..48)
            .prop_map(|b| checks::text_of(&b).into_owned()),
    ];
    runner
        .run(&inputs, |text| {
            checks::ladder_text(&text);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn fuzz_signal_names() {
    let _serial = serial();
    let mut runner = TestRunner::new(parser_config());
    let inputs = prop_oneof![
        token_soup(),
        any::<String>(),
        (-100i32..200).prop_map(|n| n.to_string()),
        "(?i)(sig)?(hup|int|quit|term|kill|usr[12]|stop|cont|rtmin|abort|alarm|child|io|sys)",
    ];
    runner
        .run(&inputs, |text| {
            checks::signal_text(&text);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    // Numbers and names agree for every number.
    for n in -5..=80 {
        assert_eq!(
            Signal::from_raw(n),
            n.to_string().parse::<Signal>().ok(),
            "{n}"
        );
    }
}

#[test]
fn fuzz_activation_names() {
    let _serial = serial();
    let dir = scratch("fdnames");
    std::fs::create_dir_all(&dir).unwrap();
    let mut runner = TestRunner::new(parser_config());
    let inputs = prop_oneof![
        "[ -~]{1,255}",
        "[ -~]{250,260}",
        "[a-z:]{0,8}",
        any::<String>(),
        Just(String::new()),
    ];
    runner
        .run(&inputs, |name| {
            checks::activation_name(&name, &dir);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Kills and reaps a child that a panicking close left behind (through our own pidfd, so never
/// a recycled pid), so that one failure does not cascade into the other tests.
fn reap_leftover(pin: &OwnedFd) {
    use rustix::process::{waitid, WaitId, WaitIdOptions};
    pidfd_kill(pin);
    let _ = waitid(
        WaitId::PidFd(std::os::fd::AsFd::as_fd(pin)),
        WaitIdOptions::EXITED,
    );
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Runs `scenario` on a fresh slowserver (`args`, `ladder`) in a thread of its own; returns
/// the panic it caused, if any, after cleaning up the child.
fn survives(
    ladder: Ladder,
    args: &'static [&'static str],
    scenario: impl FnOnce(ChildHandle) + Send + 'static,
) -> Option<String> {
    let handle = ChildHandle::builder(slowserver(args))
        .socket(SocketMode::Stdio)
        .ladder(ladder)
        .spawn()
        .unwrap();
    let pin = pidfd(handle.id().unwrap());
    read_ready(&handle);
    let outcome = std::thread::spawn(move || scenario(handle)).join();
    reap_leftover(&pin);
    outcome.err().map(|p| panic_text(&*p))
}

/// Graces that parse, that a program builds, or that a caller passes must also be usable:
/// the close, `kill` and `wait_timeout` compute deadlines from them, and "wait forever"
/// (`Duration::MAX`) must not panic. Text graces are capped at `MAX_GRACE` (365 days);
/// `Rung::new` and `with_eof_grace` take any `Duration`.
#[test]
fn extreme_graces_do_not_panic() {
    let _serial = serial();
    let mut failures = Vec::new();
    let mut check = |what: String, panic: Option<String>| {
        if let Some(p) = panic {
            failures.push(format!("{what}: panicked: {p}"));
        }
    };
    let longest_text = "KILL:365days".parse::<Ladder>().expect("MAX_GRACE parses");
    assert_eq!(longest_text.rungs()[0].grace, childguard::MAX_GRACE);
    let err = "KILL:366days".parse::<Ladder>().unwrap_err().to_string();
    assert!(err.contains("KILL:366days"), "{err}");
    let kill_forever = Ladder::new([Rung::new(Signal::KILL, Duration::MAX)]).unwrap();
    let eof_forever = Ladder::new([Rung::new(Signal::KILL, Duration::from_secs(1))])
        .unwrap()
        .with_eof_grace(Duration::MAX);
    for ladder in [longest_text, kill_forever, eof_forever] {
        let what = format!("close with ladder {ladder}");
        check(
            what.clone(),
            survives(ladder, &[], move |h| {
                let report = h.close().expect("close");
                assert!(report.reaped.is_some(), "{what}: {report}");
            }),
        );
    }
    let term_forever = Ladder::new([
        Rung::new(Signal::TERM, Duration::MAX),
        Rung::new(Signal::KILL, Duration::from_secs(1)),
    ])
    .unwrap();
    check(
        "kill(TERM, 1s), then close with ladder TERM:MAX,KILL:1s".into(),
        survives(term_forever, &["--ignore-eof"], |mut h| {
            let _ = h.kill(Signal::TERM, Duration::from_secs(1)).expect("kill");
            let _ = h.close().expect("close");
        }),
    );
    let one_second = || "KILL:1s".parse::<Ladder>().unwrap();
    check(
        "kill(TERM, Duration::MAX)".into(),
        survives(one_second(), &[], |mut h| {
            let status = h.kill(Signal::TERM, Duration::MAX).expect("kill");
            assert_eq!(status.and_then(|s| s.signal()), Some(libc::SIGTERM));
        }),
    );
    check(
        "wait_timeout(Duration::MAX)".into(),
        survives(one_second(), &[], |mut h| {
            h.socket().unwrap().write_all(b"EXIT 4\n").unwrap();
            let status = h.wait_timeout(Duration::MAX).expect("wait_timeout");
            assert_eq!(status.and_then(|s| s.code()), Some(4));
        }),
    );
    assert!(
        failures.is_empty(),
        "{} of 6 uses of an extreme duration failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn fdname_model_follows_systemd() {
    // The independent model the activation oracle compares the library with.
    assert!(checks::is_valid_fdname("nbd sock-1"));
    assert!(checks::is_valid_fdname(&"a".repeat(255)));
    for bad in ["", "a:b", "é", "tab\t", "nul\0"] {
        assert!(!checks::is_valid_fdname(bad), "{bad:?}");
    }
    assert!(!checks::is_valid_fdname(&"a".repeat(256)));
}
