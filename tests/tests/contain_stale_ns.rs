//! The cgroups of a dead pid namespace (issue 34 item 3). `childguard init` SIGKILLed as PID 1
//! of a pid namespace takes the whole namespace with it (the kernel kills every process in it),
//! but the cgroup it made for CMD, `childguard-1-0-t…-ns<inode>`, stayed in the host's
//! hierarchy for ever: the stale sweep could not judge a pid of another namespace. Now the
//! next contained spawn under that parent removes it, as it removes any cgroup named for a
//! pid namespace no process is in; one named for a namespace that is alive is left alone, and
//! a sweep that cannot see every process (not root) takes none.
//!
//! A process sweeps a parent once (on its first contained spawn there), so each sweep here is
//! a fresh process: `cg-supervisor --contain --cgroup-parent DIR --close`, which prints the
//! sweep's notes (`NOTE …`).

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use childguard_tests::cgroups::{force_remove, scratch_parent, serial, tree};
use childguard_tests::init::{children_of, pid_namespaces};
use childguard_tests::{bin, eventually, exited_within, pidfd};

/// The initial pid namespace's inode (`PROC_PID_INIT_INO`): the sweep judges other pid
/// namespaces only from there, as root.
const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

const LONG: Duration = Duration::from_secs(30);

/// The inode of `pid`'s pid namespace (`/proc/PID/ns/pid` → `pid:[INODE]`).
fn pid_namespace(pid: &str) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    link.to_str()?
        .strip_prefix("pid:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Whether any process — a zombie too: the sweep counts its namespace as alive until it is
/// reaped — is in pid namespace `ns`.
fn namespace_has_a_process(ns: u64) -> bool {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .any(|pid| pid_namespace(&pid.to_string()) == Some(ns))
}

/// This test runs only as root in the initial pid namespace (where the sweep can judge).
fn require_root_in_the_initial_pid_namespace(test: &str) {
    assert!(
        rustix::process::geteuid().is_root()
            && pid_namespace("self") == Some(INITIAL_PID_NAMESPACE),
        "{test}: precondition: run as root in the initial pid namespace (CI does)"
    );
}

/// `program args…` started in the cgroup `dir` (a shell moves itself there, then execs).
fn in_cgroup<S: AsRef<OsStr>>(dir: &Path, program: impl AsRef<OsStr>, args: &[S]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
        .arg("sh")
        .arg(dir)
        .arg(program)
        .args(args)
        .stdin(Stdio::null());
    cmd
}

/// The arguments of a sweep under `parent`: `cg-supervisor` containing one server there.
fn sweep_args(parent: &Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec![bin("cg-slowserver").into()];
    args.extend(["--contain", "--cgroup-parent"].map(Into::into));
    args.push(parent.into());
    args.extend(["--close", "--"].map(Into::into));
    args
}

/// A fresh process's first contained spawn under `parent` (so its sweep), run to the end.
fn sweep(parent: &Path) -> Output {
    Command::new(bin("cg-supervisor"))
        .args(sweep_args(parent))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "status {}; stdout: {}; stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `NOTE` lines of a sweep's output.
fn notes(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("NOTE "))
        .map(str::to_owned)
        .collect()
}

/// `unshare --pid --fork ARGS…` (placed in `cgroup`, if given), and the first process of the
/// new namespace (its PID 1) once it runs there: (unshare, its pid, the namespace's inode).
fn new_namespace<S: AsRef<OsStr>>(cgroup: Option<&Path>, args: &[S]) -> (Child, u32, u64) {
    let mut argv: Vec<&OsStr> = vec!["--pid".as_ref(), "--fork".as_ref()];
    argv.extend(args.iter().map(AsRef::as_ref));
    let mut cmd = match cgroup {
        Some(dir) => in_cgroup(dir, "unshare", &argv),
        None => {
            let mut cmd = Command::new("unshare");
            cmd.args(&argv).stdin(Stdio::null());
            cmd
        }
    };
    let mut unshare = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ours = pid_namespace("self");
    let mut found = None;
    let ran = eventually(LONG, || {
        found = children_of(unshare.id()).into_iter().find_map(|pid| {
            let ns = pid_namespace(&pid.to_string())?;
            (Some(ns) != ours).then_some((pid, ns))
        });
        found.is_some()
    });
    if !ran {
        let _ = unshare.kill();
        let _ = unshare.wait();
        panic!("unshare {argv:?}: no process in a new pid namespace within {LONG:?}");
    }
    let (pid1, ns) = found.unwrap();
    (unshare, pid1, ns)
}

/// The cgroup directories under `parent` named for pid namespace `ns`.
fn named_for(parent: &Path, ns: u64) -> Vec<PathBuf> {
    let suffix = format!("-ns{ns}");
    tree(parent)
        .into_iter()
        .filter(|d| {
            d.file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|n| n.starts_with("childguard-") && n.ends_with(&suffix))
        })
        .collect()
}

