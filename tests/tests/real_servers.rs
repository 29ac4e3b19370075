//! childguard against the real servers it exists for: nbdkit and qemu-nbd, over a socketpair
//! (`SocketMode::Stdio`, as libnbd's `connect_command`) and by socket activation
//! (`SocketMode::Activation`, as libnbd's `connect_systemd_socket_activation`), plus the
//! activation error paths.
//!
//! A missing program fails the test with the command that installs it, unless
//! `CHILDGUARD_SKIP_PEERS=1`: then the test says it was skipped and passes.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use childguard::{ChildHandle, Ending, ErrorKind, Signal, SocketMode};
use childguard_tests::nbd::Nbd;
use childguard_tests::*;

const INSTALL: &str = "apt-get install -y nbdkit qemu-utils libnbd-bin python3-libnbd";

/// Whether every program in `programs` is on `PATH`. A missing one panics with the install
/// command, or — with `CHILDGUARD_SKIP_PEERS=1` — prints that the test is skipped and returns
/// `false`.
fn peers_present(test: &str, programs: &[&str]) -> bool {
    let missing: Vec<&str> = programs.iter().copied().filter(|p| !on_path(p)).collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var_os("CHILDGUARD_SKIP_PEERS").is_some_and(|v| v == "1") {
        eprintln!(
            "SKIPPED {test}: {} not installed (CHILDGUARD_SKIP_PEERS=1)",
            missing.join(", ")
        );
        return false;
    }
    panic!(
        "{test} needs {} on PATH: install with `{INSTALL}` \
         (or set CHILDGUARD_SKIP_PEERS=1 to skip tests against real servers)",
        missing.join(", ")
    );
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
    })
}

/// The only early return allowed: a peer is missing and skipping was asked for.
macro_rules! require {
    ($test:expr, $($program:expr),+) => {
        if !peers_present($test, &[$($program),+]) {
            return;
        }
    };
}

fn command(program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args);
    cmd
}

/// A fresh private directory to use as `runtime_dir`, so leftovers can be checked exactly.
fn runtime_dir(name: &str) -> PathBuf {
    let dir = scratch(name);
    std::fs::create_dir(&dir).unwrap();
    dir
}

/// Entries left in `dir` (the activation directories we made there, if any leaked).
fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// `(pid, pgrp, comm)` of every process in `/proc`.
fn processes() -> Vec<(u32, u32, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        // After ") ": state, ppid, pgrp.
        let pgrp = stat[close + 2..]
            .split(' ')
            .nth(2)
            .and_then(|p| p.parse().ok());
        if let Some(pgrp) = pgrp {
            out.push((pid, pgrp, comm));
        }
    }
    out
}

/// Pids of processes called `comm` in process group `pgrp`.
fn in_group(pgrp: u32, comm: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|(_, g, c)| *g == pgrp && c == comm)
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Pids of live processes whose command line is exactly `argv`.
fn by_cmdline(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    processes()
        .into_iter()
        .map(|(pid, _, _)| pid)
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|pid| is_alive(*pid))
        .collect()
}

