//! Containment without a cgroup (issue 50): the PID namespace and subreaper backends, each a
//! tree init of ours between us and the server. What a cgroup does must hold for both:
//! `setsid`'d workers and a daemonized grandchild go with the close, in both kill modes; the
//! server's own status reaches the report; the backend is named.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use childguard::{
    ChildHandle, Containment, ContainmentBackend, KillMode, Ladder, Signal, SocketMode,
};
use childguard_tests::{exited_within, is_alive, proc_ppid, read_ready_with_workers, slowserver};

/// The tests of this file one at a time: one counts our children.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const BACKENDS: [(Containment, ContainmentBackend); 2] = [
    (Containment::PidNamespace, ContainmentBackend::PidNamespace),
    (Containment::Subreaper, ContainmentBackend::Subreaper),
];

/// Every process below the tree init that is the server's parent: the server, its children,
/// and the orphans re-parented to the tree init. Pids as we see them (the READY line's, in a
/// namespace, are the server's own view).
fn tree_of(server: u32) -> Vec<u32> {
    let init = proc_ppid(server).expect("the server's parent");
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(|pid| Some((pid, proc_ppid(pid)?)))
        .collect();
    let mut tree = vec![init];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(all.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    tree.remove(0);
    tree
}

fn spawn(args: &[&str], how: &Containment, ladder: &str, mode: KillMode) -> ChildHandle {
    ChildHandle::builder(slowserver(args))
        .socket(SocketMode::Stdio)
        .ladder(ladder.parse::<Ladder>().unwrap())
        .contain(how.clone())
        .kill_mode(mode)
        .spawn()
        .unwrap_or_else(|e| panic!("{how:?}: {e}"))
}

#[test]
fn setsid_workers_and_a_daemon_die_with_the_close_in_both_kill_modes() {
    let _serial = serial();
    for (how, backend) in BACKENDS {
        for mode in [KillMode::Mixed, KillMode::ControlGroup] {
            let handle = spawn(
                &[
                    "--daemonize",
                    "--workers",
                    "4",
                    "--setsid",
                    "--ignore",
                    "HUP",
                    "--ignore-eof",
                ],
                &how,
                "HUP:100ms,TERM:300ms,KILL:5s",
                mode,
            );
            let (ready, workers) = read_ready_with_workers(&handle);
            let server = handle.id().unwrap();
            let tree = tree_of(server);
            // The server, 4 workers, the daemon (and the daemon's own intermediate, gone).
            assert!(
                tree.len() >= 6 && tree.contains(&server),
                "{how:?}: {tree:?} {ready:?} {workers:?}"
            );
            if backend == ContainmentBackend::Subreaper {
                // Outside a namespace the server sees our pids.
                assert_eq!(server, ready.pid, "{how:?}: id() is the server's pid");
            } else {
                assert_eq!(ready.pid, 2, "the server is pid 2 in its namespace");
            }
            assert!(tree.iter().all(|&p| is_alive(p)), "{tree:?}");
            let fds: Vec<_> = tree.iter().map(|&p| childguard_tests::pidfd(p)).collect();
            let report = handle.close().unwrap();
            let contained = report.containment.as_ref().expect("a containment report");
            assert_eq!(contained.backend, backend, "{report}");
            assert!(contained.passed_over.is_empty(), "{report}");
            for (pid, fd) in tree.iter().zip(&fds) {
                assert!(
                    exited_within(fd, Duration::ZERO),
                    "{how:?} {mode:?}: {pid} outlived the close: {report}"
                );
            }
            // The server ignores HUP, so TERM ended it: its own status, not the tree init's.
            assert_eq!(
                report.status.and_then(|s| s.signal()),
                Some(libc::SIGTERM),
                "{how:?} {mode:?}: {report}"
            );
            // HUP was skipped: the server ignores it, as its own /proc entry says (not the
            // tree init's, which blocks everything).
            assert!(
                report.signals.iter().all(|s| s.signal != Signal::HUP),
                "{report}"
            );
            assert!(!report.socket_may_be_held, "{report}");
            assert!(report.to_string().contains(backend.name()), "{report}");
        }
    }
}

#[test]
fn the_servers_own_exit_code_is_the_status_and_its_orphans_go_with_it() {
    let _serial = serial();
    use std::io::{BufRead, Write};
    for (how, _) in BACKENDS {
        let mut handle = ChildHandle::builder({
            let mut sh = std::process::Command::new("sh");
            sh.args(["-c", "setsid sleep 1000 & echo started; read x; exit 7"]);
            sh.stdin(std::process::Stdio::piped());
            sh.stdout(std::process::Stdio::piped());
            sh
        })
        .contain(how.clone())
        .spawn()
        .unwrap_or_else(|e| panic!("{how:?}: {e}"));
        let mut line = String::new();
        std::io::BufReader::new(handle.stdout().expect("stdout"))
            .read_line(&mut line)
            .unwrap();
        let tree = tree_of(handle.id().unwrap());
        assert_eq!(
            tree.len(),
            2,
            "{how:?}: the shell and its sleeper: {tree:?}"
        );
        let fds: Vec<_> = tree.iter().map(|&p| childguard_tests::pidfd(p)).collect();
        handle.stdin().expect("stdin").write_all(b"go\n").unwrap();
        let status = handle
            .wait_timeout(Duration::from_secs(20))
            .unwrap()
            .expect("the shell exits at once");
        assert_eq!(status.code(), Some(7), "{how:?}");
        // The tree init is reaped once the tree is gone: the sleeper went with its server.
        for (pid, fd) in tree.iter().zip(&fds) {
            assert!(exited_within(fd, Duration::ZERO), "{how:?}: {pid} left");
        }
    }
}

#[test]
fn a_command_our_spawn_cannot_read_falls_back_to_a_process_group_and_says_why() {
    let _serial = serial();
    use std::os::unix::process::CommandExt;
    // `uid` is a setting only std's path honours: no tree init can run it.
    let mut cmd = slowserver(&[]);
    cmd.uid(rustix::process::getuid().as_raw());
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .contain(Containment::BestEffort)
        .cgroup_parent("/nonexistent-cgroup-parent")
        .spawn()
        .unwrap();
    let report = handle.close().unwrap();
    assert!(report.containment.is_none(), "{report}");
    let why = report.containment_fallback.as_deref().unwrap_or_default();
    for backend in ["cgroup:", "pid-namespace:", "subreaper:"] {
        assert!(why.contains(backend), "{backend} not named: {report}");
    }
    assert!(
        report.to_string().contains("process group only"),
        "{report}"
    );
}

#[test]
fn a_server_in_a_tree_is_judged_by_its_own_pid_for_ready_notify() {
    let _serial = serial();
    // NotifyAccess=main (the default): READY=1 must come from the server itself, whose pid the
    // kernel gives us in our namespace (SCM_CREDENTIALS), not from the tree init.
    let notify = childguard_tests::bin("cg-notify");
    for (how, backend) in BACKENDS {
        let mut cmd = std::process::Command::new(&notify);
        cmd.args(["READY=1", "--", "sleep", "1000"]);
        let handle = ChildHandle::builder(cmd)
            .ready(childguard::Ready::Notify)
            .contain(how.clone())
            .ladder("TERM:2s,KILL:2s".parse::<Ladder>().unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("{how:?}: {e}"));
        let report = handle.close().unwrap();
        assert_eq!(
            report.containment.as_ref().map(|c| c.backend),
            Some(backend),
            "{report}"
        );
        assert_eq!(
            report.status.and_then(|s| s.signal()),
            Some(libc::SIGTERM),
            "{report}"
        );
    }
}

#[test]
fn the_tree_init_sigkilled_ends_a_namespace_but_a_subreapers_orphans_escape() {
    let _serial = serial();
    // What each backend cannot do (docs/design.md, "Containment without a cgroup"): the PID
    // namespace holds even when its init is SIGKILLed (the kernel kills the namespace); a
    // subreaper SIGKILLed lets its tree re-parent to PID 1.
    for (how, backend) in BACKENDS {
        let handle = spawn(
            &["--workers", "2", "--setsid", "--ignore-eof"],
            &how,
            "TERM:1s,KILL:1s",
            KillMode::Mixed,
        );
        read_ready_with_workers(&handle);
        let server = handle.id().unwrap();
        let init = proc_ppid(server).unwrap();
        let tree = tree_of(server);
        assert_eq!(tree.len(), 3, "{how:?}: the server and 2 workers: {tree:?}");
        let fds: Vec<_> = tree.iter().map(|&p| childguard_tests::pidfd(p)).collect();
        let init_fd = childguard_tests::pidfd(init);
        rustix::process::pidfd_send_signal(&init_fd, rustix::process::Signal::KILL).unwrap();
        assert!(exited_within(&init_fd, Duration::from_secs(10)), "{how:?}");
        let left: Vec<u32> = tree
            .iter()
            .zip(&fds)
            .filter(|(_, fd)| !exited_within(fd, Duration::from_secs(2)))
            .map(|(p, _)| *p)
            .collect();
        for fd in &fds {
            let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
        }
        let report = handle.close().unwrap();
        match backend {
            ContainmentBackend::PidNamespace => {
                assert!(
                    left.is_empty(),
                    "{left:?} outlived the namespace's init: {report}"
                )
            }
            // The server (no death signal asked for) and its workers: the whole tree.
            _ => assert_eq!(
                left.len(),
                3,
                "the tree escapes a SIGKILLed subreaper — left {left:?}: {report}"
            ),
        }
    }
}

#[test]
fn a_missing_program_under_a_tree_init_is_the_same_error_and_leaves_nothing() {
    let _serial = serial();
    for (how, _) in BACKENDS {
        let before = childguard_tests::our_children();
        let err = ChildHandle::builder(std::process::Command::new("/nonexistent/server"))
            .contain(how.clone())
            .spawn()
            .expect_err("no such program");
        assert_eq!(err.kind(), childguard::ErrorKind::Spawn, "{how:?}: {err}");
        assert_eq!(
            err.io_kind(),
            std::io::ErrorKind::NotFound,
            "{how:?}: {err}"
        );
        // The tree init was reaped: no child of ours is left from this spawn.
        let after = childguard_tests::our_children();
        assert!(
            after.iter().all(|p| before.contains(p)),
            "{how:?}: {after:?} (before {before:?})"
        );
    }
}

#[test]
fn a_tree_init_reaped_by_someone_else_still_gives_the_servers_status() {
    // A host that reaps with waitpid(-1) (childguard init's own loop, a C library's) steals
    // the tree init's status; the server's, sent before it exited, is still reported.
    use std::io::Write;
    let _serial = serial();
    for (how, _) in BACKENDS {
        let mut handle = ChildHandle::builder({
            let mut sh = std::process::Command::new("sh");
            sh.args(["-c", "read x; exit 5"]);
            sh.stdin(std::process::Stdio::piped());
            sh
        })
        .contain(how.clone())
        .spawn()
        .unwrap_or_else(|e| panic!("{how:?}: {e}"));
        let init = proc_ppid(handle.id().unwrap()).expect("the tree init");
        handle.stdin().expect("stdin").write_all(b"go\n").unwrap();
        let init = rustix::process::Pid::from_raw(init as i32).unwrap();
        let reaped = rustix::process::waitpid(Some(init), rustix::process::WaitOptions::empty());
        assert!(
            matches!(reaped, Ok(Some((p, _))) if p == init),
            "{how:?}: {reaped:?}"
        );
        let status = handle
            .wait_timeout(Duration::from_secs(20))
            .unwrap()
            .expect("exited");
        assert_eq!(status.code(), Some(5), "{how:?}: the server's own status");
    }
}

#[test]
fn a_server_that_exits_at_once_still_has_its_pid() {
    // Race: the tree init reaps a server that exits at once, maybe before we could read its
    // pid from the pidfd; the tree init sends it first.
    let _serial = serial();
    for (how, _) in BACKENDS {
        for _ in 0..20 {
            let handle = ChildHandle::builder(std::process::Command::new("true"))
                .contain(how.clone())
                .spawn()
                .unwrap_or_else(|e| panic!("{how:?}: {e}"));
            let id = handle.id();
            let report = handle.close().unwrap();
            assert!(id.is_some_and(|p| p > 1), "{how:?}: id {id:?}: {report}");
            assert_eq!(report.pid, id, "{report}");
        }
    }
}
