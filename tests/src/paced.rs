//! A child that writes its stdout in parts, each only once the part before it has been *read*:
//! so a line written in two parts reaches the capture thread in two reads, every time, without
//! a sleep that merely makes it likely.
//!
//! The handshake, per part but the last: the child writes the part, then creates
//! `dir/wrote<i>`, holding its pid, and waits for `dir/go<i>`. [`Paced::pace`] waits for
//! `wrote<i>`, opens the child's stdout pipe through `/proc/<pid>/fd/1` (a write end of the
//! same pipe) and waits until `FIONREAD` on it says the pipe holds nothing: the only reader,
//! the capture thread, has read every byte of the part. Then it creates `go<i>`.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{eventually, scratch, sh};

/// Waits of the handshake: generous, a loaded machine must not fail it.
const WAIT: Duration = Duration::from_secs(60);

#[derive(Debug)]
pub struct Paced {
    dir: PathBuf,
    parts: usize,
}

impl Paced {
    /// `parts`: shell commands, each writing one part to stdout; `then`: what the child does
    /// after the last (e.g. `exec sleep 600` to stay alive, `exit 0`).
    pub fn new(name: &str, parts: &[&str], then: &str) -> (Paced, Command) {
        let dir = scratch(name);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let d = dir.display();
        let mut script = String::new();
        for (i, part) in parts.iter().enumerate() {
            script.push_str(part);
            script.push('\n');
            if i + 1 < parts.len() {
                script.push_str(&format!(
                    "echo $$ > {d}/wrote{i}.tmp && mv {d}/wrote{i}.tmp {d}/wrote{i}\n\
                     while [ ! -e {d}/go{i} ]; do sleep 0.01; done\n"
                ));
            }
        }
        // The handshake is over: the child cleans up (the pacing thread may be gone already).
        script.push_str(&format!("rm -rf {d}\n"));
        script.push_str(then);
        let paced = Paced {
            dir,
            parts: parts.len(),
        };
        (paced, sh(&script))
    }

    /// Runs the handshake on a thread of its own (start it before `spawn()`, which may wait
    /// for readiness); join it to see it succeeded. It panics, saying which step, if the child
    /// never wrote a part or the pipe was never read empty.
    pub fn pace(self) -> JoinHandle<()> {
        std::thread::spawn(move || {
            for i in 0..self.parts - 1 {
                let wrote = self.dir.join(format!("wrote{i}"));
                assert!(
                    eventually(WAIT, || wrote.exists()),
                    "the child never wrote part {i} ({} is missing)",
                    wrote.display()
                );
                let pid = std::fs::read_to_string(&wrote).expect("wrote file");
                let stdout = format!("/proc/{}/fd/1", pid.trim());
                // Write-only and non-blocking: opening it neither waits nor reads a byte.
                let pipe = OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&stdout)
                    .unwrap_or_else(|e| panic!("opening {stdout}: {e}"));
                assert!(
                    eventually(WAIT, || rustix::io::ioctl_fionread(&pipe)
                        .expect("FIONREAD on the child's stdout")
                        == 0),
                    "part {i} was not read within {WAIT:?}"
                );
                drop(pipe);
                std::fs::write(self.dir.join(format!("go{i}")), b"").expect("go file");
            }
        })
    }
}
