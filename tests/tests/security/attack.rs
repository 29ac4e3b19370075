//! The harness of the attack tests: the attacker user, a lab directory under `/tmp` with the
//! programs staged where that user can run them, what root must keep (a victim file, a chosen
//! directory), the attacker process and its report, and the tally of the spawns.

use std::io::BufRead;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use childguard_tests::bin;
use childguard_tests::postgres::skip_peers;

/// The second, unprivileged user the attacks run as (tests/run.sh makes it).
pub const ATTACKER: &str = "childguard-attacker";

/// How many spawns each test makes: `CHILDGUARD_ATTACK_SPAWNS`, default 200.
pub fn spawns() -> usize {
    match std::env::var("CHILDGUARD_ATTACK_SPAWNS") {
        Ok(text) => text
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("CHILDGUARD_ATTACK_SPAWNS={text:?}: a count above 0")),
        Err(_) => 200,
    }
}

/// After this many spawns that went wrong a test stops (each may cost a readiness timeout),
/// unless `CHILDGUARD_ATTACK_KEEP_GOING=1` (to measure how often an attack wins).
const MAX_BAD: usize = 5;

/// One attack test at a time in this binary: two attackers would act on each other's
/// directories, and the library's tests set `XDG_RUNTIME_DIR` for the whole process.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Clone, Copy)]
pub struct User {
    pub uid: u32,
    pub gid: u32,
}

/// Root, and the attacker user from `/etc/passwd`. Fails the test without them — unless
/// `CHILDGUARD_SKIP_PEERS=1` and only the user is missing (`None`: skipped, said on stderr).
pub fn attacker(test: &str) -> Option<User> {
    assert!(
        rustix::process::geteuid().is_root(),
        "{test}: precondition: run as root (CI does): the attacks are on root's childguard, \
         by the unprivileged user {ATTACKER}"
    );
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let Some(line) = passwd
        .lines()
        .find(|l| l.starts_with(&format!("{ATTACKER}:")))
    else {
        if skip_peers() {
            eprintln!("SKIPPED {test}: no user {ATTACKER} (CHILDGUARD_SKIP_PEERS=1)");
            return None;
        }
        panic!(
            "{test}: no user {ATTACKER} in /etc/passwd: run `bash tests/run.sh` once (it makes \
             it: useradd --system {ATTACKER}), or set CHILDGUARD_SKIP_PEERS=1"
        );
    };
    let fields: Vec<&str> = line.split(':').collect();
    let user = User {
        uid: fields[2].parse().unwrap(),
        gid: fields[3].parse().unwrap(),
    };
    assert_ne!(user.uid, 0, "{ATTACKER} must not be root: {line}");
    Some(user)
}

/// A fresh directory `/tmp/cg-attack-…` (root's, 0755), removed on drop with all it holds —
/// also what the attacker swapped out. Under `/tmp` itself: the attacker's links must be on
/// the same filesystem as the directories it swaps them with, and it must reach the staged
/// programs (the build directory may be under `/root`).
#[derive(Debug)]
pub struct Lab {
    pub root: PathBuf,
    pub user: User,
}