fn nbd_over(handle: &ChildHandle) -> Nbd<&UnixStream> {
    let socket = handle.socket().expect("handle has a socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    Nbd::handshake(socket, "").expect("NBD handshake")
}

#[test]
fn nbdkit_stdio_read_in_flight_closes_fast() {
    require!("nbdkit_stdio_read_in_flight_closes_fast", "nbdkit");
    let cmd = command(
        "nbdkit",
        &["-s", "null", "size=512", "--filter=delay", "delay-read=10"],
    );
    // HUP's grace is long (4 s) so that a loaded machine cannot push the exit past it into
    // the TERM rung; the 10 s delay, what a close that did not cut the read would wait, is
    // far beyond both it and the bound below.
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .ladder("HUP:4s,TERM:1s,KILL:1s".parse().unwrap())
        .spawn()
        .unwrap();
    let pid = handle.id().unwrap();
    let mut nbd = nbd_over(&handle);
    assert_eq!(nbd.size, 512);
    nbd.send_read(0, 512).unwrap();
    assert_eq!(nbd.in_flight(), 1);
    std::thread::sleep(Duration::from_millis(50));
    assert!(is_alive(pid));
    let started = Instant::now();
    let report = handle.close().unwrap();
    let took = started.elapsed();
    eprintln!("{report}");
    // Typically a few ms; 3 s is slack for a loaded machine, below the HUP rung's 4 s and far
    // below the read's 10 s.
    assert!(took < Duration::from_secs(3), "{report}");
    // The shutdown makes nbdkit cancel the delay and exit; the HUP sent with it is what the
    // report names if it went out first.
    assert!(
        matches!(report.ended_by, Ending::Eof) || report.ended_by == rung(0, Signal::HUP),
        "{report}"
    );
    assert!(
        report.status.is_some() && !report.handed_to_reaper,
        "{report}"
    );
    assert_eq!(proc_state(pid), None);
}

#[test]
fn nbdkit_eval_sleeping_read_group_ladder_leaves_no_grandchild() {
    require!(
        "nbdkit_eval_sleeping_read_group_ladder_leaves_no_grandchild",
        "nbdkit"
    );
    let cmd = command(
        "nbdkit",
        &[
            "-s",
            "eval",
            "get_size=echo 512",
            "pread=sleep 10; head -c $3 /dev/zero",
        ],
    );
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .ladder("HUP:200ms,TERM:200ms,KILL:1s".parse().unwrap())
        .process_group(true)
        .spawn()
        .unwrap();
    let pid = handle.id().unwrap();
    let mut nbd = nbd_over(&handle);
    nbd.send_read(0, 512).unwrap();
    let mut sleepers = Vec::new();
    assert!(
        eventually(Duration::from_secs(5), || {
            sleepers = in_group(pid, "sleep");
            !sleepers.is_empty()
        }),
        "the pread's `sleep` never appeared in group {pid}"
    );
    let started = Instant::now();
    let report = handle.close().unwrap();
    let took = started.elapsed();
    eprintln!("{report}");
    // The ladder ends it by 0.4 s (+ the exit); 5 s is slack for a loaded machine, and half
    // of the 10 s a close that waited for the pread's `sleep` would take.
    assert!(took < Duration::from_secs(5), "{report}");
    assert!(matches!(report.ended_by, Ending::Rung { .. }), "{report}");
    assert!(report.signals.iter().all(|s| s.to_group), "{report}");
    assert!(report.group_survivors.is_empty(), "{report}");
    for sleeper in sleepers {
        assert!(
            !is_alive(sleeper),
            "grandchild sleep {sleeper} survived the close: {report}"
        );
    }
    assert_eq!(proc_state(pid), None);
}

#[test]
fn nbdkit_ignores_hup_and_term_before_handshake_kill_rung_ends_it() {
    require!(
        "nbdkit_ignores_hup_and_term_before_handshake_kill_rung_ends_it",
        "nbdkit"
    );
    // nbdkit serves a socketpair whose other end this test holds: the handle has no socket to
    // shut down, so only the ladder can end it, and nbdkit (waiting for its handshake) ignores
    // HUP and TERM.
    let (ours, theirs) = UnixStream::pair().unwrap();
    let theirs = std::os::fd::OwnedFd::from(theirs);
    let mut cmd = command("nbdkit", &["-s", "memory", "1M"]);
    cmd.stdin(theirs.try_clone().unwrap()).stdout(theirs);
    // KILL's grace is long (5 s): the close must return as soon as the KILL is reaped, not
    // wait it out, and a bound between the two tells them apart with room to spare.
    let handle = ChildHandle::builder(cmd)
        .ladder("HUP:200ms,TERM:200ms,KILL:5s".parse().unwrap())
        .spawn()
        .unwrap();
    let pid = handle.id().unwrap();
    // nbdkit is up once its greeting arrives; we never answer it.
    let mut greeting = [0u8; 18];
    ours.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::io::Read::read_exact(&mut &ours, &mut greeting).unwrap();
    let report = handle.close().unwrap();
    eprintln!("{report}");
    assert_eq!(report.ended_by, rung(2, Signal::KILL), "{report}");
    let sent: Vec<Signal> = report.signals.iter().map(|s| s.signal).collect();
    assert_eq!(sent, [Signal::HUP, Signal::TERM, Signal::KILL], "{report}");
    assert_eq!(report.status.unwrap().signal(), Some(libc::SIGKILL));
    // 0.4 s of rungs, then the KILL's reap: 3 s is slack for a loaded machine, well below the
    // 5.4 s of a close that sat out the KILL rung's grace.
    assert!(report.total < Duration::from_secs(3), "{report}");
    assert_eq!(proc_state(pid), None);
}

#[test]
fn nbdkit_stdio_kill_before_handshake_is_ignored_then_close_ends_it() {
    require!(
        "nbdkit_stdio_kill_before_handshake_is_ignored_then_close_ends_it",
        "nbdkit"
    );
    // Long graces (2 s, 2 s, 5 s): a close that climbed the rungs kill() already took again, or
    // sat out KILL's grace, would take 4 s or 5 s; the bound below is well under both.
    let mut handle = ChildHandle::builder(command("nbdkit", &["-s", "memory", "1M"]))
        .socket(SocketMode::Stdio)
        .ladder("HUP:2s,TERM:2s,KILL:5s".parse().unwrap())
        .spawn()
        .unwrap();
    let pid = handle.id().unwrap();
    let mut greeting = [0u8; 18];
    let socket = handle.socket().unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::io::Read::read_exact(&mut &*socket, &mut greeting).unwrap();
    for signal in [Signal::HUP, Signal::TERM] {
        let status = handle.kill(signal, Duration::from_millis(200)).unwrap();
        assert_eq!(status, None, "nbdkit obeyed {signal} before its handshake");
    }
    assert!(is_alive(pid));
    let report = handle.close().unwrap();
    eprintln!("{report}");
    // Once the socket is shut down, the pending TERM takes effect (or the KILL rung, which
    // comes next since kill() already took HUP and TERM): either way, at once.
    assert!(
        report.ended_by
            == (Ending::Kill {
                signal: Signal::TERM
            })
            || report.ended_by == rung(2, Signal::KILL),
        "{report}"
    );
    // Typically a few ms; 2 s is slack for a loaded machine.
    assert!(report.total < Duration::from_secs(2), "{report}");
    assert_eq!(proc_state(pid), None);
}

/// Write a pattern, read it back, disconnect.
fn write_read_back(nbd: &mut Nbd<&UnixStream>) {
    assert_eq!(nbd.size, 1 << 20);
    assert!(!nbd.is_read_only());
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    nbd.write(8192, &pattern).unwrap();
    assert_eq!(nbd.read(8192, 4096).unwrap(), pattern);
    assert_eq!(nbd.read(0, 512).unwrap(), vec![0u8; 512]);
    nbd.disconnect().unwrap();
}

#[test]
fn nbdkit_memory_by_socket_activation() {
    require!("nbdkit_memory_by_socket_activation", "nbdkit");
    let rt = runtime_dir("nbdkit-activation");
    let handle = ChildHandle::builder(command("nbdkit", &["memory", "1M"]))
        .socket(SocketMode::Activation { name: None })
        .runtime_dir(&rt)
        // HUP's grace is long (3 s): a loaded machine must not push nbdkit's exit into TERM.
        .ladder("EOF:300ms,HUP:3s,TERM:1s,KILL:1s".parse().unwrap())
        .spawn()
        .unwrap();
    let pid = handle.id().unwrap();
    let path = handle.socket_path().unwrap().to_path_buf();
    assert!(path.starts_with(&rt), "{}", path.display());
    let dir_mode = std::fs::metadata(path.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    // A second client can use the path.
    let second = UnixStream::connect(&path).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut nbd2 = Nbd::handshake(&second, "").unwrap();
    let mut nbd = nbd_over(&handle);
    write_read_back(&mut nbd);
    nbd2.disconnect().unwrap();
    drop(second);
    let report = handle.close().unwrap();
    eprintln!("{report}");
    // A socket-activated nbdkit keeps serving after its client left: the EOF wait runs out and
    // the HUP rung ends it.
    assert_eq!(report.ended_by, rung(0, Signal::HUP), "{report}");
    assert!(
        report.status.is_some() && report.notes.is_empty(),
        "{report}"
    );
    // The EOF wait (0.3 s), then HUP's exit in a few ms: 3 s is slack for a loaded machine,
    // below the HUP rung's end (3.3 s).
    assert!(report.total < Duration::from_secs(3), "{report}");
    assert!(!path.exists(), "socket left behind");
    assert!(!path.parent().unwrap().exists(), "directory left behind");
    assert_eq!(entries(&rt), Vec::<String>::new());
    assert_eq!(proc_state(pid), None);
    std::fs::remove_dir(&rt).unwrap();
}

#[test]
fn qemu_nbd_by_socket_activation() {
    require!("qemu_nbd_by_socket_activation", "qemu-nbd", "qemu-img");
    let work = runtime_dir("qemu-nbd");
    let disk = work.join("disk.raw");
    let made = Command::new("qemu-img")
        .args(["create", "-q", "-f", "raw"])
        .arg(&disk)
        .arg("1M")
        .status()
        .unwrap();
    assert!(made.success(), "qemu-img create failed");
    let mut cmd = command("qemu-nbd", &["-f", "raw"]);
    cmd.arg(&disk);
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Activation {
            name: Some("qemu-nbd".into()),
        })
        .runtime_dir(&work)
        // EOF's grace is long (5 s): qemu-nbd's exit (it flushes the image) on a loaded machine
        // must not miss it.
        .ladder("EOF:5s,HUP:1s,TERM:1s,KILL:1s".parse().unwrap())
        .spawn()
        .unwrap();
    let pid = handle.id().unwrap();
    let path = handle.socket_path().unwrap().to_path_buf();
    let mut nbd = nbd_over(&handle);
    write_read_back(&mut nbd);
    let report = handle.close().unwrap();
    eprintln!("{report}");
    // Without --persistent, qemu-nbd exits when its client leaves: no signal needed.
    assert_eq!(report.ended_by, Ending::Eof, "{report}");
    assert_eq!(report.status.unwrap().code(), Some(0), "{report}");
    assert!(report.signals.is_empty(), "{report}");
    assert!(!path.parent().unwrap().exists(), "directory left behind");
    // The data reached the image.
    let image = std::fs::read(&disk).unwrap();
    assert_eq!(image[8192 + 1], 7);
    std::fs::remove_file(&disk).unwrap();
    assert_eq!(entries(&work), Vec::<String>::new());
    std::fs::remove_dir(&work).unwrap();
    assert_eq!(proc_state(pid), None);
}

#[test]
fn nbdkit_exit_with_parent_and_ours_together() {
    require!("nbdkit_exit_with_parent_and_ours_together", "nbdkit");
    let cmd = command("nbdkit", &["-s", "--exit-with-parent", "null", "size=512"]);
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .exit_with_parent(true)
        // HUP's grace is long (3 s): a loaded machine must not push the exit into TERM.
        .ladder("HUP:3s,TERM:1s,KILL:1s".parse().unwrap())
        .spawn()
        .unwrap();
    let pid = handle.id().unwrap();
    assert!(is_our_child(pid));
    let mut nbd = nbd_over(&handle);
    assert_eq!(nbd.read(0, 512).unwrap(), vec![0u8; 512]);
    let report = handle.close().unwrap();
    eprintln!("{report}");
    assert!(
        report.ended_by == Ending::Eof || report.ended_by == rung(0, Signal::HUP),
        "{report}"
    );
    assert!(report.signals.len() <= 1, "{report}");
    assert!(report.notes.is_empty(), "{report}");
    assert!(
        report.status.is_some() && report.reaped.is_some(),
        "{report}"
    );
    assert!(
        !report.handed_to_reaper && !report.outlived_ladder,
        "{report}"
    );
    // Typically a few ms; 2 s is slack for a loaded machine, below the HUP rung's 3 s.
    assert!(report.total < Duration::from_secs(2), "{report}");
    assert_eq!(proc_state(pid), None);
}

#[test]
fn activation_environment_is_what_systemd_sets() {
    require!("activation_environment_is_what_systemd_sets", "python3");
    let rt = runtime_dir("activation-env");
    // Report the fds ≥ 3 we inherited, then accept on fd 3 and send our pid and LISTEN_*.
    let script = "import os, socket\n\
        def is_open(fd):\n    try:\n        os.fstat(fd)\n        return True\n    except OSError:\n        return False\n\
        fds = [fd for fd in range(3, 256) if is_open(fd)]\n\
        s = socket.socket(fileno=3)\n\
        c, _ = s.accept()\n\
        env = {k: v for k, v in os.environ.items() if k.startswith('LISTEN_')}\n\
        c.sendall(repr((os.getpid(), sorted(env.items()), fds, os.environ.get('CG_KEEP'))).encode())\n\
        c.close()\n";
    let mut cmd = command("python3", &["-c", script]);
    cmd.env("LISTEN_FDS", "7")
        .env("LISTEN_STALE", "x")
        .env("CG_KEEP", "yes");
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Activation {
            name: Some("nbd".into()),
        })
        .runtime_dir(&rt)
        .ladder("EOF:5s,KILL:1s".parse().unwrap())
        // Forked by the spawner thread: LISTEN_PID is still the child's own pid.
        .exit_with_parent(true)
        // No bound at all must not overflow.
        .connect_timeout(Duration::MAX)
        .spawn()
        .unwrap();
    let pid = handle.id().unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut handle.socket().unwrap(), &mut text).unwrap();
    let want = format!(
        "({pid}, [('LISTEN_FDNAMES', 'nbd'), ('LISTEN_FDS', '1'), ('LISTEN_PID', '{pid}')], [3], 'yes')"
    );
    assert_eq!(text, want);
    let report = handle.close().unwrap();
    assert!(
        matches!(report.ended_by, Ending::Eof | Ending::BeforeClose),
        "{report}"
    );
    assert_eq!(report.status.unwrap().code(), Some(0), "{report}");
    assert_eq!(entries(&rt), Vec::<String>::new());
    std::fs::remove_dir(&rt).unwrap();
}

