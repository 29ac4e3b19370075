//! `ChildHandle::detach`: the child is given up without a close, keeps running, and is still
//! reaped by childguard when it exits on its own; the caller keeps the socket. One test
//! function, so that nothing else in this process spawns or opens fds while we count.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use childguard::{reaper, ChildHandle, SocketMode};
use childguard_tests::*;

/// Writes one request line on `socket` and returns the answer line. Every wait in this file
/// is 60 s, a bound on a broken child only: the flake hunt saw this test fail once (run 11 of
/// 20, with builds and valgrind runs beside the two CPU hogs), and its one-line log did not
/// say at which wait; the activated python server's first answer is the likeliest (a cold
/// `python3` start under load).
fn ask(socket: &UnixStream, request: &str) -> String {
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    (&*socket)
        .write_all(format!("{request}\n").as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(socket).read_line(&mut line).unwrap();
    line
}

/// Spawns slowserver (ignoring HUP, so that nothing but its own exit ends it), detaches it,
/// talks to it, lets it exit on its own, and checks what is left.
fn detach_one(portable: bool, group: bool) {
    let what = format!("portable={portable} group={group}");
    let table_before = fd_table();
    let handle = ChildHandle::builder(slowserver(&["--ignore", "HUP"]))
        .socket(SocketMode::Stdio)
        .ladder("HUP:1s,KILL:1s".parse().unwrap())
        .process_group(group)
        .force_portable(portable)
        .spawn()
        .expect("spawning slowserver");
    let ready = read_ready(&handle);
    let pid = ready.pid;

    let socket = handle
        .detach()
        .expect("detach")
        .expect("a Stdio handle hands its socket back");

    // Still running, still ours to talk to: nothing was shut down or signalled.
    assert!(is_alive(pid), "{what}: child {pid} gone right after detach");
    assert_eq!(ask(&socket, "PING"), "PONG\n", "{what}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(is_alive(pid), "{what}: child {pid} ended after detach");
    assert_eq!(ask(&socket, "PING"), "PONG\n", "{what}");
    assert_eq!(reaper::in_flight(), 1, "{what}: the reaper owns the child");

    // The child exits on its own: childguard reaps it, no zombie stays.
    (&socket).write_all(b"EXIT 3\n").unwrap();
    assert!(
        eventually(Duration::from_secs(60), || !our_children().contains(&pid)),
        "{what}: child {pid} not reaped 10 s after it exited: state {:?}",
        proc_state(pid)
    );
    assert!(
        reaper::drain(Instant::now() + Duration::from_secs(60)),
        "{what}: the reaper still owns {} children",
        reaper::in_flight()
    );

    // The socket is still ours, open, and reads the child's EOF.
    let mut rest = Vec::new();
    (&socket).read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "{what}: {rest:?}");
    let socket_fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
    let new = fds_new_since(&table_before);
    assert!(
        new.iter().all(|(fd, _)| *fd == socket_fd),
        "{what}: only the socket is left: new since: {new:?}"
    );
    drop(socket);
    let new = fds_new_since(&table_before);
    assert!(new.is_empty(), "{what}: fds leaked: {new:?}");
}

/// Socket activation: the socket path keeps working after the detach, and the directory is
/// removed once the detached child has exited and been reaped.
fn detach_activated() {
    if std::process::Command::new("python3")
        .arg("-c")
        .arg("")
        .status()
        .is_err()
    {
        assert!(
            std::env::var_os("CHILDGUARD_SKIP_PEERS").is_some_and(|v| v == "1"),
            "the detach test needs python3 (apt-get install python3), or set \
             CHILDGUARD_SKIP_PEERS=1"
        );
        eprintln!("SKIPPED detach_activated: python3 not installed (CHILDGUARD_SKIP_PEERS=1)");
        return;
    }
    // One line per connection: PING -> PONG, EXIT -> exit 0.
    let script = "import os, socket\n\
        s = socket.socket(fileno=3)\n\
        while True:\n\
        \x20   c, _ = s.accept()\n\
        \x20   line = c.makefile().readline()\n\
        \x20   if line.startswith('EXIT'):\n\
        \x20       os._exit(0)\n\
        \x20   c.sendall(b'PONG\\n')\n\
        \x20   c.close()\n";
    let rt = scratch("detach-activation");
    std::fs::create_dir(&rt).unwrap();
    let table_before = fd_table();
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-c", script]);
    let handle = ChildHandle::builder(cmd)
        .socket(SocketMode::Activation { name: None })
        .runtime_dir(&rt)
        .ladder("KILL:1s".parse().unwrap())
        // The spawn waits for python's first accept: the default 10 s ran out twice in 15 runs
        // with the flake hunt's CPU hogs and a bench beside it ("did not accept a connection
        // … within 10s"). A bound on a broken child only, as every wait here.
        .connect_timeout(Duration::from_secs(120))
        .spawn()
        .expect("spawning the activated python server");
    let pid = handle.id().unwrap();
    let path = handle.socket_path().unwrap().to_path_buf();
    let socket = handle.detach().unwrap().expect("our connection");
    assert_eq!(ask(&socket, "PING"), "PONG\n");
    // The path still takes connections: the directory stays while the child runs.
    let second = UnixStream::connect(&path).expect("connecting to the detached server's path");
    assert_eq!(ask(&second, "PING"), "PONG\n");
    drop(second);
    let third = UnixStream::connect(&path).unwrap();
    (&third).write_all(b"EXIT\n").unwrap();
    assert!(
        eventually(Duration::from_secs(60), || !our_children().contains(&pid)),
        "activated child {pid} not reaped after it exited: {:?}",
        proc_state(pid)
    );
    assert!(reaper::drain(Instant::now() + Duration::from_secs(60)));
    assert!(
        eventually(Duration::from_secs(60), || !path.parent().unwrap().exists()),
        "socket directory {} left after the detached child was reaped",
        path.display()
    );
    drop((socket, third));
    let new = fds_new_since(&table_before);
    assert!(new.is_empty(), "fds leaked: {new:?}");
    std::fs::remove_dir(&rt).unwrap();
}

#[test]
fn detached_child_runs_on_and_is_reaped_when_it_exits() {
    // Warm up the process-wide fds that a first spawn and a first hand-off of each mechanism
    // create and keep (the /proc/self/fd handle, the reaper thread's epoll and wake socket,
    // the portable mechanism's SIGCHLD notifier, and the reaper's own SIGCHLD registration,
    // a duplicate of its wake socket). Through a detach, which hands its job to the reaper
    // every time: a close (as here before) reaped a child that had already exited on its own
    // without a hand-off, so the registration was sometimes first made inside
    // `detach_one(true, …)` and counted there as a leak (1 run in ~40 under two CPU hogs).
    for portable in [false, true] {
        let handle = ChildHandle::builder(slowserver(&["--ignore", "HUP"]))
            .socket(SocketMode::Stdio)
            .ladder("HUP:1s,KILL:1s".parse().unwrap())
            .force_portable(portable)
            .spawn()
            .unwrap();
        let pid = read_ready(&handle).pid;
        let socket = handle.detach().unwrap().unwrap();
        (&socket).write_all(b"EXIT 0\n").unwrap();
        assert!(
            eventually(Duration::from_secs(60), || !our_children().contains(&pid)),
            "warm-up child {pid} (portable={portable}) not reaped after it exited"
        );
    }
    assert!(reaper::drain(Instant::now() + Duration::from_secs(60)));
    assert!(our_children().is_empty(), "{:?}", our_children());

    detach_one(false, false);
    detach_one(false, true);
    detach_one(true, false);

    detach_activated();

    // A socket-only handle: the socket comes back, nothing else happens.
    let (ours, theirs) = UnixStream::pair().unwrap();
    let back = ChildHandle::from_socket(ours).detach().unwrap().unwrap();
    (&back).write_all(b"x").unwrap();
    let mut byte = [0u8];
    (&theirs).read_exact(&mut byte).unwrap();
    assert_eq!(&byte, b"x");
    assert!(our_children().is_empty(), "{:?}", our_children());
}
