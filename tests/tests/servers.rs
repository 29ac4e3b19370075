//! nginx and qemu-nbd as `docs/servers.md` describes them: how each says it is ready
//! (`Ready::Connect` on its Unix socket), what each signal does to it, and its ladder preset.
//!
//! - nginx runs from a private `nginx.conf` in a temporary directory (`daemon off`, master +
//!   one worker, pid file, logs and temp paths in the directory, `listen unix:…`): Debian's
//!   packaged configuration needs `/var/log/nginx` and port 80 and exits 1 as a foreground
//!   child.
//! - qemu-nbd serves a temporary raw file on a Unix socket (`-k`).
//!
//! Each signal test closes with a one-signal ladder `SIG:…,KILL:…` and prints the time from
//! the signal to the exit (the figures in `docs/servers.md`); it asserts what the signal does
//! (exits 0, or keeps running until the `KILL` rung). A missing server fails with the command
//! that installs it, unless `CHILDGUARD_SKIP_PEERS=1`.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use childguard::{Capture, ChildHandle, CloseReport, Ladder, Ready, Signal};
use childguard_tests::nbd::Nbd;
use childguard_tests::postgres::find_peer;
use childguard_tests::*;

const INSTALL: &str = "apt-get install -y nginx-light qemu-utils (or run tests/run.sh)";

fn nginx(test: &str) -> Option<PathBuf> {
    let candidates = ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
        .iter()
        .map(PathBuf::from)
        .collect();
    find_peer(test, "nginx", candidates, INSTALL)
}

fn qemu_nbd(test: &str) -> Option<PathBuf> {
    let candidates = ["/usr/bin/qemu-nbd", "/usr/local/bin/qemu-nbd"]
        .iter()
        .map(PathBuf::from)
        .collect();
    find_peer(test, "qemu-nbd", candidates, INSTALL)
}

/// The size of `/big`, served at [`NGINX_RATE`] bytes a second: ~2 s in flight.
const BIG: usize = 128 * 1024;
const NGINX_RATE: usize = 64 * 1024;

/// A private nginx: its directory (config, pid file, temp paths, `/big`) and its socket.
struct Nginx {
    dir: PathBuf,
    socket: PathBuf,
}

