//! `childguard init` against what tini's own `test/run_inner_tests.py` checks (krallin/tini,
//! HEAD; written here from what each case checks, no text of tini's tests copied), each case
//! under both names — `childguard init` and a symlink named `tini` — and, where tini's test
//! runs in several set-ups (a subreaper proxy, `-s`, `TINI_SUBREAPER`), in each, plus as PID 1
//! of a PID namespace. The stop beyond tini (budget, sweep, ready file) is in `stop.rs`.

use std::process::{Command, Stdio};
use std::time::Duration;

use childguard_tests::init::*;
use childguard_tests::*;

use super::err;

/// The set-ups in which tini's reaping and signal tests run: not PID 1 but a subreaper (by a
/// proxy that execs init, by `-s`, by each environment variable), and PID 1.
#[derive(Debug, Clone, Copy)]
enum Setup {
    Proxy,
    Flag,
    TiniEnv,
    OurEnv,
    Pid1,
}

const SETUPS: [Setup; 5] = [
    Setup::Proxy,
    Setup::Flag,
    Setup::TiniEnv,
    Setup::OurEnv,
    Setup::Pid1,
];

/// init with `args` then `cmd`, in `setup` (`None` when PID namespaces are skipped).
fn in_setup(name: Name, setup: Setup, args: &[&str], cmd: &[&str]) -> Option<Command> {
    let mut all: Vec<&str> = Vec::new();
    if let Setup::Flag = setup {
        all.push("-s");
    }
    all.extend(args);
    all.push("--");
    all.extend(cmd);
    Some(match setup {
        Setup::Proxy => {
            let inner = name.command(&all);
            let mut c = Command::new(bin("cg-sigconf"));
            c.args(["--subreaper", "--"])
                .arg(inner.get_program())
                .args(inner.get_args())
                .env_remove("TINI_SUBREAPER")
                .env_remove("CHILDGUARD_SUBREAPER")
                .stdin(Stdio::null());
            c
        }
        Setup::Flag => name.command(&all),
        Setup::TiniEnv => {
            let mut c = name.command(&all);
            c.env("TINI_SUBREAPER", "");
            c
        }
        Setup::OurEnv => {
            let mut c = name.command(&all);
            c.env("CHILDGUARD_SUBREAPER", "1");
            c
        }
        Setup::Pid1 => {
            if !pid_namespaces("init") {
                return None;
            }
            name.as_pid1(&all)
        }
    })
}

/// The pid of init itself for a spawned `setup` (under `unshare` for PID 1).
fn init_pid(setup: Setup, child: &std::process::Child) -> u32 {
    match setup {
        Setup::Pid1 => init_under_unshare(child),
        _ => child.id(),
    }
}

// ---- exit codes ----

/// Every code 0–255 with `-e CODE` (mapped to 0), and with `-e` for every *other* code (kept),
/// the latter with `POSIXLY_CORRECT` and no `--`, as tini's test runs it.
#[test]
fn exit_codes_0_to_255_with_e_inclusive_and_exclusive() {
    let codes: Vec<u32> = (0..256).collect();
    for name in NAMES {
        std::thread::scope(|scope| {
            for chunk in codes.chunks(32) {
                scope.spawn(move || {
                    for &code in chunk {
                        let script = format!("exit {code}");
                        let code_text = code.to_string();
                        let o = name
                            .command(&["-e", &code_text, "--", "sh", "-c", &script])
                            .output()
                            .unwrap();
                        assert_eq!(o.status.code(), Some(0), "{name:?} -e {code}: {}", err(&o));
                        let mut args: Vec<String> = Vec::new();
                        for other in (0..256u32).filter(|&c| c != code) {
                            args.push("-e".into());
                            args.push(other.to_string());
                        }
                        args.extend(["sh".into(), "-c".into(), script.clone()]);
                        let o = name
                            .command(&args)
                            .env("POSIXLY_CORRECT", "1")
                            .output()
                            .unwrap();
                        let want = i32::try_from(code).unwrap();
                        assert_eq!(
                            o.status.code(),
                            Some(want),
                            "{name:?} exclusive {code}: {}",
                            err(&o)
                        );
                    }
                });
            }
        });
    }
}

