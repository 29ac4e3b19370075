//! `restart`: a crashed server started again, ours (`Supervisor`, `RestartPolicy::Always`,
//! no delay) against supervisord (PyPI `supervisor` 4.2.5 from the peers venv that
//! `tests/run.sh` makes, `autorestart=true`, `startsecs=0`) and a naive shell loop
//! (`while :; do SERVER; done`), the same server for all three: `sh -c 'echo $$ >> STARTS; exec
//! sleep 1000'`. Each repetition SIGKILLs the running server (its pid, the last line of STARTS)
//! and times until a new pid line appears — crash to started again — polled every 50 µs, the
//! same for all three. Then, with the server up, the supervisor's own CPU over three idle seconds
//! (ours: this whole process; supervisord: its process; the shell loop: its `sh`).
//! Repetitions interleave the three.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Restart, RestartPolicy, Supervisor};

use super::Settings;
use crate::fixture::ms;
use crate::row::Row;
use crate::stats::median;
use crate::Result;

const INSTALL: &str = "restart: needs supervisord in the peers venv (tests/requirements.txt: \
                       supervisor==4.2.5; run `bash tests/run.sh` once)";

/// The server: its pid appended to `starts`, then it waits.
fn server_script(starts: &Path) -> String {
    format!("echo $$ >> \"{}\"; exec sleep 1000", starts.display())
}

fn supervisord() -> Result<PathBuf> {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tests.join("../target"));
    let path = target.join("peers-venv/bin/supervisord");
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("{}: not found. {INSTALL}", path.display()).into())
    }
}

