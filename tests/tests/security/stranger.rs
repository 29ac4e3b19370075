//! What held before issue 49, kept with a test: another local user cannot send to root's
//! notify socket. The kernel refuses the `sendto` (the directory 0700, or 0711 with the socket
//! 0600 and someone else's under `notify_owner`); the owner of a given socket reaches it, and
//! is still heard only if it is in the child's tree (`NotifyAccess`).

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use childguard::{ChildHandle, NotifyReport, Ready};

use super::attack::{attacker, one_at_a_time, Lab, User};

/// `cg-notify STATUS=…` as `user`, sent to `socket` from outside the child's tree.
fn send_as(lab: &Lab, user: User, socket: &str, text: &str) -> Output {
    Command::new(lab.program("cg-notify"))
        .arg(text)
        .env("NOTIFY_SOCKET", socket)
        .uid(user.uid)
        .gid(user.gid)
        .output()
        .expect("cg-notify")
}

/// A notify server that is ready, and the socket path it was given.
fn ready_server(lab: &Lab, owner: Option<User>) -> (ChildHandle, String) {
    let log = lab.root.join("sockets.log");
    let mut builder = ChildHandle::builder(lab.server(&log))
        .ready(Ready::Notify)
        .ready_timeout(Duration::from_secs(20))
        .ladder(childguard_tests::ladder("TERM:2s,KILL:2s"));
    if let Some(user) = owner {
        builder = builder.notify_owner(user.uid, user.gid);
    }
    let handle = builder.spawn().expect("the notify server must get ready");
    let socket = std::fs::read_to_string(&log).unwrap().trim().to_owned();
    assert!(Path::new(&socket).is_absolute(), "{socket:?}");
    (handle, socket)
}

fn notes(handle: ChildHandle) -> NotifyReport {
    let report = handle.close().unwrap();
    report.notify.expect("a notify report")
}

fn refused(out: &Output, who: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("Permission denied"),
        "{who}'s send must be refused by the kernel: {:?} {err}",
        out.status
    );
}

#[test]
fn another_user_cannot_send_to_roots_notify_socket() {
    let Some(user) = attacker("another_user_cannot_send_to_roots_notify_socket") else {
        return;
    };
    let _one = one_at_a_time();
    let lab = Lab::new("stranger", user);
    let (handle, socket) = ready_server(&lab, None);
    refused(
        &send_as(&lab, user, &socket, "STATUS=stranger"),
        "another user",
    );
    let notify = notes(handle);
    assert_ne!(notify.status.as_deref(), Some("stranger"), "{notify:?}");
    assert!(notify.ignored.is_empty(), "nothing arrived: {notify:?}");
}

#[test]
fn under_notify_owner_only_the_owner_reaches_the_socket_and_is_still_judged() {
    let Some(owner) =
        attacker("under_notify_owner_only_the_owner_reaches_the_socket_and_is_still_judged")
    else {
        return;
    };
    let _one = one_at_a_time();
    // A third user, neither root nor the owner: `nobody`.
    let third = User {
        uid: 65534,
        gid: 65534,
    };
    assert_ne!(owner.uid, third.uid);
    let lab = Lab::new("owner", owner);
    let (handle, socket) = ready_server(&lab, Some(owner));
    refused(
        &send_as(&lab, third, &socket, "STATUS=third"),
        "a third user",
    );
    // The owner reaches it (the socket is theirs), but from outside the child's tree it is
    // ignored and noted, never acted on.
    let out = send_as(&lab, owner, &socket, "STATUS=owner-outside");
    assert!(
        out.status.success(),
        "the owner must reach its socket: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let notify = notes(handle);
    assert_eq!(notify.status, None, "{notify:?}");
    assert_eq!(
        notify.ignored.len(),
        1,
        "the owner's datagram, noted: {notify:?}"
    );
}