// ---- reaping (stage_1 / stage_2) ----

/// CMD orphans 100 `sleep`s (each in a subshell that exits at once, so init adopts it), then
/// waits until init's only child is itself — every orphan exited *and was reaped* (a zombie
/// stays in the `children` file until reaped) — and exits 0; 1 if that takes over 60 s.
const REAPING: &str = r#"
for i in $(seq 1 100); do (sleep 0.$((i % 9 + 1)) &); done
n=0
while [ "$(cat /proc/$PPID/task/*/children | wc -w)" -gt 1 ]; do
    n=$((n + 1)); [ $n -gt 1200 ] && exit 1
    sleep 0.05
done
exit 0
"#;

fn reaping(name: Name, setup: Setup, warn: bool) {
    let args: &[&str] = if warn { &["-w"] } else { &[] };
    let Some(mut cmd) = in_setup(name, setup, args, &["sh", "-c", REAPING]) else {
        return;
    };
    let o = cmd.output().unwrap();
    let e = err(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{name:?} {setup:?}: orphans not reaped: {e}"
    );
    assert!(
        !e.contains("zombie reaping won't work"),
        "{name:?} {setup:?}: {e}"
    );
    assert_eq!(
        e.contains("Reaped zombie process with pid="),
        warn,
        "{name:?} {setup:?} -w={warn}: {e}"
    );
}

#[test]
fn a_hundred_orphans_are_reaped_in_every_setup() {
    for name in NAMES {
        for setup in SETUPS {
            reaping(name, setup, false);
        }
    }
}

#[test]
fn w_prints_each_zombie_reaped() {
    for name in NAMES {
        for setup in SETUPS {
            reaping(name, setup, true);
        }
    }
}

