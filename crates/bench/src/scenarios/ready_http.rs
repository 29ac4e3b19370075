//! `ready_http`: how soon `spawn()` returns after an HTTP server became ready
//! (`Ready::http`), against the usual harness loop: `curl` run every 10 ms until it gets a 200.
//!
//! The fixture is a small Python HTTP server on a Unix socket ([`SERVER`]): it sleeps `D`
//! (40–59 ms, varied per repetition so a loop's phase against the readiness is not fixed),
//! writes the `CLOCK_MONOTONIC` instant, then binds, listens and answers every `GET` with 200.
//! The figure is the *detection delay*: from that instant to the moment the waiter knows —
//! `spawn()` returning for ours, `curl` exiting with a 200 for the baseline. Repetitions
//! interleave the two waiters. Needs `python3` and `curl`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ladder, Ready};

use super::Settings;
use crate::row::Row;
use crate::stats::median;
use crate::Result;

const INSTALL: &str = "apt-get install -y python3 curl";

/// The fixture: `python3 -c SERVER SOCKET STAMP_FILE DELAY_S`.
const SERVER: &str = r#"
import socket, sys, time
path, stamp, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
time.sleep(delay)
with open(stamp, "w") as f:
    f.write(str(time.clock_gettime_ns(time.CLOCK_MONOTONIC)))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(64)
while True:
    c, _ = s.accept()
    req = b""
    while b"\r\n\r\n" not in req:
        chunk = c.recv(4096)
        if not chunk:
            break
        req += chunk
    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
    c.close()
"#;

/// `CLOCK_MONOTONIC` now, in ms (the clock the fixture stamps with; `Instant` uses it too).
fn monotonic_ms() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as f64 * 1000.0 + t.tv_nsec as f64 / 1e6
}

fn stamp_ms(path: &Path) -> Result<f64> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("ready_http: no stamp in {} ({e})", path.display()))?;
    Ok(text.trim().parse::<f64>()? / 1e6)
}

fn check_peers() -> Result<()> {
    for (tool, arg) in [("python3", "--version"), ("curl", "--version")] {
        let found = Command::new(tool)
            .arg(arg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Err(
                format!("the ready_http scenario needs {tool}: install with `{INSTALL}`").into(),
            );
        }
    }
    Ok(())
}

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    check_peers()?;
    let reps = settings.reps_or(20);
    let dir = std::env::temp_dir().join(format!(
        "childguard-bench-ready-http-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    let mut delays: [Vec<f64>; 2] = [Vec::with_capacity(reps), Vec::with_capacity(reps)];
    let result = (|| -> Result<()> {
        for rep in 0..reps + 1 {
            for k in 0..2 {
                // Rotate who goes first; rep 0 is a warm-up.
                let which = (k + rep) % 2;
                let after = Duration::from_millis(40 + (rep as u64 * 7) % 20);
                let delay = once(which == 0, &dir, after)?;
                if rep > 0 {
                    delays[which].push(delay);
                }
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    Ok(vec![Row {
        scenario: "ready_http",
        metric: "http_delay_ms",
        ours: median(&delays[0]),
        baseline: median(&delays[1]),
        baseline_name: "curl run every 10 ms until 200".into(),
        unit: "ms",
    }])
}

/// One start of the fixture, waited for by ours (`Ready::http`) or the curl loop: the
/// detection delay in ms.
fn once(ours: bool, dir: &Path, after: Duration) -> Result<f64> {
    let socket = dir.join("s.sock");
    let stamp = dir.join("stamp");
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&stamp);
    let socket_text = socket.to_str().ok_or("non-UTF-8 temp dir")?;
    let mut cmd = Command::new("python3");
    cmd.args(["-c", SERVER, socket_text])
        .arg(&stamp)
        .arg(format!("{:.3}", after.as_secs_f64()))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let known_at = if ours {
        let url = format!("http+unix://{}/", socket_text.replace('/', "%2F"));
        let handle = ChildHandle::builder(cmd)
            .ready(Ready::http(&url)?)
            .ladder("KILL:1s".parse::<Ladder>()?)
            .spawn()?;
        let known_at = monotonic_ms();
        let report = handle.close()?;
        if report.status.is_none() {
            return Err(format!("ready_http: the fixture was not reaped: {report}").into());
        }
        known_at
    } else {
        curl_loop(cmd, socket_text)?
    };
    Ok(known_at - stamp_ms(&stamp)?)
}

/// The usual harness: spawn, then `curl` every 10 ms until it gets a 200.
fn curl_loop(mut cmd: Command, socket: &str) -> Result<f64> {
    let mut child = cmd.spawn()?;
    let give_up = Instant::now() + Duration::from_secs(30);
    let known_at = loop {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--unix-socket",
            ])
            .arg(socket)
            .arg("http://localhost/")
            .stdin(Stdio::null())
            .output()?;
        if out.stdout == b"200" {
            break Ok(monotonic_ms());
        }
        if Instant::now() >= give_up {
            break Err("ready_http: the fixture never answered curl");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let _ = child.kill();
    let _ = child.wait();
    Ok(known_at?)
}
