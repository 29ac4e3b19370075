//! Issue 22, item 4: who may speak on the private `NOTIFY_SOCKET` ([`NotifyAccess`]), judged
//! by the sender the kernel attached at send time. Senders: `cg-notify` (sends from itself,
//! then exits or execs; `--daemon` sends once reparented) and the real `systemd-notify`.
//! Every wait is on an event (a fifo, a datagram); no test races the scheduler.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use childguard::{ChildHandle, Containment, ErrorKind, NotifyAccess, NotifyReport, Ready};
use childguard_tests::*;

fn notify_bin() -> String {
    bin("cg-notify").to_str().unwrap().to_owned()
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Spawns `script` (sh) with `Ready::Notify` and `access`, contained or not; returns the
/// handle's close report's notify part.
fn spawn_ready(
    script: &str,
    access: NotifyAccess,
    contain: bool,
) -> Result<(ChildHandle, u32), childguard::Error> {
    let mut builder = ChildHandle::builder(sh(script))
        .ready(Ready::Notify)
        .notify_access(access)
        .ready_timeout(Duration::from_secs(60))
        .ladder(ladder("KILL:10s"))
        .process_group(true);
    if contain {
        builder = builder.contain(Containment::Cgroup);
    }
    let handle = builder.spawn()?;
    let pid = handle.id().unwrap();
    Ok((handle, pid))
}

fn close(handle: ChildHandle) -> NotifyReport {
    let report = handle.close().expect("close");
    report.notify.expect("a notify report")
}

/// A daemon that double-forked away from the child (its parent is no longer in the child's
/// tree) but stayed in the child's cgroup sends `READY=1`: accepted under `All` when
/// contained, by its cgroup. (Old code: "a datagram from pid …, not the child or a
/// descendant", and the spawn timed out.)
#[test]
fn a_double_forked_daemon_in_the_childs_cgroup_is_accepted_under_all() {
    let script = format!(
        "{} --daemon READY=1 STATUS=daemon; exec sleep 600",
        notify_bin()
    );
    let (handle, _) = spawn_ready(&script, NotifyAccess::All, true)
        .unwrap_or_else(|e| panic!("the daemon's READY=1 was not accepted: {e}"));
    let notify = close(handle);
    assert_eq!(notify.status.as_deref(), Some("daemon"), "{notify:?}");
    assert!(notify.ignored.is_empty(), "{notify:?}");
}

/// Uncontained, the same daemon has left the child's tree: refused, and the note says why
/// and what would accept it. The child itself then becomes ready (after the daemon's
/// datagram, which a fifo orders), so nothing waits for a timeout.
#[test]
fn a_daemon_that_left_the_tree_is_refused_without_containment() {
    let fifo = scratch("daemon-sent");
    mkfifo(&fifo);
    let n = notify_bin();
    let script = format!(
        "{n} --daemon READY=1 STATUS=daemon -- sh -c 'echo sent > {f}; exec sleep 600'; \
         read x < {f}; exec {n} READY=1 STATUS=main -- sleep 600",
        f = fifo.display()
    );
    let (handle, _) = spawn_ready(&script, NotifyAccess::All, false).expect("spawn");
    let notify = close(handle);
    let _ = std::fs::remove_file(&fifo);
    assert_eq!(notify.status.as_deref(), Some("main"), "{notify:?}");
    assert_eq!(notify.ignored.len(), 1, "{notify:?}");
    assert!(
        notify.ignored[0].contains("not a descendant of the child")
            && notify.ignored[0].contains("contain()"),
        "{notify:?}"
    );
}

/// A process outside the child's tree and cgroup — our own child, given the path — sends
/// `READY=1` first: refused with a message naming its pid and why, contained or not; the
/// child's own `READY=1`, ordered after it by a fifo, makes the spawn return.
#[test]
fn a_stranger_is_refused_with_a_clear_message() {
    for contain in [false, true] {
        let path_file = scratch("notify-path");
        let go = scratch("notify-go");
        mkfifo(&go);
        let n = notify_bin();
        let script = format!(
            "echo \"$NOTIFY_SOCKET\" > {p}.tmp && mv {p}.tmp {p}; read x < {g}; \
             exec {n} READY=1 STATUS=child -- sleep 600",
            p = path_file.display(),
            g = go.display()
        );
        let spawner = std::thread::spawn(move || spawn_ready(&script, NotifyAccess::All, contain));
        assert!(
            eventually(Duration::from_secs(60), || path_file.exists()),
            "the child never wrote its NOTIFY_SOCKET"
        );
        let socket = std::fs::read_to_string(&path_file).unwrap();
        let mut stranger = Command::new(&n)
            .args(["READY=1", "STATUS=stranger", "--", "sleep", "600"])
            .env("NOTIFY_SOCKET", socket.trim())
            .spawn()
            .unwrap();
        let stranger_pid = stranger.id();
        // Sent once it has exec'd sleep (it execs only after sending).
        assert!(
            eventually(Duration::from_secs(60), || {
                std::fs::read_to_string(format!("/proc/{stranger_pid}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
            }),
            "the stranger never sent"
        );
        std::fs::write(&go, "go\n").unwrap();
        let (handle, _) = spawner.join().unwrap().expect("spawn");
        let notify = close(handle);
        stranger.kill().unwrap();
        stranger.wait().unwrap();
        let _ = std::fs::remove_file(&go);
        let _ = std::fs::remove_file(&path_file);
        assert_eq!(notify.status.as_deref(), Some("child"), "{notify:?}");
        assert_eq!(notify.ignored.len(), 1, "{notify:?}");
        let why = &notify.ignored[0];
        let expected = if contain {
            "outside the child's cgroup"
        } else {
            "not a descendant of the child"
        };
        assert!(
            why.starts_with(&format!("a datagram from pid {stranger_pid}, {expected}")),
            "contain={contain}: {why}"
        );
    }
}

/// `Main`: a helper (the shell's child) that sends `READY=1` is refused, named as not the
/// main process; the main process's own `READY=1` makes the spawn return.
#[test]
fn main_accepts_only_the_main_pid() {
    let n = notify_bin();
    let script = format!("{n} READY=1 STATUS=helper; exec {n} READY=1 STATUS=main -- sleep 600");
    let (handle, pid) = spawn_ready(&script, NotifyAccess::Main, false).expect("spawn");
    let notify = close(handle);
    assert_eq!(notify.status.as_deref(), Some("main"), "{notify:?}");
    assert_eq!(notify.ignored.len(), 1, "{notify:?}");
    assert!(
        notify.ignored[0].contains(&format!(
            "not the main process {pid} (notify_access is Main)"
        )),
        "{notify:?}"
    );
}

/// The relative path from the current directory to `dir` (absolute).
fn relative_to_cwd(dir: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let up = cwd.components().count() - 1;
    let mut rel = PathBuf::new();
    for _ in 0..up {
        rel.push("..");
    }
    rel.join(dir.strip_prefix("/").unwrap())
}

/// A relative `runtime_dir` gives an absolute `NOTIFY_SOCKET`: the real `systemd-notify`
/// (libsystemd refuses a path that starts with neither `/` nor `@`: "Invalid argument", and
/// the spawn timed out) gets through.
#[test]
fn a_relative_runtime_dir_gives_an_absolute_notify_socket() {
    let Some(systemd_notify) = postgres::find_peer(
        "a_relative_runtime_dir_gives_an_absolute_notify_socket",
        "systemd-notify",
        vec![
            "/usr/bin/systemd-notify".into(),
            "/bin/systemd-notify".into(),
        ],
        "apt-get install -y systemd",
    ) else {
        return;
    };
    let dir = scratch("rel-runtime");
    std::fs::create_dir(&dir).unwrap();
    let relative = relative_to_cwd(&dir);
    assert!(relative.is_relative() && relative.is_dir(), "{relative:?}");
    let script = format!(
        "case \"$NOTIFY_SOCKET\" in /*) ;; *) echo \"relative: $NOTIFY_SOCKET\" >&2; exit 3;; esac; \
         {} --ready --status=relative-ok; exec sleep 600",
        systemd_notify.display()
    );
    let handle = ChildHandle::builder(sh(&script))
        .ready(Ready::Notify)
        .runtime_dir(&relative)
        .ready_timeout(Duration::from_secs(60))
        .ladder(ladder("KILL:10s"))
        .spawn()
        .unwrap_or_else(|e| panic!("relative runtime_dir {relative:?}: {e}"));
    let notify = close(handle);
    assert_eq!(notify.status.as_deref(), Some("relative-ok"), "{notify:?}");
    assert!(
        std::fs::read_dir(&dir).unwrap().next().is_none(),
        "the socket directory is removed"
    );
    std::fs::remove_dir(&dir).unwrap();
}

/// An empty `runtime_dir` is a clear configuration error, not a socket in the cwd.
#[test]
fn an_empty_runtime_dir_is_refused_clearly() {
    let err = ChildHandle::builder(sh("exit 0"))
        .ready(Ready::Notify)
        .runtime_dir("")
        .spawn()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("runtime_dir is empty"), "{err}");
}

/// Malformed datagrams from the main process are noted one by one, never a panic; the
/// well-formed `READY=1` after them still counts.
#[test]
fn malformed_datagrams_still_give_clear_notes() {
    let n = notify_bin();
    let long = "x".repeat(5000);
    let script = format!(
        "exec {n} READY -- {n} ERRNO=x EXTEND_TIMEOUT_USEC=soon -- {n} {long} -- \
         {n} READY=1 STATUS=up -- sleep 600"
    );
    let (handle, pid) = spawn_ready(&script, NotifyAccess::Main, false).expect("spawn");
    let notify = close(handle);
    assert_eq!(notify.status.as_deref(), Some("up"), "{notify:?}");
    let expected = [
        format!("a line without '=' from pid {pid}: \"READY\""),
        format!("ERRNO=\"x\" from pid {pid}"),
        format!("EXTEND_TIMEOUT_USEC=\"soon\" from pid {pid}"),
        format!("a datagram from pid {pid} of 5000 bytes, longer than 4096"),
    ];
    assert_eq!(notify.ignored, expected, "{notify:?}");
}
