//! `libnbd`: closing a real nbdkit with a read in flight — libnbd against childguard.
//!
//! Server (all variants): `nbdkit -s eval get_size='echo 512' pread='sleep 10; head -c $3
//! /dev/zero'`, spawned over a socketpair on its stdin/stdout (libnbd's `connect_command`, our
//! `SocketMode::Stdio`). One 512-byte read is sent and timing starts once its `sleep` runs.
//!
//! - Ours: [`ChildHandle::close`] with `HUP:200ms,TERM:200ms,KILL:1s` and `process_group`.
//! - libnbd (python3-libnbd, run as a `python3` subprocess that times itself): (a) `del h`
//!   (`nbd_close`: close the socket, then `waitpid`); (b) `h.kill_subprocess(SIGTERM)` first;
//!   (c) `h.kill_subprocess(SIGKILL)` first. (a) and (b) wait for the read (≈ 10 s), so they
//!   run 3 times, spread among ours; (c) runs as often as ours, interleaved.
//!
//! Rows: `close_ms` (median) and `surviving_grandchildren` (the pread's `sleep` processes still
//! alive when the close returned, summed over the repetitions), ours against each variant.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ending, Ladder, SocketMode};

use super::{spread, Settings};
use crate::fixture::ms;
use crate::row::Row;
use crate::stats::median;
use crate::Result;

const SERVER: &[&str] = &[
    "nbdkit",
    "-s",
    "eval",
    "get_size=echo 512",
    "pread=sleep 10; head -c $3 /dev/zero",
];
const LADDER: &str = "HUP:200ms,TERM:200ms,KILL:1s";
const SLOW_REPS: usize = 3;
const INSTALL: &str = "apt-get install -y nbdkit qemu-utils libnbd-bin python3-libnbd";
/// Longest wait for the pread's `sleep` to start.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The libnbd side: connect_command, aio_pread, wait for the `sleep`, then close one way, and
/// print `CLOSE_MS SURVIVORS`.
const LIBNBD_SCRIPT: &str = r#"
import os, signal, sys, time
import nbd

def stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    return s[s.index("(") + 1:s.rindex(")")], rest[0], int(rest[1])

def descendants(root):
    kids = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = stat(int(name))
            if st:
                kids.setdefault(st[2], []).append(int(name))
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out

def alive(pid):
    st = stat(pid)
    return st is not None and st[1] not in ("Z", "X")

variant, argv = sys.argv[1], sys.argv[2:]
h = nbd.NBD()
h.connect_command(argv)
buf = nbd.Buffer(512)
h.aio_pread(buf, 0)
deadline = time.monotonic() + 10
sleepers = []
while not sleepers and time.monotonic() < deadline:
    sleepers = [p for p in descendants(os.getpid()) if (stat(p) or ("",))[0] == "sleep"]
    time.sleep(0.001)
if not sleepers:
    sys.exit("the pread's sleep never started")
t0 = time.monotonic()
if variant == "term":
    h.kill_subprocess(signal.SIGTERM)
elif variant == "kill":
    h.kill_subprocess(signal.SIGKILL)
del h
took = (time.monotonic() - t0) * 1000
left = [p for p in sleepers if alive(p)]
print(f"{took:.3f} {len(left)}")
# Counted; now end the orphans so they do not pile up over the run.
for p in left:
    try:
        os.kill(p, signal.SIGKILL)
    except OSError:
        pass
"#;

/// One libnbd way of closing.
#[derive(Debug, Clone, Copy)]
struct Variant {
    arg: &'static str,
    name: &'static str,
    slow: bool,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        arg: "close",
        name: "libnbd connect_command + del h (nbd_close)",
        slow: true,
    },
    Variant {
        arg: "term",
        name: "libnbd kill_subprocess(SIGTERM) + del h",
        slow: true,
    },
    Variant {
        arg: "kill",
        name: "libnbd kill_subprocess(SIGKILL) + del h",
        slow: false,
    },
];

#[derive(Debug, Default)]
struct Samples {
    close_ms: Vec<f64>,
    survivors: usize,
}

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(20);
    let python = check_peers()?;
    let ladder: Ladder = LADDER.parse()?;
    ours_once(&ladder)?; // warm-up
    libnbd_once(&python, "kill")?;
    let slow_reps = SLOW_REPS.min(reps);
    let slots = spread(slow_reps, reps);
    let mut ours = Samples::default();
    let mut theirs: Vec<Samples> = VARIANTS.iter().map(|_| Samples::default()).collect();
    for rep in 0..reps {
        for (variant, samples) in VARIANTS.iter().zip(theirs.iter_mut()) {
            if variant.slow && !slots.contains(&rep) {
                continue;
            }
            if variant.slow {
                eprintln!(
                    "libnbd: {} rep {}/{slow_reps} (≈10 s)…",
                    variant.arg,
                    samples.close_ms.len() + 1
                );
            }
            let (took, left) = libnbd_once(&python, variant.arg)?;
            samples.close_ms.push(took);
            samples.survivors += left;
        }
        let (took, left) = ours_once(&ladder)?;
        ours.close_ms.push(took);
        ours.survivors += left;
    }
    let mut rows = Vec::new();
    for (variant, samples) in VARIANTS.iter().zip(&theirs) {
        let n = samples.close_ms.len();
        rows.push(Row {
            scenario: "libnbd",
            metric: "close_ms",
            ours: median(&ours.close_ms),
            baseline: median(&samples.close_ms),
            baseline_name: format!("{} ({n} reps; ours {reps}, {LADDER} + group)", variant.name),
            unit: "ms",
        });
    }
    for (variant, samples) in VARIANTS.iter().zip(&theirs) {
        let n = samples.close_ms.len();
        rows.push(Row {
            scenario: "libnbd",
            metric: "surviving_grandchildren",
            ours: ours.survivors as f64,
            baseline: samples.survivors as f64,
            baseline_name: format!("{} (sum over {n} reps; ours over {reps})", variant.name),
            unit: "processes",
        });
    }
    Ok(rows)
}

