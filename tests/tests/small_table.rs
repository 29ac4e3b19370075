//! Our spawn from a small fd table (`spawn/small_table.rs`): a process holding many fds
//! spawns from a thread whose table holds only what the child needs, and the child gets
//! exactly what the Command says — piped and inherited stdio (as it is at the spawn, not as
//! it was when the thread started), its cgroup at birth, a failed exec's error.
//!
//! One test, in steps: whether the thread exists depends on what this process did before, so
//! the steps run in order in a process of their own (this test binary).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Command, Stdio};

use childguard::{ChildHandle, Containment, ErrorKind};
use childguard_tests::{cgroups, our_children};

/// The threads of this process named `name` (as `comm` shows it: its first 15 bytes).
fn threads_named(name: &str) -> usize {
    let name = &name[..name.len().min(15)];
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .count()
}

/// Runs `cmd` on our spawn and returns what it wrote on stdout, checking it exited 0.
fn output_of(cmd: Command, containment: Containment) -> (String, childguard::CloseReport) {
    let mut handle = ChildHandle::builder(cmd)
        .own_spawn(true)
        .contain(containment)
        .spawn()
        .expect("spawn");
    let mut out = String::new();
    handle
        .stdout()
        .expect("stdout piped")
        .read_to_string(&mut out)
        .unwrap();
    let report = handle.close().expect("close");
    assert!(
        report.notes.iter().all(|n| !n.contains("std's path")),
        "spawned on std's path: {report:?}"
    );
    (out, report)
}

#[test]
fn a_process_holding_many_fds_spawns_from_a_small_table_and_the_child_gets_its_command() {
    assert!(
        std::env::var_os("CHILDGUARD_SPAWN").is_none_or(|v| v == "clone3"),
        "tests/small_table.rs tests our own spawn: run it without CHILDGUARD_SPAWN=std"
    );
    const THREAD: &str = "childguard-small-table";

    // 1. Few fds: the spawn stays on this thread.
    let mut cmd = Command::new("echo");
    cmd.arg("few").stdout(Stdio::piped());
    let (out, _) = output_of(cmd, Containment::None);
    assert_eq!(out, "few\n");
    assert_eq!(threads_named(THREAD), 0, "a thread for a small table");

    // 2. Many fds (close-on-exec, as a supervisor's are): the spawn is made from the thread,
    //    and the child has its fds 0–2 and nothing else of ours.
    let held: Vec<OwnedFd> = (0..600)
        .map(|_| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
        .collect();
    assert!(held.last().unwrap().as_raw_fd() >= 512, "{held:?}");
    let mut cmd = Command::new("ls");
    cmd.arg("/proc/self/fd").stdout(Stdio::piped());
    let (out, _) = output_of(cmd, Containment::None);
    assert_eq!(threads_named(THREAD), 1, "no small-table thread");
    let fds: Vec<&str> = out.lines().collect();
    // 0–2, and the directory `ls` reads.
    assert_eq!(fds, ["0", "1", "2", "3"], "the child's fds");

    // 3. Inherited stdin, redirected here after the thread started: the child reads the new
    //    one (a pipe), not the thread's copy of the old.
    let (read, mut write) = std::io::pipe().unwrap();
    // SAFETY: dup/dup2 on this process's fd 0, restored below; no other test in this binary
    // reads stdin.
    let saved = unsafe { libc::dup(0) };
    assert!(saved >= 0);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::dup2(read.as_raw_fd(), 0) }, 0);
    drop(read);
    write.write_all(b"through the new stdin\n").unwrap();
    drop(write);
    let mut cmd = Command::new("cat");
    cmd.stdin(Stdio::inherit()).stdout(Stdio::piped());
    let (out, _) = output_of(cmd, Containment::None);
    // SAFETY: puts back the saved fd 0 and closes the copy.
    unsafe {
        libc::dup2(saved, 0);
        libc::close(saved);
    }
    assert_eq!(out, "through the new stdin\n");

    // 4. Contained: born in its cgroup (the cgroup's fd went to the thread too).
    let parent = cgroups::scratch_parent("small-table");
    let mut cmd = Command::new("cat");
    cmd.arg("/proc/self/cgroup").stdout(Stdio::piped());
    let mut handle = ChildHandle::builder(cmd)
        .own_spawn(true)
        .contain(Containment::Cgroup)
        .cgroup_parent(&parent)
        .spawn()
        .expect("contained spawn");
    let mut out = String::new();
    handle.stdout().unwrap().read_to_string(&mut out).unwrap();
    let report = handle.close().expect("close");
    assert!(
        report.notes.iter().all(|n| !n.contains("std's path")),
        "{report:?}"
    );
    let v2 = out
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or("");
    let parent_name = parent.file_name().unwrap().to_str().unwrap();
    assert!(
        v2.contains(&format!("/{parent_name}/childguard-")),
        "not born in its cgroup under {parent:?}: {out}"
    );
    std::fs::remove_dir(&parent).expect("the scratch parent is left empty");

    // 5. A step that fails in the child (its current_dir is missing): the error names it, as
    //    on this thread, and nothing is left behind.
    let before = our_children();
    let mut cmd = Command::new("true");
    cmd.current_dir("/nonexistent-cg-dir");
    let failed = ChildHandle::builder(cmd)
        .own_spawn(true)
        .spawn()
        .expect_err("a missing current_dir");
    assert_eq!(failed.kind(), ErrorKind::Spawn, "{failed}");
    assert!(failed.to_string().contains("chdir"), "{failed}");
    let after: Vec<u32> = our_children()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert!(after.is_empty(), "children left: {after:?}");
    assert_eq!(threads_named(THREAD), 1, "one thread, for the process");
    drop(held);
}
