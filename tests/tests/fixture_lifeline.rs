//! The slowserver fixture's `--lifeline`: its busy workers (`--workers N --setsid`, each in a
//! session of its own, so no group kill reaches them) exit once the process that started the
//! server has exited — so a benchmark killed in the middle of its `contain` scenario leaves no
//! worker burning CPU under the runs that follow. Without `--lifeline` they outlive it, as the
//! `contain` scenario's baseline needs.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::Duration;

use childguard_tests::{bin, eventually, is_alive, sh, sigkill};

/// A `sh` that starts a server with `flags` in the background and waits for it: the server's
/// parent, which the test kills.
struct Started {
    starter: Child,
    server: u32,
    workers: Vec<u32>,
}

impl Started {
    fn new(flags: &str) -> Started {
        let script = format!(
            "'{}' --workers 2 --setsid --ignore-eof {flags} < /dev/null & wait",
            bin("cg-slowserver").display()
        );
        let mut starter = sh(&script)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let mut line = String::new();
        let read = BufReader::new(starter.stdout.take().expect("piped")).read_line(&mut line);
        let mut started = Started {
            starter,
            server: 0,
            workers: Vec::new(),
        };
        assert!(read.is_ok_and(|n| n > 0), "no READY line from the server");
        for field in line.split_whitespace() {
            if let Some(pid) = field.strip_prefix("pid=") {
                started.server = pid.parse().expect("READY pid=");
            }
            if let Some(list) = field.strip_prefix("workers=") {
                started.workers = list.split(',').map(|p| p.parse().expect("pid")).collect();
            }
        }
        assert!(started.server > 0, "READY names no server pid: {line:?}");
        assert_eq!(
            started.workers.len(),
            2,
            "READY names two workers: {line:?}"
        );
        started
    }

    /// Kills the server's parent (and reaps it): the lifeline is gone.
    fn kill_starter(&mut self) {
        self.starter.kill().expect("kill sh");
        self.starter.wait().expect("reap sh");
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.starter.kill();
        let _ = self.starter.wait();
        for &pid in self.workers.iter().chain([&self.server]) {
            if is_alive(pid) {
                sigkill(pid);
            }
        }
    }
}

#[test]
fn busy_workers_exit_once_the_servers_starter_has_exited() {
    let mut with = Started::new("--lifeline");
    let mut without = Started::new("");
    for &pid in with.workers.iter().chain(&without.workers) {
        assert!(
            is_alive(pid),
            "worker {pid} is running while its starter lives"
        );
    }

    with.kill_starter();
    without.kill_starter();
    // A worker looks at its lifeline every 10 ms; the bound is generous for a loaded machine.
    assert!(
        eventually(Duration::from_secs(20), || !with
            .workers
            .iter()
            .any(|&p| is_alive(p))),
        "--lifeline workers {:?} still run after their server's starter exited",
        with.workers
    );
    // The server itself does not watch the lifeline (it ignores EOF and runs on).
    assert!(is_alive(with.server), "the --lifeline server exited too");
    for &pid in &without.workers {
        assert!(
            is_alive(pid),
            "worker {pid} without --lifeline exited with its server's starter"
        );
    }
}