#[test]
fn activation_bad_name_is_a_config_error_and_leaves_nothing() {
    let rt = runtime_dir("bad-name");
    for bad in ["a:b", "tab\there", ""] {
        let err = ChildHandle::builder(command("sleep", &["30"]))
            .socket(SocketMode::Activation {
                name: Some(bad.into()),
            })
            .runtime_dir(&rt)
            .spawn()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{err}");
        assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        assert!(err.to_string().contains("LISTEN_FDNAMES"), "{err}");
    }
    assert_eq!(entries(&rt), Vec::<String>::new());
    std::fs::remove_dir(&rt).unwrap();
}

#[test]
fn activation_path_too_long_is_a_config_error() {
    // The directory exists (a runtime_dir is resolved first: a missing one is refused for
    // that), and nothing is made in it.
    let rt = PathBuf::from(format!("/tmp/{}-{}", "x".repeat(90), std::process::id()));
    std::fs::create_dir(&rt).unwrap();
    let err = ChildHandle::builder(command("sleep", &["30"]))
        .socket(SocketMode::Activation { name: None })
        .runtime_dir(&rt)
        .spawn()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("sun_path"), "{err}");
    assert_eq!(
        std::fs::read_dir(&rt).unwrap().count(),
        0,
        "nothing made in it"
    );
    std::fs::remove_dir(&rt).unwrap();
}