fn pids(starts: &Path) -> Vec<u32> {
    std::fs::read_to_string(starts)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Waits until `starts` has more than `n` pids; the last one.
fn wait_started(starts: &Path, n: usize, within: Duration) -> Result<u32> {
    let began = Instant::now();
    loop {
        let now = pids(starts);
        if now.len() > n {
            return Ok(*now.last().expect("more than n"));
        }
        if began.elapsed() > within {
            return Err(
                format!("restart: no start within {within:?} ({})", starts.display()).into(),
            );
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// SIGKILLs the running server; the time until a new one has started, in ms.
fn crash_to_started(starts: &Path) -> Result<f64> {
    let before = pids(starts);
    let pid = *before.last().ok_or("restart: nothing started")?;
    let target = rustix::process::Pid::from_raw(pid as i32).ok_or("restart: pid 0")?;
    let began = Instant::now();
    rustix::process::kill_process(target, rustix::process::Signal::KILL)?;
    wait_started(starts, before.len(), Duration::from_secs(30))?;
    Ok(ms(began.elapsed()))
}

/// utime + stime of `pid` (all its threads), in ms.
fn cpu_ms(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').ok_or("restart: odd stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command: state is field 3, utime 14, stime 15 (1-based) → indexes 11, 12.
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    let hz = rustix::param::clock_ticks_per_second() as f64;
    Ok(ticks * 1000.0 / hz)
}

/// The idle window: long enough for clock ticks (10 ms) to count.
const IDLE: Duration = Duration::from_secs(3);

/// The CPU `pid` used over the idle window, in ms per second.
fn idle_cpu(pid: u32) -> Result<f64> {
    let before = cpu_ms(pid)?;
    std::thread::sleep(IDLE);
    Ok((cpu_ms(pid)? - before) / IDLE.as_secs_f64())
}

struct Side {
    starts: PathBuf,
    /// The supervisor process (supervisord, the shell loop); `None` for ours.
    process: Option<Child>,
    ours: Option<Supervisor>,
}

impl Side {
    fn ours(dir: &Path) -> Result<Side> {
        let starts = dir.join("ours.starts");
        let script = server_script(&starts);
        let restart = Restart::new(RestartPolicy::Always)
            .delay(Duration::ZERO, Duration::ZERO)
            .limit(u32::MAX, Duration::from_secs(1));
        let make = move || {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &script]);
            ChildHandle::builder(cmd)
        };
        let sup = Supervisor::start(make, restart)?;
        wait_started(&starts, 0, Duration::from_secs(30))?;
        Ok(Side {
            starts,
            process: None,
            ours: Some(sup),
        })
    }

    fn supervisord(dir: &Path, bin: &Path) -> Result<Side> {
        let starts = dir.join("supervisord.starts");
        let conf = dir.join("supervisord.conf");
        let mut f = std::fs::File::create(&conf)?;
        writeln!(
            f,
            "[supervisord]\nnodaemon=true\nlogfile={d}/supervisord.log\npidfile={d}/supervisord.pid\n\
             [program:server]\ncommand=sh -c '{s}'\nstartsecs=0\nautorestart=true\n\
             startretries=1000000\nstopsignal=KILL\nstdout_logfile=NONE\nstderr_logfile=NONE",
            d = dir.display(),
            s = server_script(&starts),
        )?;
        let child = Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        wait_started(&starts, 0, Duration::from_secs(30))?;
        Ok(Side {
            starts,
            process: Some(child),
            ours: None,
        })
    }

    fn shell_loop(dir: &Path) -> Result<Side> {
        let starts = dir.join("loop.starts");
        // Single quotes: `$$` is the server's pid, not the loop's.
        let script = format!("while :; do sh -c '{}'; done", server_script(&starts));
        let child = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        wait_started(&starts, 0, Duration::from_secs(30))?;
        Ok(Side {
            starts,
            process: Some(child),
            ours: None,
        })
    }

    fn supervisor_pid(&self) -> u32 {
        self.process.as_ref().map_or(std::process::id(), Child::id)
    }

    /// Ends the supervisor and its server.
    fn end(mut self) -> Result<()> {
        self.stop()
    }

    fn stop(&mut self) -> Result<()> {
        if let Some(sup) = self.ours.take() {
            drop(sup.close()?);
        }
        if let Some(mut child) = self.process.take() {
            // supervisord stops its program on TERM; the shell loop's server is killed here.
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(child.id() as i32).ok_or("pid 0")?,
                rustix::process::Signal::TERM,
            );
            child.wait()?;
            if let Some(&pid) = pids(&self.starts).last() {
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
        Ok(())
    }
}

impl Drop for Side {
    /// Also on an error half-way: nothing is left running.
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

pub fn run(settings: &Settings) -> Result<Vec<Row>> {
    let reps = settings.reps_or(10);
    let bin = supervisord()?;
    let dir = std::env::temp_dir().join(format!("childguard-bench-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let sides = [
        Side::ours(&dir)?,
        Side::supervisord(&dir, &bin)?,
        Side::shell_loop(&dir)?,
    ];
    let measured = measure(&sides, reps);
    let cpu: Result<Vec<f64>> = sides.iter().map(|s| idle_cpu(s.supervisor_pid())).collect();
    for side in sides {
        side.end()?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let times = measured?;
    let cpu = cpu?;
    let row =
        |metric: &'static str, ours: f64, baseline: f64, name: &str, unit: &'static str| Row {
            scenario: "restart",
            metric,
            ours,
            baseline,
            baseline_name: name.into(),
            unit,
        };
    let supervisord = "supervisord 4.2.5 (autorestart=true, startsecs=0)";
    let naive = "a naive shell loop: while :; do SERVER; done";
    Ok(vec![
        row(
            "restart_crash_to_started_ms",
            median(&times[0]),
            median(&times[1]),
            &format!("{supervisord}, median of {reps}"),
            "ms",
        ),
        row(
            "restart_crash_to_started_ms",
            median(&times[0]),
            median(&times[2]),
            &format!("{naive}, median of {reps}"),
            "ms",
        ),
        row(
            "restart_idle_cpu_ms_per_s",
            cpu[0],
            cpu[1],
            &format!("{supervisord}: its process over 3 idle seconds (ours: this whole process, the bench included)"),
            "ms/s",
        ),
    ])
}

/// `reps` crashes of each side, interleaved; the times per side.
fn measure(sides: &[Side; 3], reps: usize) -> Result<Vec<Vec<f64>>> {
    let mut times: Vec<Vec<f64>> = (0..3).map(|_| Vec::with_capacity(reps)).collect();
    for rep in 0..reps {
        for k in 0..3 {
            let i = (rep + k) % 3;
            times[i].push(crash_to_started(&sides[i].starts)?);
        }
    }
    Ok(times)
}