/// nbdkit and python3 with the `nbd` module must be installed; returns the python to run.
fn check_peers() -> Result<String> {
    // python3-libnbd installs into the system python, which a pyenv/venv python3 on PATH lacks.
    let python = if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3".to_string()
    } else {
        "python3".to_string()
    };
    let has_nbd = Command::new(&python)
        .args(["-c", "import nbd"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let has_nbdkit = Command::new("nbdkit")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_nbd || !has_nbdkit {
        return Err(format!(
            "the libnbd scenario needs nbdkit and python3-libnbd: install with `{INSTALL}`"
        )
        .into());
    }
    Ok(python)
}

/// Ours: spawn, handshake, one read in flight, time `close()`. Returns (ms, surviving sleeps).
fn ours_once(ladder: &Ladder) -> Result<(f64, usize)> {
    let mut cmd = Command::new(SERVER[0]);
    cmd.args(&SERVER[1..]).stderr(Stdio::null());
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .ladder(ladder.clone())
        .process_group(true)
        .spawn()?;
    let pid = handle.id().ok_or("no pid")?;
    let socket = handle.socket().ok_or("the handle has no socket")?;
    socket.set_read_timeout(Some(START_TIMEOUT))?;
    handshake(socket)?;
    send_read(socket)?;
    let sleepers = wait_for_sleepers(pid)?;
    let start = Instant::now();
    let report = handle.close()?;
    let took = start.elapsed();
    if !matches!(report.ended_by, Ending::Rung { .. }) {
        return Err(format!("libnbd: expected a rung to end nbdkit: {report}").into());
    }
    let left = sleepers.iter().filter(|p| is_alive(**p)).count();
    Ok((ms(took), left))
}

/// libnbd, in python3-libnbd: returns (ms, surviving sleeps) as the script measured them.
fn libnbd_once(python: &str, variant: &str) -> Result<(f64, usize)> {
    let out = Command::new(python)
        .args(["-c", LIBNBD_SCRIPT, variant])
        .args(SERVER)
        .stderr(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut fields = text.split_whitespace();
    let parsed = (
        fields.next().and_then(|t| t.parse::<f64>().ok()),
        fields.next().and_then(|n| n.parse::<usize>().ok()),
    );
    match parsed {
        (Some(took), Some(left)) if out.status.success() => Ok((took, left)),
        _ => Err(format!("libnbd {variant}: python3 said {text:?} ({})", out.status).into()),
    }
}

/// Fixed newstyle handshake with `NBD_OPT_EXPORT_NAME ""` (enough for nbdkit; the full client
/// with `NBD_OPT_GO` lives in the tests crate).
fn handshake(mut s: &UnixStream) -> Result<()> {
    let mut greeting = [0u8; 18];
    s.read_exact(&mut greeting)?;
    if &greeting[..16] != b"NBDMAGICIHAVEOPT" {
        return Err(format!("not a newstyle NBD server: {greeting:?}").into());
    }
    let flags = u16::from_be_bytes([greeting[16], greeting[17]]);
    if flags & 3 != 3 {
        return Err(format!("server lacks FIXED_NEWSTYLE|NO_ZEROES ({flags:#x})").into());
    }
    s.write_all(&3u32.to_be_bytes())?; // FIXED_NEWSTYLE | NO_ZEROES
    let mut option = Vec::new();
    option.extend_from_slice(b"IHAVEOPT");
    option.extend_from_slice(&1u32.to_be_bytes()); // NBD_OPT_EXPORT_NAME
    option.extend_from_slice(&0u32.to_be_bytes()); // name length 0
    s.write_all(&option)?;
    let mut export = [0u8; 10]; // size u64, transmission flags u16
    s.read_exact(&mut export)?;
    Ok(())
}

/// `NBD_CMD_READ` of 512 bytes at 0, not waited for.
fn send_read(mut s: &UnixStream) -> Result<()> {
    let mut request = Vec::with_capacity(28);
    request.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    request.extend_from_slice(&0u16.to_be_bytes()); // flags
    request.extend_from_slice(&0u16.to_be_bytes()); // NBD_CMD_READ
    request.extend_from_slice(&1u64.to_be_bytes()); // cookie
    request.extend_from_slice(&0u64.to_be_bytes()); // offset
    request.extend_from_slice(&512u32.to_be_bytes());
    s.write_all(&request)?;
    Ok(())
}

/// `sleep` processes in process group `pgrp`, once at least one runs.
fn wait_for_sleepers(pgrp: u32) -> Result<Vec<u32>> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let found = sleepers_in_group(pgrp);
        if !found.is_empty() {
            return Ok(found);
        }
        if Instant::now() >= deadline {
            return Err("libnbd: the pread's sleep never started".into());
        }
        thread::sleep(Duration::from_millis(1));
    }
}

fn sleepers_in_group(pgrp: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| stat(*pid).is_some_and(|(comm, _, group)| comm == "sleep" && group == pgrp))
        .collect()
}

/// `(comm, state, pgrp)` from `/proc/PID/stat`.
fn stat(pid: u32) -> Option<(String, char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (open, close) = (text.find('(')?, text.rfind(')')?);
    let mut rest = text[close + 2..].split(' ');
    let state = rest.next()?.chars().next()?;
    let pgrp = rest.nth(1)?.parse().ok()?;
    Some((text[open + 1..close].to_string(), state, pgrp))
}

fn is_alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(_, state, _)| state != 'Z' && state != 'X')
}