#[test]
fn activation_child_exiting_at_once_is_a_connect_error_and_leaves_nothing() {
    let rt = runtime_dir("exits");
    // Both mechanisms: the pidfd and the portable SIGCHLD notifier wake the accept wait.
    for portable in [false, true] {
        let started = Instant::now();
        let err = ChildHandle::builder(command("sh", &["-c", "exit 3"]))
            .socket(SocketMode::Activation { name: None })
            .runtime_dir(&rt)
            .force_portable(portable)
            .spawn()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
        let text = err.to_string();
        assert!(
            text.contains("exited (exit status: 3) before accepting"),
            "{text}"
        );
        // Woken by the exit, not by the 10 s connect timeout: 5 s is slack for a loaded
        // machine, half of that timeout.
        assert!(started.elapsed() < Duration::from_secs(5), "{text}");
        assert_eq!(entries(&rt), Vec::<String>::new());
    }
    std::fs::remove_dir(&rt).unwrap();
}

#[test]
fn activation_server_never_accepting_times_out_and_is_killed() {
    let rt = runtime_dir("never-accepts");
    // A unique command line, to find the process again.
    let argv = ["sleep", "31.4159"];
    let started = Instant::now();
    let err = ChildHandle::builder(command(argv[0], &argv[1..]))
        .socket(SocketMode::Activation { name: None })
        .runtime_dir(&rt)
        .connect_timeout(Duration::from_millis(300))
        .spawn()
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
    assert_eq!(err.io_kind(), std::io::ErrorKind::TimedOut, "{err}");
    assert!(err.to_string().contains("did not accept"), "{err}");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(
        by_cmdline(&argv),
        Vec::<u32>::new(),
        "the server was left running"
    );
    assert_eq!(entries(&rt), Vec::<String>::new());
    std::fs::remove_dir(&rt).unwrap();
}

