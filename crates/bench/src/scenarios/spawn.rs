//! `spawn`: the cost of one spawn + close, against std and tokio doing spawn + kill + wait.
//!
//! Every side runs the same program (this binary as slowserver `--ignore-eof`) with a
//! socketpair on its stdin and stdout, and ends it with `SIGKILL`: nothing waits for `READY`,
//! so what is timed is the process machinery, from before the spawn to after the reap.
//!
//! - Ours, blocking: `ChildHandle::builder(…).socket(Stdio).ladder("KILL:1s").spawn()` then
//!   `close()` (shutdown, close, `SIGKILL` through the pidfd, wait on it, reap).
//!   Baseline: `UnixStream::pair()` + `std::process::Command::spawn()` + `kill()` + `wait()`.
//! - Ours, async: the same spawn, then `close_async().await`, on a current-thread runtime.
//!   Baseline: the same socketpair + `tokio::process::Command::spawn()` + `kill().await` (which
//!   sends `SIGKILL` and waits), on the same runtime.
//!
//! - Diagnostic rows: ours, blocking, against std with a no-op `pre_exec` hook (any hook makes
//!   std `fork()` instead of `posix_spawn`'s `clone3(CLONE_VM | CLONE_VFORK)`; childguard
//!   installs one only when it must: an inheritable fd to sweep, `exit_with_parent`, socket
//!   activation), ours vs std while one inheritable fd is open (ours then sweeps, via fork), and
//!   ours vs std with both pinned to one CPU (what we add, with no second CPU to hide it), and
//!   the floor under that: std plus childguard's system calls made directly (`spawn/floor.rs`), vs
//!   std, on one CPU.
//!
//! - Ours on our own spawn (`Builder::own_spawn`: clone3, the pidfd at birth): the blocking
//!   side again, against the same std baseline; and, with 512 MiB of this process resident,
//!   against std with a `pre_exec` hook (a `fork`, whose cost grows with the parent's memory:
//!   what std's path costs when it needs a hook) and against std without one; and, while this
//!   process holds 5,000 close-on-exec fds (a supervisor of 1,000 servers), against std: a
//!   child copies the fd table and its exec closes every entry, ~0.1 µs each; ours spawns from
//!   a thread with a table of its own (`spawn/small_table.rs`).
//!
//! The five main sides are interleaved within each repetition, in a fresh random order each
//! time, so drift hits all and no side always follows the same other side. The two diagnostic rows run afterwards, each in its own phase of ours and its
//! baseline alternating: both involve `fork`, and after a `fork` every page of this process is
//! write-protected, so whatever runs next pays write faults (~20 µs here).
//! Rows report the median time per spawn + close, in µs; `ratio` = ours / baseline.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Instant;

use childguard::{ChildHandle, Ending, Ladder, Signal, SocketMode};
use tokio::runtime::Runtime;

use super::Settings;
use crate::fixture;
use crate::row::Row;
use crate::stats::{median, shuffled_medians};
use crate::Result;

mod floor;

