use super::*;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicUsize;

/// A connected pair: bytes written to the second make the first readable (a socketpair:
/// portable, unlike `pipe2`).
fn pipe() -> (UnixStream, UnixStream) {
    UnixStream::pair().unwrap()
}

#[test]
fn a_wait_on_nothing_ends_at_its_deadline_not_before() {
    let deadline = Instant::now() + Duration::from_millis(30);
    assert_eq!(Wait::until(deadline).run().unwrap(), Woke::Deadline);
    assert!(Instant::now() >= deadline);
}

#[test]
fn a_readable_fd_ends_the_wait_and_is_named() {
    for n in [1usize, 2, 3, 6] {
        let pipes: Vec<_> = (0..n).map(|_| pipe()).collect();
        let last = n - 1;
        (&pipes[last].1).write_all(b"x").unwrap();
        let fds: Vec<BorrowedFd<'_>> = pipes.iter().map(|(r, _)| r.as_fd()).collect();
        let start = Instant::now();
        let woke = Wait::until(Instant::now() + Duration::from_secs(60))
            .fds(&fds)
            .run()
            .unwrap();
        let Woke::Readable(readable) = woke else {
            panic!("{n} fds: woke by {woke:?}, not the readable pipe")
        };
        assert!(readable.contains(last), "{n} fds: {readable:?}");
        assert!(
            (0..last).all(|i| !readable.contains(i)),
            "{n} fds: {readable:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(30));
    }
}

#[test]
fn a_pipe_written_by_another_thread_wakes_the_wait() {
    let (r, mut w) = pipe();
    let fds = [r.as_fd()];
    std::thread::scope(|s| {
        s.spawn(move || w.write_all(b"x").unwrap());
        let woke = Wait::until(Instant::now() + Duration::from_secs(60))
            .fds(&fds)
            .run()
            .unwrap();
        assert_eq!(woke, Woke::Readable(Readable(1)));
    });
}

#[test]
fn an_interrupt_flag_set_by_another_thread_ends_the_wait_with_its_error() {
    for with_fd in [false, true] {
        let (r, _w) = pipe();
        let fds = [r.as_fd()];
        let stop = Arc::new(AtomicBool::new(false));
        let interrupt = Interrupt::flag(stop.clone());
        let start = Instant::now();
        let err = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                stop.store(true, Ordering::SeqCst);
            });
            let wait =
                Wait::until(Instant::now() + Duration::from_secs(60)).interrupt(Some(&interrupt));
            let wait = if with_fd { wait.fds(&fds) } else { wait };
            wait.run().expect_err("the wait ran to its deadline")
        });
        assert!(is_interrupt(&err), "with_fd={with_fd}: {err}");
        assert_eq!(err.kind(), io::ErrorKind::Interrupted);
        assert!(err.to_string().contains("caller's flag"), "{err}");
        assert!(interrupt_source(&err).is_some());
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "with_fd={with_fd}"
        );
    }
}

#[test]
fn the_check_is_called_repeatedly_during_a_long_wait_and_an_ok_lets_it_go_on() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let interrupt = Interrupt::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    let start = Instant::now();
    let deadline = start + Duration::from_millis(500);
    let woke = Wait::until(deadline)
        .interrupt(Some(&interrupt))
        .run()
        .unwrap();
    assert_eq!(woke, Woke::Deadline);
    assert!(Instant::now() >= deadline);
    // Nominally 25 calls (one per 20 ms); a loaded machine may delay some, never all.
    let n = calls.load(Ordering::SeqCst);
    let most = (start.elapsed().as_millis() / INTERRUPT_CHECK_EVERY.as_millis() + 2) as usize;
    assert!(
        (3..=most).contains(&n),
        "{n} checks in {:?}",
        start.elapsed()
    );
}

#[test]
fn many_short_waits_share_one_check_per_period() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let interrupt = Interrupt::new(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(())
    });
    let start = Instant::now();
    for _ in 0..200 {
        Wait::until(Instant::now() + Duration::from_micros(100))
            .interrupt(Some(&interrupt))
            .run()
            .unwrap();
    }
    let n = calls.load(Ordering::SeqCst);
    let most = (start.elapsed().as_millis() / INTERRUPT_CHECK_EVERY.as_millis() + 2) as usize;
    assert!(
        n >= 1 && n <= most,
        "{n} checks for 200 waits in {:?}",
        start.elapsed()
    );
}

#[test]
fn a_check_that_fails_at_once_ends_the_wait_before_any_poll() {
    let interrupt = Interrupt::new(|| Err(io::Error::other("stop now")));
    let (r, _w) = pipe();
    let fds = [r.as_fd()];
    let err = Wait::until(Instant::now() + Duration::from_secs(60))
        .fds(&fds)
        .interrupt(Some(&interrupt))
        .run()
        .unwrap_err();
    assert!(is_interrupt(&err));
    assert_eq!(interrupt_source(&err).unwrap().to_string(), "stop now");
    assert!(!is_interrupt(&io::Error::other("plain")));
}

#[test]
fn a_sigchld_after_the_generation_read_ends_the_wait() {
    for with_fd in [false, true] {
        let notifier = crate::core::sigchld::notifier().unwrap();
        let seen = notifier.generation();
        // `true` exits at once: its SIGCHLD moves the generation past `seen`.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let (r, _w) = pipe();
        let fds = [r.as_fd()];
        let wait = Wait::until(Instant::now() + Duration::from_secs(60)).sigchld(Some(seen));
        let wait = if with_fd { wait.fds(&fds) } else { wait };
        let start = Instant::now();
        assert_eq!(wait.run().unwrap(), Woke::Sigchld, "with_fd={with_fd}");
        assert!(start.elapsed() < Duration::from_secs(30));
        child.wait().unwrap();
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_pidfd_wakes_the_wait_when_its_child_exits() {
    let mut child = std::process::Command::new("sleep")
        .arg("0.05")
        .spawn()
        .unwrap();
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
    let fds = [fd.as_fd()];
    let woke = Wait::until(Instant::now() + Duration::from_secs(60))
        .fds(&fds)
        .run()
        .unwrap();
    assert_eq!(woke, Woke::Readable(Readable(1)));
    child.wait().unwrap();
}
