//! Unit tests of the wrappers that can be checked in-process.

use std::time::{Duration, Instant};

use super::*;

#[test]
fn cpu_time_of_a_process_grows_while_it_computes() {
    let me = std::process::id();
    let before = process_cpu_time(me).unwrap();
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut x = 0u64;
    let mut now = before;
    while now < before + Duration::from_millis(10) && Instant::now() < give_up {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        now = process_cpu_time(me).unwrap();
    }
    assert!(
        now >= before + Duration::from_millis(10),
        "10 s of spinning did not show on our CPU clock: {before:?} -> {now:?}"
    );
}

#[test]
fn cpu_time_of_a_busy_child_is_readable_and_grows() {
    let mut child = std::process::Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let first = process_cpu_time(child.id());
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut last = first.as_ref().ok().copied();
    while last.is_some_and(|t| t < Duration::from_millis(20)) && Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(5));
        last = process_cpu_time(child.id()).ok();
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let first = first.unwrap();
    let last = last.expect("reading the child's CPU clock failed");
    assert!(last >= Duration::from_millis(20), "{first:?} -> {last:?}");
}

#[test]
fn cpu_time_of_no_process_is_an_error() {
    assert_eq!(
        process_cpu_time(0).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
    // Pid numbers above pid_max (at most 2^22) never name a process.
    let err = process_cpu_time((1 << 22) + 1).unwrap_err();
    assert!(
        matches!(err.raw_os_error(), Some(libc::ESRCH) | Some(libc::EINVAL)),
        "{err}"
    );
}