const ARGS: &[&str] = &["--ignore-eof"];
const LADDER: &str = "KILL:1s";
const WARM_UP: usize = 10;

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(200);
    // childguard sweeps inheritable fds >= 3 before exec (a pre_exec hook, hence fork); std
    // lets them leak. Fds inherited from whatever started us would make ours pay for a sweep
    // std skips, so the main rows run with a clean table, as a Rust program has; the
    // `leaky_fd` row measures the other case on purpose.
    let marked = crate::sys::close_on_exec_inherited_fds();
    if !marked.is_empty() {
        eprintln!("childguard-bench: spawn: marked inherited fds {marked:?} close-on-exec");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ladder: Ladder = LADDER.parse()?;
    // The fork-based diagnostic runs in a phase of its own: a `fork` leaves every page of this
    // process write-protected, and whichever side ran next paid the write faults (~20 µs
    // measured). Rotated with the others it always preceded the same side (ours, 4 reps in 5).
    let sides: [&dyn Fn() -> Result<f64>; 5] = [
        &|| ours_sync(&ladder, false),
        &|| std_once(false),
        &|| ours_async(&rt, &ladder),
        &|| tokio_once(&rt),
        &|| ours_sync(&ladder, true),
    ];
    let [ours_blocking, std_base, ours_async, tokio_base, ours_own] =
        shuffled_medians(sides, WARM_UP, reps, 0x5eed)?;
    let (ours_forked, forked) = paired(reps.div_ceil(2), &|| ours_sync(&ladder, false), &|| {
        std_once(true)
    })?;
    let big = big_parent(reps.div_ceil(2), &ladder)?;
    let (ours_leaky, std_leaky) = with_leaky_fd(reps.div_ceil(2), &ladder)?;
    let (ours_many, std_many) = with_many_fds(reps.div_ceil(2), &ladder)?;
    let one_cpu = reps.div_ceil(2);
    let (ours_one_cpu, std_one_cpu) = on_one_cpu(one_cpu, &|| ours_sync(&ladder, false))?;
    let fd_dir = floor::FdDir::open()?;
    let (floor_one_cpu, std_floor) = on_one_cpu(one_cpu, &|| floor::once(&fd_dir))?;
    Ok(vec![
        Row {
            scenario: "spawn",
            metric: "spawn_close_us",
            ours: ours_blocking,
            baseline: std_base,
            baseline_name: "std::process spawn + kill + wait (same socketpair, same program)"
                .into(),
            unit: "us",
        },
        Row {
            scenario: "spawn",
            metric: "spawn_close_own_us",
            ours: ours_own,
            baseline: std_base,
            baseline_name: "ours on our own clone3 spawn (Builder::own_spawn) vs std::process \
                            spawn + kill + wait (same socketpair, same program)"
                .into(),
            unit: "us",
        },
        Row {
            scenario: "spawn",
            metric: "spawn_close_own_512mib_vs_fork_us",
            ours: big.0,
            baseline: big.1,
            baseline_name: "512 MiB resident: ours on our own spawn vs std::process with a \
                            no-op pre_exec hook (fork: what std's path pays when it needs a hook)"
                .into(),
            unit: "us",
        },
        Row {
            scenario: "spawn",
            metric: "spawn_close_own_512mib_us",
            ours: big.0,
            baseline: big.2,
            baseline_name: "512 MiB resident: ours on our own spawn vs std::process spawn + \
                            kill + wait (posix_spawn)"
                .into(),
            unit: "us",
        },
        Row {
            scenario: "spawn",
            metric: "spawn_close_async_us",
            ours: ours_async,
            baseline: tokio_base,
            baseline_name: "tokio::process spawn + kill().await (same socketpair, same program; \
                            ours: close_async, current-thread runtime)"
                .into(),
            unit: "us",
        },
        Row {
            scenario: "spawn",
            metric: "spawn_close_vs_fork_us",
            ours: ours_forked,
            baseline: forked,
            baseline_name: "diagnostic: std::process spawn + kill + wait with a no-op pre_exec \
                            hook (fork instead of posix_spawn: what a spawn that needs a hook \
                            pays)"
                .into(),
            unit: "us",
        },
        Row {
            scenario: "spawn",
            metric: "spawn_close_leaky_fd_us",
            ours: ours_leaky,
            baseline: std_leaky,
            baseline_name: "diagnostic: std::process spawn + kill + wait while one inheritable \
                            fd is open (std leaks it into the child; ours sweeps it, via fork)"
                .into(),
            unit: "us",
        },
        Row {
            scenario: "spawn",
            metric: "spawn_close_own_many_fds_us",
            ours: ours_many,
            baseline: std_many,
            baseline_name: format!(
                "diagnostic: with {MANY_FDS} close-on-exec fds open (a supervisor of 1,000 \
                 servers): ours on our own spawn (from its small-table thread) vs std::process \
                 spawn + kill + wait (the child copies and its exec closes every one)"
            ),
            unit: "us",
        },
        Row {
            scenario: "spawn",
            metric: "spawn_close_one_cpu_us",
            ours: ours_one_cpu,
            baseline: std_one_cpu,
            baseline_name: "diagnostic: std::process spawn + kill + wait, this process and its \
                            children pinned to one CPU (nothing of ours overlaps the child's exec)"
                .into(),
            unit: "us",
        },
        Row {
            scenario: "spawn",
            metric: "spawn_close_floor_one_cpu_us",
            ours: floor_one_cpu,
            baseline: std_floor,
            baseline_name: "diagnostic, no childguard code: 'ours' is std spawn + kill + wait \
                            plus exactly the system calls childguard's spawn + close adds (fd \
                            check, pidfd_open + check, waitids, shutdown, pidfd signal, poll), \
                            made directly; both pinned to one CPU. The floor under the \
                            one_cpu row"
                .into(),
            unit: "us",
        },
    ])
}

