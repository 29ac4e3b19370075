//! The attacker process (`cg-attacker`, run as the attacker user) and what its lines say it
//! did: [`Attacker`], its positive control on a decoy, and [`Did`].

use std::io::BufRead;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::attack::Lab;

/// The decoy's name ([`Attacker::must_take_decoy`]).
const DECOY: &str = "childguard-dec0dec0dec0";

/// What the attacker did to root's directories (not the decoy; with `ours`, only to those).
#[derive(Debug, Default)]
pub struct Did {
    /// Directories it acted on.
    pub dirs: usize,
    /// Of those, the ones it tried while it could pass into them (its own, or `o+x`: 0711)
    /// and met no `ENOENT` — for `swap-sock`, the socket was there and the swap was refused
    /// or done.
    pub reached: usize,
    /// Its successful swaps or steals.
    pub won: usize,
    /// Datagrams its stolen sockets received.
    pub datagrams: usize,
    pub overflows: usize,
    /// What the directories were (`UID:MODE`) when it acted, each once.
    pub seen_as: Vec<String>,
}

impl Did {
    /// From the attacker's lines; `uid` is the attacker's.
    pub fn of(lines: &[String], ours: Option<&[PathBuf]>, uid: u32) -> Did {
        let mine = |path: &Path| {
            path.file_name().is_some_and(|n| n != DECOY)
                && ours.is_none_or(|ours| ours.iter().any(|o| o == path))
        };
        let acts: Vec<Act> = lines
            .iter()
            .filter_map(|l| parse_act(l))
            .filter(|a| mine(&a.path))
            .collect();
        let distinct = |keep: &dyn Fn(&Act) -> bool| {
            let mut paths: Vec<&PathBuf> =
                acts.iter().filter(|a| keep(a)).map(|a| &a.path).collect();
            paths.sort();
            paths.dedup();
            paths.len()
        };
        Did {
            dirs: distinct(&|_| true),
            reached: distinct(&|a| a.result != "ENOENT" && passable(&a.dir, uid)),
            won: acts.iter().filter(|a| a.result == "ok").count(),
            datagrams: lines
                .iter()
                .filter_map(|l| l.strip_prefix("datagram "))
                .filter(|rest| {
                    rest.split(' ')
                        .next()
                        .and_then(|sock| Path::new(sock).parent())
                        .is_some_and(mine)
                })
                .count(),
            overflows: lines.iter().filter(|l| *l == "overflow").count(),
            seen_as: {
                let mut seen: Vec<String> = acts.iter().map(|a| a.dir.clone()).collect();
                seen.sort();
                seen.dedup();
                seen
            },
        }
    }
}

impl std::fmt::Display for Did {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "acted on {} of root's directories, reached {} (passable, not ENOENT), {} \
             swap(s)/steal(s) \
             succeeded, {} datagram(s) of root's server received",
            self.dirs, self.reached, self.won, self.datagrams
        )?;
        if !self.seen_as.is_empty() {
            write!(f, ", seen as (uid:mode) {:?}", self.seen_as)?;
        }
        if self.overflows > 0 {
            write!(f, ", {} inotify overflow(s)", self.overflows)?;
        }
        Ok(())
    }
}

/// Whether a `dir=UID:MODE` the attacker saw let it in: its own, or searchable by others.
fn passable(dir: &str, uid: u32) -> bool {
    let Some((owner, mode)) = dir.split_once(':') else {
        return false;
    };
    let mode = u32::from_str_radix(mode, 8).unwrap_or(0);
    owner.parse() == Ok(uid) || mode & 0o001 != 0
}

/// One line `act EVENT PATH result=R dir=D` of the attacker.
#[derive(Debug, Clone)]
pub struct Act {
    pub path: PathBuf,
    pub result: String,
    pub dir: String,
}

fn parse_act(line: &str) -> Option<Act> {
    let mut words = line.split(' ');
    (words.next()? == "act").then_some(())?;
    words.next()?; // the event
    Some(Act {
        path: PathBuf::from(words.next()?),
        result: words.next()?.strip_prefix("result=")?.to_string(),
        dir: words.next()?.strip_prefix("dir=")?.to_string(),
    })
}

/// `cg-attacker` (tests/src/bin/cg-attacker.rs), run as the attacker user, its stdout read line
/// by line. Killed on drop.
#[derive(Debug)]
pub struct Attacker {
    child: Child,
    lines: Receiver<String>,
    pub seen: Vec<String>,
}

impl Attacker {
    /// Started with `args`; returns once it is `armed` (every watch in place).
    pub fn start(lab: &Lab, args: &[&str]) -> Attacker {
        let mut child = Command::new(lab.program("cg-attacker"))
            .args(args)
            .uid(lab.user.uid)
            .gid(lab.user.gid)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting cg-attacker");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut attacker = Attacker {
            child,
            lines,
            seen: Vec::new(),
        };
        assert!(
            attacker.wait_for(Duration::from_secs(30), |l| l == "armed"),
            "cg-attacker {args:?} did not arm (its stderr is above): {:?}",
            attacker.seen
        );
        attacker
    }

    /// Reads its lines until one satisfies `want`, for up to `limit`.
    pub fn wait_for(&mut self, limit: Duration, mut want: impl FnMut(&str) -> bool) -> bool {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = want(&line);
                    self.seen.push(line);
                    if hit {
                        return true;
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    /// The positive control: root makes a `childguard-…` directory under `base` as the old
    /// code did (mode 0700, then a `chmod`, through an fd: nothing of root's follows the
    /// attacker's swap) and the attacker must succeed on it within 10 s — it watches `base`
    /// and wins against that. The decoy is removed after.
    pub fn must_take_decoy(&mut self, base: &Path) {
        let decoy = base.join(DECOY);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&decoy)
            .unwrap_or_else(|e| panic!("decoy {}: {e}", decoy.display()));
        if let Ok(fd) = rustix::fs::open(
            &decoy,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::NOFOLLOW,
            rustix::fs::Mode::empty(),
        ) {
            let _ = rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o700));
        }
        let took = self.wait_for(Duration::from_secs(10), |l| {
            parse_act(l).is_some_and(|a| a.path == decoy && a.result == "ok")
        });
        // Its other watchers may still be at it: let them finish, then remove what is there
        // (a directory or a symlink, whichever the last swap left).
        std::thread::sleep(Duration::from_millis(200));
        for stale in [decoy.clone(), base.join(format!("{DECOY}.aside"))] {
            for _ in 0..10 {
                let gone = match std::fs::symlink_metadata(&stale) {
                    Ok(m) if m.is_dir() => std::fs::remove_dir_all(&stale).is_ok(),
                    Ok(_) => std::fs::remove_file(&stale).is_ok(),
                    Err(_) => true,
                };
                if gone {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        assert!(
            took,
            "the attacker did not take the decoy {} within 10 s: it is not attacking (its last \
             lines: {:?})",
            decoy.display(),
            &self.seen[self.seen.len().saturating_sub(10)..]
        );
    }

    /// Kills it; all its lines.
    pub fn stop(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