impl Lab {
    pub fn new(name: &str, user: User) -> Lab {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let root = PathBuf::from(format!("/tmp/cg-attack-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let lab = Lab { root, user };
        lab.root_dir("", 0o755);
        let bin_dir = lab.root_dir("bin", 0o755);
        for program in ["cg-attacker", "cg-notify"] {
            let staged = bin_dir.join(program);
            std::fs::copy(bin(program), &staged).unwrap();
            std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        lab
    }

    pub fn program(&self, name: &str) -> PathBuf {
        self.root.join("bin").join(name)
    }

    /// A directory of root's in the lab, with exactly `mode`.
    pub fn root_dir(&self, name: &str, mode: u32) -> PathBuf {
        let dir = self.root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
        dir
    }

    /// A directory of the attacker's in the lab, with exactly `mode`.
    pub fn user_dir(&self, name: &str, mode: u32) -> PathBuf {
        let dir = self.root_dir(name, mode);
        std::os::unix::fs::chown(&dir, Some(self.user.uid), Some(self.user.gid)).unwrap();
        dir
    }

    /// An empty file of the attacker's, for a server run as that user to write to.
    pub fn user_file(&self, name: &str) -> PathBuf {
        let file = self.root.join(name);
        std::fs::write(&file, "").unwrap();
        std::os::unix::fs::chown(&file, Some(self.user.uid), Some(self.user.gid)).unwrap();
        file
    }

    /// The notify server: appends its `NOTIFY_SOCKET` to `log`, sends `READY=1` from its own
    /// pid (`cg-notify`), then sleeps until it is closed. Its argv holds no `--`.
    pub fn server_argv(&self, log: &Path) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            r#"echo "$NOTIFY_SOCKET" >> "$0"; exec "$1" READY=1 -- sleep 600"#.into(),
            log.display().to_string(),
            self.program("cg-notify").display().to_string(),
        ]
    }

    pub fn server(&self, log: &Path) -> Command {
        let argv = self.server_argv(log);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        cmd
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The socket directories named in a server log (one `NOTIFY_SOCKET` a line).
pub fn logged_dirs(log: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| Some(Path::new(l).parent()?.to_path_buf()))
        .collect()
}

/// What root must keep as it is, whatever the attacker does: a root-owned 0600 file (the
/// victim of a chown), or a root-owned 0755 empty directory of the attacker's choosing (the
/// target of a chmod or a chown, where root's socket must not land either).
#[derive(Debug)]
pub struct Kept {
    pub path: PathBuf,
    dir: bool,
}

impl Kept {
    pub fn victim_file(lab: &Lab) -> Kept {
        let kept = Kept {
            path: lab.root_dir("victim", 0o755).join("secret"),
            dir: false,
        };
        kept.restore();
        kept
    }

    pub fn chosen_dir(lab: &Lab) -> Kept {
        let kept = Kept {
            path: lab.root.join("chosen"),
            dir: true,
        };
        kept.restore();
        kept
    }

    /// How it differs from what it must be, if it does.
    pub fn changed(&self) -> Option<String> {
        let meta = match std::fs::symlink_metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) => return Some(format!("{}: {e}", self.path.display())),
        };
        let want = if self.dir { 0o040755 } else { 0o100600 };
        let mut entries = Vec::new();
        if self.dir && meta.is_dir() {
            for e in std::fs::read_dir(&self.path).unwrap().flatten() {
                entries.push(e.file_name().to_string_lossy().into_owned());
            }
        }
        let same = (meta.uid(), meta.gid(), meta.mode()) == (0, 0, want) && entries.is_empty();
        (!same).then(|| {
            format!(
                "{} is {}:{} mode {:o} (was 0:0 mode {want:o}){}",
                self.path.display(),
                meta.uid(),
                meta.gid(),
                meta.mode(),
                match entries.is_empty() {
                    true => String::new(),
                    false => format!(", holding {entries:?}"),
                }
            )
        })
    }

    pub fn restore(&self) {
        let _ = std::fs::remove_dir_all(&self.path);
        let _ = std::fs::remove_file(&self.path);
        if self.dir {
            std::fs::create_dir(&self.path).unwrap();
            std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o755)).unwrap();
        } else {
            std::fs::write(&self.path, "root's secret\n").unwrap();
            std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        std::os::unix::fs::chown(&self.path, Some(0), Some(0)).unwrap();
    }
}

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

/// The spawns of one test: those that went wrong (root's server not ready, CMD not run) and
/// those after which a [`Kept`] had changed (restored each time, to count the next).
#[derive(Debug)]
pub struct Tally {
    test: &'static str,
    began: Instant,
    pub spawns: usize,
    pub failed: Vec<String>,
    pub harmed: Vec<String>,
}

impl Tally {
    pub fn new(test: &'static str) -> Tally {
        Tally {
            test,
            began: Instant::now(),
            spawns: 0,
            failed: Vec::new(),
            harmed: Vec::new(),
        }
    }

    /// Spawn `i`'s outcome, and the look at `kept` after it.
    pub fn record(&mut self, outcome: Result<(), String>, kept: Option<&Kept>) {
        let i = self.spawns;
        self.spawns += 1;
        if let Err(e) = outcome {
            self.failed.push(format!("spawn {i}: {e}"));
        }
        if let Some(change) = kept.and_then(Kept::changed) {
            self.harmed.push(format!("spawn {i}: {change}"));
            kept.unwrap().restore();
        }
    }

    /// Whether to go on to the next spawn.
    pub fn go_on(&self) -> bool {
        let keep_going = std::env::var_os("CHILDGUARD_ATTACK_KEEP_GOING").is_some_and(|v| v == "1");
        self.spawns < spawns() && (keep_going || self.failed.len().max(self.harmed.len()) < MAX_BAD)
    }

    /// Says what happened (on stderr, `--nocapture` shows it), then asserts that root kept
    /// what it must and that every spawn succeeded.
    pub fn assert_held(&self, attacker_did: &str) {
        let summary = format!(
            "{}: {} spawns in {:.1} s; attacker: {attacker_did}; harmed after {} spawn(s), \
             failed {}",
            self.test,
            self.spawns,
            self.began.elapsed().as_secs_f64(),
            self.harmed.len(),
            self.failed.len(),
        );
        eprintln!("{summary}");
        for line in self.harmed.iter().chain(&self.failed).take(10) {
            eprintln!("  {line}");
        }
        assert!(
            self.harmed.is_empty(),
            "{summary}\nwhat the attacker changed: {:#?}",
            self.harmed
        );
        assert!(
            self.failed.is_empty(),
            "{summary}\nroot's spawns that failed: {:#?}",
            self.failed
        );
        assert_eq!(self.spawns, spawns(), "{summary}");
    }
}