/// `ours` vs std with this thread (and so every child it spawns) pinned to the CPU it is on.
/// With two CPUs free, the scheduler often starts the child on the other one, where its exec
/// overlaps what we do after the spawn; on one CPU every µs we add shows.
fn on_one_cpu(reps: usize, ours: &dyn Fn() -> Result<f64>) -> Result<(f64, f64)> {
    use rustix::thread::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
    let all = sched_getaffinity(None)?;
    let mut one = CpuSet::new();
    one.set(sched_getcpu());
    sched_setaffinity(None, &one)?;
    let medians = paired(reps, ours, &|| std_once(false));
    sched_setaffinity(None, &all)?;
    medians
}

/// Ours vs std while this process holds one fd without close-on-exec.
fn with_leaky_fd(reps: usize, ladder: &Ladder) -> Result<(f64, f64)> {
    let leaky = rustix::io::dup(std::io::stdin())?; // dup(2): no close-on-exec
    let medians = paired(reps, &|| ours_sync(ladder, false), &|| std_once(false));
    drop(leaky);
    medians
}

/// The fds [`with_many_fds`] holds: what a supervisor of 1,000 servers holds (each one's
/// socket, pidfd, pipes, `cgroup.events`).
const MANY_FDS: usize = 5_000;

/// Ours on our own spawn vs std while this process holds [`MANY_FDS`] close-on-exec fds
/// (`/dev/null` opened, the soft fd limit raised to the hard one if it is lower): a child
/// copies the table and its exec closes each entry; ours spawns from a thread with a small
/// table (`spawn/small_table.rs`).
fn with_many_fds(reps: usize, ladder: &Ladder) -> Result<(f64, f64)> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    let wanted = (MANY_FDS + 256) as u64;
    if limit.current.is_some_and(|cur| cur < wanted) {
        let raised = rustix::process::Rlimit {
            current: Some(limit.maximum.map_or(wanted, |max| max.min(wanted))),
            maximum: limit.maximum,
        };
        setrlimit(Resource::Nofile, raised)?;
    }
    let mut held = Vec::with_capacity(MANY_FDS);
    for _ in 0..MANY_FDS {
        held.push(
            std::fs::File::open("/dev/null")
                .map_err(|e| format!("spawn: holding {MANY_FDS} fds (raise `ulimit -n`): {e}"))?,
        );
    }
    let medians = paired(reps, &|| ours_sync(ladder, true), &|| std_once(false));
    drop(held);
    setrlimit(Resource::Nofile, limit)?;
    medians
}

/// Medians of `ours` and `base` run alternately, each first in every other rep (so each
/// follows the other as often: both may `fork`, which taxes whatever runs next).
fn paired(
    reps: usize,
    ours: &dyn Fn() -> Result<f64>,
    base: &dyn Fn() -> Result<f64>,
) -> Result<(f64, f64)> {
    let mut ours_samples = Vec::with_capacity(reps);
    let mut base_samples = Vec::with_capacity(reps);
    for rep in 0..reps {
        if rep % 2 == 0 {
            ours_samples.push(ours()?);
            base_samples.push(base()?);
        } else {
            base_samples.push(base()?);
            ours_samples.push(ours()?);
        }
    }
    Ok((median(&ours_samples), median(&base_samples)))
}