impl Nginx {
    fn new(name: &str) -> Nginx {
        let dir = scratch(name);
        std::fs::create_dir_all(dir.join("html")).unwrap();
        let socket = dir.join("http.sock");
        let d = dir.display();
        // `user root;` only counts when the master runs as root (CI does; elsewhere nginx
        // warns and ignores it): workers then read the files we made, whatever our umask.
        let conf = format!(
            "daemon off;\nmaster_process on;\nworker_processes 1;\nuser root;\n\
             pid {d}/nginx.pid;\nerror_log stderr notice;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n\
               client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n\
               scgi_temp_path {d}/scgi;\n\
               server {{\n    listen unix:{s};\n    root {d}/html;\n\
                 location = /hello {{ return 200 \"hello\\n\"; }}\n\
                 location = /big {{ limit_rate {NGINX_RATE}; limit_rate_after 0; }}\n  }}\n}}\n",
            s = socket.display(),
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        std::fs::write(dir.join("html/big"), vec![b'x'; BIG]).unwrap();
        Nginx { dir, socket }
    }

    /// `nginx -p DIR -c DIR/nginx.conf -e stderr`: `-e` so that nothing is written to the
    /// packaged `/var/log/nginx/error.log` before the config is read.
    fn command(&self, nginx: &Path) -> Command {
        let mut cmd = Command::new(nginx);
        cmd.arg("-p")
            .arg(&self.dir)
            .arg("-c")
            .arg(self.dir.join("nginx.conf"))
            .args(["-e", "stderr"]);
        cmd
    }

    fn spawn(&self, nginx: &Path, ladder: Ladder) -> ChildHandle {
        ChildHandle::builder(self.command(nginx))
            .ready(Ready::connect(self.socket.as_path()))
            // The KILL rung must reach the workers too: killed alone, the master leaves them
            // running (and holding our stdout) as orphans.
            .process_group(true)
            .capture(Capture::stderr())
            .ready_timeout(Duration::from_secs(30))
            .ladder(ladder)
            .spawn()
            .expect("nginx with Ready::Connect on its socket")
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends `GET path` over `socket`; returns the stream, to read the response from.
fn get(socket: &Path, path: &str) -> UnixStream {
    let mut s = UnixStream::connect(socket).expect("connect to nginx");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    s
}

fn get_all(socket: &Path, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    get(socket, path).read_to_end(&mut out).unwrap();
    out
}

/// Time from the first signal to the exit.
fn signal_to_exit(report: &CloseReport) -> Option<Duration> {
    Some(report.exited?.saturating_sub(report.signals.first()?.at))
}

#[test]
fn nginx_connect_ready_get_succeeds_at_once_and_the_preset_quits_gracefully() {
    let test = "nginx_connect_ready_get_succeeds_at_once_and_the_preset_quits_gracefully";
    let nginx = require_peer!(nginx(test));
    let server = Nginx::new("nginx-preset");
    let began = Instant::now();
    let handle = server.spawn(&nginx, Ladder::nginx());
    let ready_after = began.elapsed();
    // The first request after spawn() is answered: Connect saw the socket accept.
    let hello = get_all(&server.socket, "/hello");
    let text = String::from_utf8_lossy(&hello);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("hello\n"), "{text}");
    // A slow response in flight (its headers already read) when the close begins: QUIT, the
    // graceful shutdown, finishes it before nginx exits.
    let mut slow = get(&server.socket, "/big");
    let mut head = [0u8; 12];
    slow.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    let reader = std::thread::spawn(move || {
        let mut rest = Vec::new();
        slow.read_to_end(&mut rest).map(|_| rest.len())
    });
    let report = handle.close().unwrap();
    let read = reader.join().unwrap();
    eprintln!(
        "nginx ready after {ready_after:?}; closed: {report}; QUIT→exit {:?}",
        signal_to_exit(&report)
    );
    assert_eq!(report.ended_by, rung(0, Signal::QUIT), "{report}");
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    let rest = read.expect("the response in flight was not cut");
    assert!(
        rest > BIG,
        "only {rest} more bytes of a {BIG}-byte body arrived: QUIT dropped the request"
    );
    let tail = report.output_tail.as_deref().unwrap_or_default();
    assert!(tail.contains("gracefully shutting down"), "{tail}");
}

/// What each signal does to nginx's master: HUP reloads (keeps running), TERM/INT fast
/// shutdown, QUIT graceful shutdown, all exit 0.
#[test]
fn nginx_signals_as_servers_md_says() {
    let test = "nginx_signals_as_servers_md_says";
    let nginx = require_peer!(nginx(test));
    for (signal, exits) in [
        (Signal::HUP, false),
        (Signal::TERM, true),
        (Signal::INT, true),
        (Signal::QUIT, true),
    ] {
        let server = Nginx::new("nginx-signal");
        // HUP gets 3 s: time for the master to log its reload on a loaded machine before the
        // KILL rung (a KILL pending with the HUP would end it before it logs).
        let grace = if exits { "10s" } else { "3s" };
        let handle = server.spawn(&nginx, ladder(&format!("{signal}:{grace},KILL:5s")));
        assert!(get_all(&server.socket, "/hello").ends_with(b"hello\n"));
        let report = handle.close().unwrap();
        eprintln!(
            "nginx {signal}: {report}; signal→exit {:?}",
            signal_to_exit(&report)
        );
        let tail = report.output_tail.as_deref().unwrap_or_default();
        if exits {
            assert_eq!(report.ended_by, rung(0, signal), "{report}");
            assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
        } else {
            assert_eq!(report.ended_by, rung(1, Signal::KILL), "{report}");
            assert!(tail.contains("reconfiguring"), "HUP is a reload: {tail}");
        }
    }
}

/// A raw file for qemu-nbd, in a private directory that also holds its socket.
fn nbd_dir(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let dir = scratch(name);
    std::fs::create_dir_all(&dir).unwrap();
    let disk = dir.join("disk.raw");
    std::fs::write(&disk, vec![0u8; 1 << 20]).unwrap();
    let socket = dir.join("nbd.sock");
    (dir, disk, socket)
}

/// `qemu-nbd -k SOCK -f raw [-t] FILE`.
fn qemu_nbd_command(qemu_nbd: &Path, socket: &Path, disk: &Path, persistent: bool) -> Command {
    let mut cmd = Command::new(qemu_nbd);
    cmd.arg("-k").arg(socket).args(["-f", "raw"]);
    if persistent {
        cmd.arg("-t");
    }
    cmd.arg(disk);
    cmd
}

fn qemu_nbd_handle(cmd: Command, socket: &Path, ladder: Ladder) -> ChildHandle {
    ChildHandle::builder(cmd)
        .ready(Ready::connect(socket))
        .capture(Capture::stderr())
        .ready_timeout(Duration::from_secs(30))
        .ladder(ladder)
        .spawn()
        .expect("qemu-nbd with Ready::Connect on its socket")
}

#[test]
fn qemu_nbd_connect_ready_serves_at_once_and_the_default_ladder_ends_it() {
    let test = "qemu_nbd_connect_ready_serves_at_once_and_the_default_ladder_ends_it";
    let qemu_nbd = require_peer!(qemu_nbd(test));
    let (dir, disk, socket) = nbd_dir("qemu-nbd-ready");
    let began = Instant::now();
    // Not persistent: qemu-nbd exits once a client that finished the handshake leaves. The
    // readiness probe (connect, close before the handshake) does not count as one.
    let handle = qemu_nbd_handle(
        qemu_nbd_command(&qemu_nbd, &socket, &disk, false),
        &socket,
        Ladder::qemu_nbd(),
    );
    let ready_after = began.elapsed();
    // The first handshake after spawn() succeeds, and the export works.
    let stream = UnixStream::connect(&socket).expect("connect right after spawn()");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut nbd = Nbd::handshake(stream, "").expect("NBD handshake right after spawn()");
    assert_eq!(nbd.size, 1 << 20);
    nbd.write(4096, &[9u8; 512]).unwrap();
    assert_eq!(nbd.read(4096, 512).unwrap(), vec![9u8; 512]);
    // Still connected: the close's HUP rung ends it (flushing the write first). The preset
    // gives HUP 1 s; an exit that flushes to a slow disk, or a loaded machine, may need the
    // TERM rung, which ends it as cleanly (what HUP alone does is
    // qemu_nbd_signals_as_servers_md_says's, with a 10 s grace). Never the KILL rung.
    let report = handle.close().unwrap();
    eprintln!(
        "qemu-nbd ready after {ready_after:?}; closed: {report}; HUP→exit {:?}",
        signal_to_exit(&report)
    );
    assert!(
        report.ended_by == rung(0, Signal::HUP) || report.ended_by == rung(1, Signal::TERM),
        "{report}"
    );
    assert_eq!(report.status.and_then(|s| s.code()), Some(0), "{report}");
    drop(nbd);
    assert_eq!(std::fs::read(&disk).unwrap()[4096], 9, "the write was lost");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An NBD handshake on `socket`, then `NBD_CMD_DISC`.
fn handshake_and_leave(socket: &Path) {
    let stream = UnixStream::connect(socket).expect("connect to qemu-nbd");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut nbd = Nbd::handshake(stream, "").expect("NBD handshake");
    nbd.disconnect().unwrap();
}

/// What each signal does to qemu-nbd (`--persistent`, so a client's leaving does not end it):
/// HUP, TERM, INT end it (exit 0); QUIT kills it (its default action: qemu-nbd does not catch
/// it).
#[test]
fn qemu_nbd_signals_as_servers_md_says() {
    let test = "qemu_nbd_signals_as_servers_md_says";
    let qemu_nbd = require_peer!(qemu_nbd(test));
    require_signals_not_ignored(test, &[libc::SIGINT, libc::SIGQUIT]);
    for (signal, clean) in [
        (Signal::HUP, true),
        (Signal::TERM, true),
        (Signal::INT, true),
        (Signal::QUIT, false),
    ] {
        let (dir, disk, socket) = nbd_dir("qemu-nbd-signal");
        let handle = qemu_nbd_handle(
            qemu_nbd_command(&qemu_nbd, &socket, &disk, true),
            &socket,
            ladder(&format!("{signal}:10s,KILL:5s")),
        );
        // One whole client session first. A signal while the readiness probe's connection
        // (closed before its handshake) is still pending leaves qemu-nbd hung until KILL
        // (docs/servers.md); by the end of a handshake on a later connection, qemu-nbd's event
        // loop has seen the probe's EOF.
        handshake_and_leave(&socket);
        let report = handle.close().unwrap();
        eprintln!(
            "qemu-nbd {signal}: {report}; signal→exit {:?}",
            signal_to_exit(&report)
        );
        assert_eq!(report.ended_by, rung(0, signal), "{report}");
        let status = report.status.expect("reaped");
        if clean {
            assert_eq!(status.code(), Some(0), "{report}");
        } else {
            assert_eq!(status.signal(), Some(libc::SIGQUIT), "{report}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