/// Whether the cgroup `dir` has a process (`cgroup.events`: `populated 1`).
fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .is_ok_and(|e| e.lines().any(|l| l == "populated 1"))
}

fn sigkill(pin: &OwnedFd) {
    rustix::process::pidfd_send_signal(pin, rustix::process::Signal::KILL).unwrap();
}

#[test]
fn the_cmd_cgroup_of_an_init_sigkilled_with_its_pid_namespace_is_removed_by_the_next_sweep() {
    let test = "the_cmd_cgroup_of_an_init_sigkilled_with_its_pid_namespace_is_removed_…";
    if !pid_namespaces(test) {
        return;
    }
    require_root_in_the_initial_pid_namespace(test);
    let _serial = serial();
    let parent = scratch_parent("nsgone");
    // `childguard init -- sleep 1000` as PID 1 of a new pid namespace, in `parent`: CMD gets
    // `parent/childguard-1-0-t…-ns<inode>`.
    let init_args: Vec<std::ffi::OsString> = vec![
        "--mount-proc".into(),
        bin("cg-childguard").into(),
        "init".into(),
        "--".into(),
        "sleep".into(),
        "1000".into(),
    ];
    let (mut unshare, init, ns) = new_namespace(Some(&parent), &init_args);
    let init_pin = pidfd(init);
    let unshare_pin = pidfd(unshare.id());
    let mut cmd_cgroup = Vec::new();
    let contained = eventually(LONG, || {
        cmd_cgroup = named_for(&parent, ns);
        cmd_cgroup.len() == 1 && populated(&cmd_cgroup[0])
    });
    // SIGKILL the init: the kernel kills the namespace's every process, `unshare` exits.
    sigkill(&init_pin);
    let init_gone = exited_within(&init_pin, LONG);
    let unshare_gone = exited_within(&unshare_pin, LONG);
    let _ = unshare.wait();
    let ns_empty = eventually(LONG, || !namespace_has_a_process(ns));
    let left_by_init = named_for(&parent, ns);
    let out = sweep(&parent);
    let left = named_for(&parent, ns);
    let rest = tree(&parent);
    assert!(force_remove(&parent), "{} left", parent.display());

    assert!(contained, "init's CMD never ran in a cgroup {cmd_cgroup:?}");
    assert!(
        init_gone && unshare_gone,
        "init {init_gone}, unshare {unshare_gone}"
    );
    assert!(ns_empty, "pid namespace {ns} still has processes");
    assert_eq!(
        left_by_init, cmd_cgroup,
        "precondition: the SIGKILLed init leaves CMD's cgroup (if init now removes it some \
         other way, this test no longer tests the sweep)"
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(left.is_empty(), "{left:?} left: {}", text(&out));
    assert!(rest.is_empty(), "{rest:?} left: {}", text(&out));
    let dir = cmd_cgroup[0].display().to_string();
    assert!(
        notes(&out).iter().any(|n| n.starts_with(&format!(
            "removed stale cgroup {dir} of dead supervisor 1 of pid namespace {ns}"
        ))),
        "no note for {dir}: {}",
        text(&out)
    );
}

#[test]
fn a_cgroup_named_for_a_live_pid_namespace_is_left_alone() {
    let test = "a_cgroup_named_for_a_live_pid_namespace_is_left_alone";
    if !pid_namespaces(test) {
        return;
    }
    require_root_in_the_initial_pid_namespace(test);
    let _serial = serial();
    let parent = scratch_parent("nslive");
    // A live pid namespace (its PID 1 a sleep), and a cgroup named for it as `init` would
    // name CMD's; beside it, the control: one named for a namespace no process is in (inode
    // 1 is never a namespace's), which the same sweep must take.
    let (mut unshare, sleeper, ns) = new_namespace(None, &["--kill-child", "sleep", "1000"]);
    let sleeper_pin = pidfd(sleeper);
    let live = parent.join(format!("childguard-1-0-t1-ns{ns}"));
    let gone = parent.join("childguard-1-0-t1-ns1");
    for dir in [&live, &gone] {
        std::fs::create_dir(dir).unwrap();
    }
    let out = sweep(&parent);
    let (live_kept, gone_kept) = (live.exists(), gone.exists());
    let sleeper_alive = !exited_within(&sleeper_pin, Duration::ZERO);
    let _ = unshare.kill();
    let _ = unshare.wait();
    assert!(force_remove(&parent), "{} left", parent.display());

    assert!(out.status.success(), "{}", text(&out));
    assert!(
        live_kept,
        "the cgroup of live namespace {ns} was removed: {}",
        text(&out)
    );
    assert!(sleeper_alive, "namespace {ns}'s PID 1 died");
    assert!(
        !gone_kept,
        "the control (namespace 1) was not removed: {}",
        text(&out)
    );
}

/// An unprivileged user: `nobody`.
fn nobody() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with("nobody:"))
        .expect("this test needs the user nobody in /etc/passwd");
    let fields: Vec<&str> = line.split(':').collect();
    (fields[2].parse().unwrap(), fields[3].parse().unwrap())
}