fn spawn_ours(ladder: &Ladder, own: bool) -> Result<ChildHandle> {
    Ok(ChildHandle::builder(fixture::command(ARGS)?)
        .socket(SocketMode::Stdio)
        .ladder(ladder.clone())
        .own_spawn(own)
        .spawn()?)
}

/// With 512 MiB of this process resident (touched, so a `fork` must copy its page tables):
/// medians of ours on our own spawn, std with a `pre_exec` hook (fork), std without.
///
/// The forks run in a phase of their own, after the other two: after a `fork` every page of
/// this process is write-protected, and whatever runs next pays the copy-on-write faults —
/// with 512 MiB on transparent huge pages, 2 MiB copied per page written (a first run that
/// interleaved them charged ours ~100 µs of the fork's faults).
fn big_parent(reps: usize, ladder: &Ladder) -> Result<(f64, f64, f64)> {
    let resident = vec![1u8; 512 << 20];
    std::hint::black_box(&resident);
    let (own, plain) = paired(reps, &|| ours_sync(ladder, true), &|| std_once(false))?;
    let forked: Result<Vec<f64>> = (0..reps).map(|_| std_once(true)).collect();
    drop(resident);
    Ok((own, median(&forked?), plain))
}

/// The close ended the child with its `SIGKILL` and reaped it — or, when this thread was
/// descheduled long enough after the shutdown (~1 ms seen on a loaded machine) for the child to
/// reach its `READY` write, the write failed with `EPIPE` and the child left with status 0 on
/// its own (slowserver's "nobody is listening"), which the close rightly reports as `Eof`.
fn check(report: &childguard::CloseReport) -> Result<()> {
    let by_kill = Ending::Rung {
        index: 0,
        signal: Signal::KILL,
    };
    let left_on_epipe =
        report.ended_by == Ending::Eof && report.status.is_some_and(|s| s.success());
    if (report.ended_by != by_kill && !left_on_epipe) || report.reaped.is_none() {
        return Err(format!("spawn: expected KILL to end it and a reap: {report}").into());
    }
    Ok(())
}

fn us(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

fn ours_sync(ladder: &Ladder, own: bool) -> Result<f64> {
    let start = Instant::now();
    let report = spawn_ours(ladder, own)?.close()?;
    let took = us(start);
    check(&report)?;
    Ok(took)
}

fn ours_async(rt: &Runtime, ladder: &Ladder) -> Result<f64> {
    rt.block_on(async {
        let start = Instant::now();
        let report = spawn_ours(ladder, false)?.close_async().await?;
        let took = us(start);
        check(&report)?;
        Ok(took)
    })
}

/// The program every baseline runs, its stdin and stdout on the child's end of a fresh
/// socketpair; with our end.
fn command_on_socketpair() -> Result<(Command, UnixStream)> {
    let (ours, theirs) = UnixStream::pair()?;
    let theirs = OwnedFd::from(theirs);
    let mut cmd = fixture::command(ARGS)?;
    cmd.stdin(Stdio::from(theirs.try_clone()?))
        .stdout(Stdio::from(theirs));
    Ok((cmd, ours))
}

/// std spawn + kill + wait; `hooked`: with a no-op `pre_exec` hook.
fn std_once(hooked: bool) -> Result<f64> {
    let start = Instant::now();
    let (mut cmd, ours) = command_on_socketpair()?;
    if hooked {
        crate::sys::install_noop_pre_exec(&mut cmd);
    }
    let mut child = cmd.spawn()?;
    drop(cmd);
    child.kill()?;
    child.wait()?;
    drop(ours);
    Ok(us(start))
}

fn tokio_once(rt: &Runtime) -> Result<f64> {
    rt.block_on(async {
        let start = Instant::now();
        let (cmd, ours) = command_on_socketpair()?;
        let mut cmd = tokio::process::Command::from(cmd);
        let mut child = cmd.spawn()?;
        drop(cmd);
        child.kill().await?;
        drop(ours);
        Ok(us(start))
    })
}