/// Not PID 1 and no subreaper: the warning tini's test greps, and the orphan goes to another
/// process than init (so init cannot reap it).
#[test]
fn without_a_subreaper_init_warns_and_orphans_go_elsewhere() {
    for name in NAMES {
        let dir = scratch(&format!("init-no-subreaper-{name:?}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (pidfile, go) = (dir.join("orphan"), dir.join("go"));
        let _ = std::fs::remove_file(&go);
        let script = format!(
            "(sleep 30 & echo $! > {p}.tmp; mv {p}.tmp {p}); n=0; \
             while [ ! -e {g} ]; do n=$((n+1)); [ $n -gt 1200 ] && exit 1; sleep 0.05; done",
            p = pidfile.display(),
            g = go.display()
        );
        let child = name
            .command(&["--", "sh", "-c", &script])
            .env("TINI_VERBOSITY", "1")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert!(eventually(Duration::from_secs(30), || pidfile.exists()));
        let orphan: u32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Its subshell exits at once; then it is re-parented — not to init.
        let init = child.id();
        assert!(
            eventually(Duration::from_secs(30), || proc_ppid(orphan)
                .is_some_and(|p| p != init && !descendants_of(init).contains(&p))),
            "{name:?}: orphan {orphan} has parent {:?}",
            proc_ppid(orphan)
        );
        std::fs::write(&go, "").unwrap();
        // (The orphan ends with init's close: it is in CMD's cgroup, or a `sleep 30`.)
        let o = child.wait_with_output().unwrap();
        assert!(
            err(&o).contains("zombie reaping won't work"),
            "{name:?}: {}",
            err(&o)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn no_warning_as_pid1_or_subreaper() {
    for name in NAMES {
        for setup in SETUPS {
            let Some(mut cmd) = in_setup(name, setup, &[], &["true"]) else {
                return;
            };
            let o = cmd.env("TINI_VERBOSITY", "1").output().unwrap();
            assert_eq!(o.status.code(), Some(0), "{name:?} {setup:?}: {}", err(&o));
            assert!(
                !err(&o).contains("zombie reaping won't work"),
                "{setup:?}: {}",
                err(&o)
            );
        }
    }
}

// ---- signals (test/signals/test.py) ----

/// CMD (a shell with default dispositions) runs `sleep 100`; TERM, USR1 or USR2 sent to init
/// reaches it, and init exits 128+N.
#[test]
fn term_usr1_usr2_are_forwarded_and_give_128_plus_n() {
    for name in NAMES {
        for setup in SETUPS {
            for signo in [libc::SIGTERM, libc::SIGUSR1, libc::SIGUSR2] {
                let Some(mut cmd) = in_setup(name, setup, &[], &["sh", "-c", "sleep 100; :"])
                else {
                    return;
                };
                let child = cmd.stderr(Stdio::piped()).spawn().unwrap();
                let init = init_pid(setup, &child);
                await_descendants(init, 2);
                send(init, signo);
                let o = child.wait_with_output().unwrap();
                assert_eq!(
                    o.status.code(),
                    Some(128 + signo),
                    "{name:?} {setup:?} signal {signo}: {}",
                    err(&o)
                );
            }
        }
    }
}

// ---- process group (test/pgroup/stage_1.py) ----

/// CMD ignores USR1 and waits for its child, which does not: USR1 to init with `-g` (or
/// `TINI_KILL_PROCESS_GROUP`) reaches the child through the group, the child dies, then CMD,
/// then init.
#[test]
fn g_sends_to_the_process_group() {
    let script = "trap '' USR1; env --default-signal=USR1 sleep 1000 & wait $!";
    for name in NAMES {
        for by_env in [false, true] {
            let args: &[&str] = if by_env { &[] } else { &["-g"] };
            let mut cmd = name.command(&[args, &["-s", "--", "sh", "-c", script]].concat());
            if by_env {
                cmd.env("TINI_KILL_PROCESS_GROUP", "1");
            }
            let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
            // The grandchild's USR1 is back to the default once `env` exec'd `sleep`.
            await_named_descendants(child.id(), "sleep", 1);
            send(child.id(), libc::SIGUSR1);
            let mut status = None;
            assert!(
                eventually(Duration::from_secs(30), || {
                    status = child.try_wait().unwrap();
                    status.is_some()
                }),
                "{name:?} env={by_env}: init still running after USR1 to the group"
            );
            // The shell's `wait` returns the sleep's 128+USR1, which is CMD's status.
            assert_eq!(
                status.unwrap().code(),
                Some(128 + libc::SIGUSR1),
                "{name:?}"
            );
        }
    }
}

// ---- signal configuration (test/sigconf) ----

/// glibc's own signals, 32 (`SIGCANCEL`) and 33 (`SIGSETXID`): no program can read or set them
/// through the C library, and glibc itself changes them (its `posix_spawn` helper leaves both
/// `SIG_IGN` in the child, which survives exec; a threaded glibc program installs a handler on
/// 33, which exec resets). Neither tini nor init has a say, so they are left out of the
/// comparisons.
const GLIBC_INTERNAL: u64 = (1 << 31) | (1 << 32);

/// `SigIgn` and `SigBlk` of `cat /proc/self/status` run by cg-sigconf with `sigconf`, through
/// `through` (init's argv, or nothing: the baseline), glibc's own signals left out.
fn sig_sets_through(sigconf: &[String], through: &[std::ffi::OsString]) -> (u64, u64) {
    let o = Command::new(bin("cg-sigconf"))
        .args(sigconf)
        .arg("--")
        .args(through)
        .args(["cat", "/proc/self/status"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{through:?}: {}", err(&o));
    let (ignored, blocked) = sig_sets(&String::from_utf8_lossy(&o.stdout));
    (ignored & !GLIBC_INTERNAL, blocked & !GLIBC_INTERNAL)
}

/// Started with TTOU, SEGV and INT ignored and TTIN, ILL and TERM blocked, init leaves CMD
/// exactly that: nothing of it lost (TTOU and TTIN are ones init changes for itself; INT and
/// TERM it catches to forward), and nothing more ignored or blocked than the same program gets
/// from cg-sigconf directly (glibc's own 32 and 33 aside, see [`GLIBC_INTERNAL`]).
#[test]
fn cmd_gets_the_signal_configuration_init_was_started_with() {
    use libc::*;
    let mut sigconf: Vec<String> = Vec::new();
    for s in [SIGTTOU, SIGSEGV, SIGINT] {
        sigconf.extend(["--ignore".into(), s.to_string()]);
    }
    for s in [SIGTTIN, SIGILL, SIGTERM] {
        sigconf.extend(["--block".into(), s.to_string()]);
    }
    let (base_ignored, base_blocked) = sig_sets_through(&sigconf, &[]);
    assert_eq!(
        base_blocked,
        set_of(&[SIGTTIN, SIGILL, SIGTERM]),
        "baseline SigBlk"
    );
    let asked = set_of(&[SIGTTOU, SIGSEGV, SIGINT]);
    assert_eq!(
        base_ignored & asked,
        asked,
        "baseline SigIgn {base_ignored:#x}"
    );
    for name in NAMES {
        let (ignored, blocked) = sig_sets_through(&sigconf, &name.argv());
        assert_eq!(ignored, base_ignored, "{name:?} SigIgn {ignored:#x}");
        assert_eq!(blocked, base_blocked, "{name:?} SigBlk {blocked:#x}");
    }
}

/// Started with nothing ignored or blocked (glibc's own signals aside), CMD gets nothing
/// ignored or blocked: init's own handlers, its TTIN/TTOU ignore and the Rust runtime's
/// SIGPIPE ignore do not leak.
#[test]
fn cmd_gets_a_clean_configuration_from_a_clean_start() {
    let (base_ignored, base_blocked) = sig_sets_through(&[], &[]);
    assert_eq!((base_ignored, base_blocked), (0, 0), "baseline");
    for name in NAMES {
        let (ignored, blocked) = sig_sets_through(&[], &name.argv());
        assert_eq!((ignored, blocked), (0, 0), "{name:?}");
    }
}

// ---- parent-death signal (test/pdeathsignal) ----

/// `-p SIGUSR1`: when init's parent dies (CMD kills it), init gets USR1 and forwards it to CMD,
/// whose handler writes "ok".
#[test]
fn p_sets_the_parent_death_signal() {
    for name in NAMES {
        let dir = scratch(&format!("init-pdeath-{name:?}"));
        std::fs::create_dir_all(&dir).unwrap();
        let ok = dir.join("ok");
        let _ = std::fs::remove_file(&ok);
        let argv: Vec<String> = name
            .argv()
            .iter()
            .map(|a| format!("'{}'", a.to_string_lossy()))
            .collect();
        // CMD: read init's parent from /proc/$PPID/stat, KILL it, wait for USR1.
        let cmd = format!(
            "trap 'echo ok > {ok}; exit 0' USR1; read -r _ _ _ gp _ < /proc/$PPID/stat; \
             kill -KILL $gp; n=0; while [ $n -lt 600 ]; do n=$((n+1)); sleep 0.05; done",
            ok = ok.display()
        );
        // The parent: a shell that runs init and stays (the `; :` keeps it from exec'ing).
        let parent = format!("{} -vvv -p SIGUSR1 -- sh -c \"$CMD\"; :", argv.join(" "));
        let mut p = Command::new("sh")
            .args(["-c", &parent])
            .env("CMD", &cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let _ = p.wait();
        assert!(
            eventually(Duration::from_secs(30), || std::fs::read_to_string(&ok)
                .is_ok_and(|t| t.trim() == "ok")),
            "{name:?}: CMD never got USR1 after init's parent died"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

// ---- bad input ----

#[test]
fn bad_input_is_a_clear_error_naming_it() {
    for name in NAMES {
        for (args, needle) in [
            (&["-e", "300", "true"][..], "\"300\""),
            (&["-p", "SIGNOPE", "true"], "\"SIGNOPE\""),
            (&[], "missing CMD"),
            (&["--ladder", "TERM:soon", "true"], "\"TERM:soon\""),
            (&["--stop-budget", "x", "true"], "\"x\""),
        ] {
            let o = name.command(args).output().unwrap();
            assert_eq!(o.status.code(), Some(1), "{name:?} {args:?}: {}", err(&o));
            assert!(err(&o).contains(needle), "{name:?} {args:?}: {}", err(&o));
            assert!(!err(&o).contains("panicked"), "{}", err(&o));
        }
        let o = name.command(&["--", "/nonexistent/cmd"]).output().unwrap();
        assert_eq!(o.status.code(), Some(127), "{name:?}: {}", err(&o));
    }
}
