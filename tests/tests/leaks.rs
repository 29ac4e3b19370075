//! Failed spawns leave nothing behind. One test function, so no other test in this process
//! opens fds or spawns children while we count.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use childguard::{ChildHandle, ErrorKind, SocketMode};
use childguard_tests::*;

fn spawn_err(cmd: Command) -> childguard::Error {
    ChildHandle::builder(cmd)
        .socket(SocketMode::Stdio)
        .process_group(true)
        .spawn()
        .unwrap_err()
}

#[test]
fn failed_spawns_leak_no_fd_and_no_zombie() {
    // Warm up lazily created process-wide state (fd_count already leaves out childguard's
    // /proc/self/fd handle, the one process-wide fd a plain spawn creates).
    // Graces long enough for a slow machine: a child that outlived its ladder would be handed
    // to the reaper, whose thread and fds would then be counted as a leak.
    let (h, _) = spawn_slow(&[], "EOF:10s,KILL:10s", false);
    let _ = h.close().unwrap();
    let before = fd_count();

    let err = spawn_err(Command::new("/nonexistent/childguard-no-such-program"));
    assert_eq!(err.kind(), ErrorKind::Spawn);
    assert_eq!(err.io_kind(), std::io::ErrorKind::NotFound);
    let text = err.to_string();
    assert!(
        text.contains("spawning") && text.contains("childguard-no-such-program"),
        "{text}"
    );

    let dir = scratch("noexec");
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("not-executable");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = spawn_err(Command::new(&script));
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
    assert!(err.to_string().contains("not-executable"), "{err}");
    let as_io: std::io::Error = err.into();
    assert_eq!(as_io.kind(), std::io::ErrorKind::PermissionDenied);
    std::fs::remove_dir_all(&dir).unwrap();

    assert_eq!(fd_count(), before, "a failed spawn leaked an fd");
    // std reaps a child whose exec failed; nothing of ours may be left in /proc.
    let ours = our_children();
    assert!(ours.is_empty(), "children left behind: {ours:?}");

    // A successful spawn + close returns the fd table to where it was, too.
    let (h, ready) = spawn_slow(
        &["--ignore", "HUP", "--ignore-eof"],
        "HUP:10ms,KILL:10s",
        true,
    );
    assert!(fd_count() > before, "the handle holds its socket and pidfd");
    let _ = h.close().unwrap();
    assert_eq!(fd_count(), before, "close leaked an fd");
    assert_eq!(proc_state(ready.pid), None);
}