/// `dir` and every file in it given to `user` (the cgroup delegated whole).
fn give(dir: &Path, (uid, gid): (u32, u32)) {
    std::os::unix::fs::chown(dir, Some(uid), Some(gid)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            std::os::unix::fs::chown(entry.path(), Some(uid), Some(gid)).unwrap();
        }
    }
}

#[test]
fn a_sweep_that_cannot_name_a_process_namespace_takes_no_cgroup_of_another_pid_namespace() {
    let test = "a_sweep_that_cannot_name_a_process_namespace_takes_no_cgroup_of_another_pid_…";
    if !pid_namespaces(test) {
        return;
    }
    require_root_in_the_initial_pid_namespace(test);
    let setpriv = Path::new("/usr/bin/setpriv");
    assert!(
        setpriv.is_file(),
        "{test}: precondition: setpriv (apt-get install util-linux)"
    );
    let _serial = serial();
    let user = nobody();
    // A parent delegated to nobody, who sweeps it from inside, while root runs a process in
    // a pid namespace of its own: nobody may not read that process's `ns/pid` (EACCES), and
    // its `NSpid:` says it is in another namespace — which might be any, so the
    // namespace-1 cgroup (which root's sweep takes) must stay. The control: a cgroup of a dead
    // supervisor of *our* namespace, also given to nobody, which the same sweep takes (so it
    // did run).
    let (mut unshare, _, _) = new_namespace(None, &["--kill-child", "sleep", "1000"]);
    let parent = scratch_parent("nsdoubt");
    let gone_ns = parent.join("childguard-1-0-t1-ns1");
    let mut reaped = Command::new("true").spawn().unwrap();
    let dead_pid = reaped.id();
    reaped.wait().unwrap();
    let ours = pid_namespace("self").unwrap();
    let dead = parent.join(format!("childguard-{dead_pid}-0-t1-ns{ours}"));
    for dir in [&gone_ns, &dead] {
        std::fs::create_dir(dir).unwrap();
        give(dir, user);
    }
    give(&parent, user);
    let mut args: Vec<std::ffi::OsString> = vec![
        format!("--reuid={}", user.0).into(),
        format!("--regid={}", user.1).into(),
        "--clear-groups".into(),
        bin("cg-supervisor").into(),
    ];
    args.extend(sweep_args(&parent));
    let out = in_cgroup(&parent, setpriv, &args).output().unwrap();
    let (gone_ns_kept, dead_kept) = (gone_ns.exists(), dead.exists());
    let _ = unshare.kill();
    let _ = unshare.wait();
    assert!(force_remove(&parent), "{} left", parent.display());

    assert!(out.status.success(), "{}", text(&out));
    assert!(!dead_kept, "the control was not removed: {}", text(&out));
    assert!(
        gone_ns_kept,
        "a non-root sweep removed a cgroup of another pid namespace: {}",
        text(&out)
    );
}
