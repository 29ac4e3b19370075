//! Unit tests of the notify socket's parsing and reading.

use super::*;

fn socket_for(child: u32) -> NotifySocket {
    let (fd, _) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    let access = Access {
        rule: NotifyAccess::All,
        child,
        cgroup: None,
    };
    NotifySocket::new(fd, None, access, Duration::ZERO)
}

fn send(s: &mut NotifySocket, data: &[u8]) -> Option<Instant> {
    s.accept(s.access.child, data, data.len(), Instant::now())
}

#[test]
fn well_formed_messages_are_acted_on() {
    let me = std::process::id();
    let mut s = socket_for(me);
    assert_eq!(send(&mut s, b"STATUS=starting\nMAINPID=1\n"), None);
    assert_eq!(s.status.as_deref(), Some("starting"));
    assert!(!s.ready);
    assert!(send(&mut s, b"READY=1\nSTATUS=up").is_none());
    assert!(s.ready && s.status.as_deref() == Some("up"));
    let before = Instant::now();
    let until = send(&mut s, b"EXTEND_TIMEOUT_USEC=2000000").unwrap();
    assert!(until >= before + Duration::from_secs(2));
    send(&mut s, b"ERRNO=2");
    assert_eq!(s.errno, Some(2));
    assert!(s.ignored.is_empty(), "{:?}", s.ignored);
}

#[test]
fn bad_input_is_ignored_and_noted_never_a_panic() {
    let me = std::process::id();
    let mut s = socket_for(me);
    send(&mut s, b"READY");
    send(&mut s, b"\xff\xfe=1");
    send(&mut s, b"ERRNO=-3\nERRNO=x");
    send(
        &mut s,
        b"EXTEND_TIMEOUT_USEC=-1\nEXTEND_TIMEOUT_USEC=99999999999999999999",
    );
    // Truncated by the receive buffer: the sent length decides.
    s.accept(me, &[b'x'; MAX_DATAGRAM], MAX_DATAGRAM + 1, Instant::now());
    assert!(!s.ready, "no bad datagram may make it ready");
    assert_eq!(s.errno, None);
    assert_eq!(s.ignored_count, 7, "{:?}", s.ignored);
    assert!(
        s.ignored[6].contains(&format!("of {} bytes, longer than", MAX_DATAGRAM + 1)),
        "{:?}",
        s.ignored
    );
    s.ignore("filler 1".into());
    s.ignore("filler 2".into());
    // An absurd but well-formed extension saturates instead of overflowing.
    let until = send(
        &mut s,
        &format!("EXTEND_TIMEOUT_USEC={}", u64::MAX).into_bytes(),
    );
    assert!(until.is_some_and(|u| u > Instant::now() + Duration::from_secs(3600)));
    let report = s.finish(Instant::now());
    assert_eq!(report.ignored.len(), NOTED_MAX + 1, "{:?}", report.ignored);
    assert_eq!(report.ignored[NOTED_MAX], "1 more ignored");
}

#[test]
fn datagrams_are_read_with_their_sender_and_judged() {
    // A real socket pair: the kernel attaches our pid (and pidfd) to what we send.
    let (ours, theirs) = rustix::net::socketpair(
        AddressFamily::UNIX,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    rustix::net::sockopt::set_socket_passcred(&ours, true).unwrap();
    peer::set_pass_pidfd(ours.as_fd()).expect("SO_PASSPIDFD (Linux 6.5)");
    let me = std::process::id();
    let parent = crate::process::group::parent_of(me).unwrap();
    let stranger = Access {
        rule: NotifyAccess::All,
        child: parent,
        cgroup: None,
    };
    let mut s = NotifySocket::new(ours, None, stranger, Duration::ZERO);
    rustix::net::send(&theirs, b"READY=1", rustix::net::SendFlags::empty()).unwrap();
    s.receive();
    assert!(s.ready, "we descend from our parent: {:?}", s.ignored);
    s.access.child = u32::MAX;
    s.ready = false;
    rustix::net::send(&theirs, b"READY=1", rustix::net::SendFlags::empty()).unwrap();
    s.receive();
    assert!(!s.ready);
    assert!(
        s.ignored[0].starts_with(&format!("a datagram from pid {me}, not a descendant")),
        "{:?}",
        s.ignored
    );
}