/// `childguard ARGS` (the CLI under test), with `XDG_RUNTIME_DIR` as given (unset: `None`);
/// `Ok` if it exited with one of `codes`, else its status and stderr's tail.
pub fn cli(args: &[String], xdg: Option<&Path>, codes: &[i32]) -> Result<(), String> {
    let mut cmd = Command::new(bin("cg-childguard"));
    cmd.args(args)
        .stdin(Stdio::null())
        .env_remove("XDG_RUNTIME_DIR");
    if let Some(dir) = xdg {
        cmd.env("XDG_RUNTIME_DIR", dir);
    }
    let out = cmd.output().expect("running the childguard CLI");
    match out.status.code() {
        Some(code) if codes.contains(&code) => Ok(()),
        _ => {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(4).collect();
            Err(format!(
                "{}: {}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ))
        }
    }
}

/// Sets `XDG_RUNTIME_DIR` for this process (the library reads it at each spawn) while it
/// lives, then restores it. Only under [`one_at_a_time`].
#[derive(Debug)]
pub struct RuntimeDirEnv(Option<std::ffi::OsString>);

impl RuntimeDirEnv {
    pub fn set(dir: Option<&Path>) -> RuntimeDirEnv {
        let old = std::env::var_os("XDG_RUNTIME_DIR");
        match dir {
            Some(dir) => std::env::set_var("XDG_RUNTIME_DIR", dir),
            None => std::env::remove_var("XDG_RUNTIME_DIR"),
        }
        RuntimeDirEnv(old)
    }
}

impl Drop for RuntimeDirEnv {
    fn drop(&mut self) {
        match self.0.take() {
            Some(old) => std::env::set_var("XDG_RUNTIME_DIR", old),
            None => std::env::remove_var("XDG_RUNTIME_DIR"),
        }
    }
}

/// A spawn through the library: `Ready::Notify` (5 s), with `notify_owner` and `runtime_dir`
/// when given, then a close; `Ok` once ready and closed.
pub fn library_spawn(
    command: Command,
    owner: Option<User>,
    runtime_dir: Option<&Path>,
) -> Result<(), String> {
    let mut builder = childguard::ChildHandle::builder(command)
        .ready(childguard::Ready::Notify)
        .ready_timeout(Duration::from_secs(5))
        .ladder(childguard_tests::ladder("TERM:2s,KILL:2s"));
    if let Some(user) = owner {
        builder = builder.notify_owner(user.uid, user.gid);
    }
    if let Some(dir) = runtime_dir {
        builder = builder.runtime_dir(dir);
    }
    let handle = builder.spawn().map_err(|e| format!("spawn: {e}"))?;
    let _report = handle.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}

/// The attacks on an `XDG_RUNTIME_DIR` the attacker owns (0700, its own), which root's
/// childguard is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRuntimeDir {
    /// On the `chmod`'s `IN_ATTRIB` (and a little later): root's directory renamed aside, the
    /// attacker's own directory and datagram socket in its place.
    Steal,
    /// On `IN_CREATE`: root's new directory swapped for a symlink to the chosen directory.
    SwapOnCreate,
    /// On the `chmod`'s `IN_ATTRIB`: the same swap.
    SwapOnChmod,
}

/// The frame of an attack on the runtime directory: the lab, the attacker's `xdg` directory
/// (also this process's `XDG_RUNTIME_DIR` meanwhile), the attacker armed and its decoy taken,
/// then `spawn(lab, xdg, log)` until [`Tally::go_on`] says to stop (the chosen directory
/// checked after each, for the swaps), the decoy taken again, and the verdict.
pub fn runtime_dir_attack(
    test: &'static str,
    attack: OnRuntimeDir,
    mut spawn: impl FnMut(&Lab, &Path, &Path) -> Result<(), String>,
) {
    let _serial = one_at_a_time();
    let Some(user) = attacker(test) else { return };
    let lab = Lab::new("xdg", user);
    let xdg = lab.user_dir("xdg", 0o700);
    let log = lab.user_file("servers.log");
    let _env = RuntimeDirEnv::set(Some(&xdg));
    let kept = (attack != OnRuntimeDir::Steal).then(|| Kept::chosen_dir(&lab));
    let target = kept.as_ref().map(|k| k.path.display().to_string());
    let xdg_text = xdg.display().to_string();
    let mut args = vec!["--watch", &xdg_text];
    args.extend(match attack {
        OnRuntimeDir::Steal => ["--on", "attrib", "--action", "steal"],
        OnRuntimeDir::SwapOnCreate => ["--on", "create", "--action", "swap-dir"],
        OnRuntimeDir::SwapOnChmod => ["--on", "attrib", "--action", "swap-dir"],
    });
    if let Some(target) = &target {
        args.extend(["--target", target]);
    }
    let mut attacker = Attacker::start(&lab, &args);
    attacker.must_take_decoy(&xdg);
    let mut tally = Tally::new(test);
    while tally.go_on() {
        let outcome = spawn(&lab, &xdg, &log);
        tally.record(outcome, kept.as_ref());
    }
    attacker.must_take_decoy(&xdg);
    let did = Did::of(&attacker.stop(), None, user.uid);
    tally.assert_held(&format!("{did}; took its decoy before and after"));
}