#[test]
fn activation_missing_program_is_a_spawn_error_and_leaves_nothing() {
    let rt = runtime_dir("missing");
    let err = ChildHandle::builder(command("childguard-no-such-program", &[]))
        .socket(SocketMode::Activation { name: None })
        .runtime_dir(&rt)
        .spawn()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Spawn, "{err}");
    assert_eq!(err.io_kind(), std::io::ErrorKind::NotFound, "{err}");
    assert_eq!(entries(&rt), Vec::<String>::new());
    std::fs::remove_dir(&rt).unwrap();
}

#[test]
fn activation_exec_failure_is_reported_by_spawn() {
    // Found (a file with x bits) but not executable as a program: execve fails in the child.
    let rt = runtime_dir("exec-fails");
    let fake = rt.join("not-a-program");
    // Written by a shell of its own, not by this process: a writable fd of ours would be
    // inherited by a child another test thread forks meanwhile and held until that child's
    // exec, and our execve of the file then fails with ETXTBSY, not ENOEXEC (seen once in a
    // flake hunt under two CPU hogs).
    let wrote = Command::new("sh")
        .args(["-c", r#"printf '\177ELF garbage' > "$0" && chmod 755 "$0""#])
        .arg(&fake)
        .status()
        .unwrap();
    assert!(wrote.success(), "writing {}", fake.display());
    let err = ChildHandle::builder(Command::new(&fake))
        .socket(SocketMode::Activation { name: None })
        .runtime_dir(&rt)
        .spawn()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Spawn, "{err}");
    assert_eq!(err.raw_os_error(), Some(libc::ENOEXEC), "{err}");
    std::fs::remove_file(&fake).unwrap();
    assert_eq!(entries(&rt), Vec::<String>::new());
    std::fs::remove_dir(&rt).unwrap();
}
