//! One init as PID 1 of a new PID namespace (`unshare --pid --fork --mount-proc`), and what the
//! `init` scenario reads of it from outside: its host pid, its descendants (everything in the
//! namespace), whether they are alive.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Result;

/// An init under test.
#[derive(Debug, Clone)]
pub struct Init {
    /// Its name in the rows.
    pub name: &'static str,
    /// Its argv before CMD (ending with `--`).
    pub argv: Vec<String>,
}

impl Init {
    /// Ours: the `childguard` binary users run, with `extra` options: the one named by
    /// `CHILDGUARD_BENCH_CLI` (`just bench` sets it to the static build
    /// `crates/childguard-cli/install.sh` makes), else the one in the same `target` directory
    /// as this bench (`cargo build --release -p childguard-cli -p childguard-bench`). Not this
    /// bench binary posing as it: the bench carries every scenario's code and peers (twice
    /// the size, more relocations), which would be timed as `init`'s start-up.
    pub fn ours(extra: &[&str]) -> Result<Init> {
        let exe = match std::env::var_os("CHILDGUARD_BENCH_CLI") {
            Some(path) => std::path::PathBuf::from(path),
            None => std::env::current_exe()?.with_file_name("childguard"),
        };
        if !exe.is_file() {
            return Err(format!(
                "init: {} not found: build it beside the bench (cargo build --release -p childguard-cli -p childguard-bench), or run just bench",
                exe.display()
            )
            .into());
        }
        let mut argv = vec![exe.to_string_lossy().into_owned(), "init".to_string()];
        argv.extend(extra.iter().map(|s| s.to_string()));
        argv.push("--".into());
        Ok(Init {
            name: "childguard init",
            argv,
        })
    }

    /// How the init's binary is linked, for the rows' notes: `static` when its ELF asks for
    /// no program interpreter (`PT_INTERP`), `dynamic` when it does.
    pub fn linking(&self) -> &'static str {
        match std::fs::read(&self.argv[0]).map(|elf| asks_for_interpreter(&elf)) {
            Ok(Some(true)) => "dynamic",
            Ok(Some(false)) => "static",
            _ => "linking unknown",
        }
    }

    /// A peer found on PATH (`tini`, `dumb-init`, `catatonit`), or the error row's text.
    pub fn peer(name: &'static str) -> std::result::Result<Init, String> {
        let found = ["/usr/bin", "/usr/sbin", "/usr/local/bin", "/bin", "/sbin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(name))
            .find(|p| p.exists());
        match found {
            Some(path) => Ok(Init {
                name,
                argv: vec![path.to_string_lossy().into_owned(), "--".into()],
            }),
            None => Err(format!("{name}: not installed (apt-get install -y {name})")),
        }
    }

    /// `unshare … INIT -- sh -c SCRIPT`, stdio to /dev/null.
    pub fn spawn_pid1(&self, script: &str) -> Result<Running> {
        let unshare = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
            .args(&self.argv)
            .args(["sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("unshare: {e} (install util-linux; needs root)"))?;
        let mut init = None;
        let start = Instant::now();
        while init.is_none() {
            init = children_of(unshare.id()).first().copied();
            if start.elapsed() > Duration::from_secs(30) {
                return Err("unshare never started the init".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(Running {
            unshare,
            init: init.unwrap_or(0),
        })
    }
}

/// An init running as PID 1.
#[derive(Debug)]
pub struct Running {
    unshare: Child,
    /// The init's pid here.
    pub init: u32,
}

impl Running {
    /// Waits until `n` of the init's descendants are named `comm` (bounded: 60 s).
    pub fn await_named(&self, comm: &str, n: usize) -> Result<()> {
        let start = Instant::now();
        while named(self.init, comm) < n {
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!("never {n} {comm} under the init").into());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }

    /// Sends `signo` to the init.
    pub fn signal(&self, signo: i32) {
        let _ = kill(self.init, signo);
    }

    /// Whether `unshare` (and so the init) has exited, reaping it if so.
    pub fn exited(&mut self) -> bool {
        matches!(self.unshare.try_wait(), Ok(Some(_)))
    }

    /// The engine's `SIGKILL` to the init (the kernel then kills the namespace), and the wait.
    pub fn kill_and_wait(mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.unshare.wait();
    }
}

/// `kill(2)` through rustix.
pub fn kill(pid: u32, signo: i32) -> rustix::io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid as i32).ok_or(rustix::io::Errno::INVAL)?;
    let signal = rustix::process::Signal::from_named_raw(signo).ok_or(rustix::io::Errno::INVAL)?;
    rustix::process::kill_process(pid, signal)
}

pub use childguard_cli::procs::{children_of, descendants_of};

/// `(comm, state)` of `pid`.
fn stat(pid: u32) -> Option<(String, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let comm = text.get(text.find('(')? + 1..text.rfind(')')?)?.to_string();
    let state = text.get(text.rfind(')')? + 2..)?.chars().next()?;
    Some((comm, state))
}

/// Descendants of `pid` alive (not zombies).
pub fn alive_descendants(pid: u32) -> usize {
    descendants_of(pid)
        .into_iter()
        .filter(|&d| stat(d).is_some_and(|(_, s)| s != 'Z'))
        .count()
}

/// Descendants of `pid` named `comm`, alive.
fn named(pid: u32, comm: &str) -> usize {
    descendants_of(pid)
        .into_iter()
        .filter(|&d| stat(d).is_some_and(|(c, s)| c == comm && s != 'Z'))
        .count()
}

/// Whether a 64-bit little-endian ELF file has a `PT_INTERP` program header (`elf(5)`); `None`
/// when it is not one.
fn asks_for_interpreter(elf: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    let word = |at: usize, n: usize| -> Option<u64> {
        let bytes = elf.get(at..at.checked_add(n)?)?;
        Some(bytes.iter().rev().fold(0, |v, &b| (v << 8) | u64::from(b)))
    };
    // e_ident: magic, ELFCLASS64, ELFDATA2LSB.
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let phoff = usize::try_from(word(0x20, 8)?).ok()?;
    let phentsize = usize::try_from(word(0x36, 2)?).ok()?;
    let phnum = usize::try_from(word(0x38, 2)?).ok()?;
    (0..phnum)
        .map(|i| word(phoff.checked_add(i.checked_mul(phentsize)?)?, 4))
        .try_fold(false, |found, kind| {
            Some(found || kind? == u64::from(PT_INTERP))
        })
}

#[cfg(test)]
mod tests {
    use super::asks_for_interpreter;

    #[test]
    fn a_dynamic_executable_asks_for_its_interpreter_and_text_is_no_elf() {
        // This test binary is linked as cargo links it on Linux: dynamically.
        let me = std::fs::read("/proc/self/exe").expect("reading /proc/self/exe");
        assert_eq!(asks_for_interpreter(&me), Some(true));
        assert_eq!(asks_for_interpreter(b"#!/bin/sh\n"), None);
        // A header whose program headers lie past the end: not an answer, no panic.
        let mut cut = me[..0x40].to_vec();
        cut[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(asks_for_interpreter(&cut), None);
    }
}
