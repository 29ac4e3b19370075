//! Attack 1 of issue 49: the `notify_owner` chown race. Root gives a server run as the
//! attacker its notify socket. When root did it by path — `chown` of the directory to the
//! user, then of `DIR/sock` — the user, woken by the directory's `IN_ATTRIB`, swapped `sock`
//! for a symlink to a root-owned file between the two, and root chowned that file to the user.
//!
//! The attacker watches `/tmp`, where root makes its directories here (`XDG_RUNTIME_DIR` unset:
//! a root-owned sticky 1777 base, the case of the issue), and on each `IN_CREATE` and
//! `IN_ATTRIB` of a `childguard-…` entry tries the exchange of `ENTRY/sock` with its symlink to
//! the victim (`root:root 0600`), retrying while the socket is not bound yet. After every spawn
//! the victim must be `root:root 0600`, and every spawn must have been ready.

use std::os::unix::process::CommandExt;

use super::attack::{
    attacker, cli, library_spawn, logged_dirs, one_at_a_time, Kept, Lab, RuntimeDirEnv, Tally,
    ATTACKER,
};
use super::attacker::{Attacker, Did};

/// The attacker on `/tmp`, its symlinks to `victim` kept in a directory of its own there.
fn chown_racer(lab: &Lab, victim: &Kept) -> Attacker {
    let links = lab.user_dir("links", 0o755);
    let (victim, links) = (
        victim.path.display().to_string(),
        links.display().to_string(),
    );
    Attacker::start(
        lab,
        &[
            "--watch",
            "/tmp",
            "--on",
            "both",
            "--action",
            "swap-sock",
            "--target",
            &victim,
            "--links",
            &links,
        ],
    )
}

/// Stops the attacker, asserts what root must keep, and that the attacker did try: in at
/// least one of our directories (those our servers logged) that it could pass into, with the
/// socket there.
fn conclude(tally: &Tally, attacker: Attacker, lab: &Lab, log: &std::path::Path) {
    let lines = attacker.stop();
    let ours = logged_dirs(log);
    let did = Did::of(&lines, Some(&ours), lab.user.uid);
    tally.assert_held(&format!("{did} (of {} logged)", ours.len()));
    assert!(
        did.reached > 0,
        "the attacker never tried the swap in any of our {} directories under /tmp while it \
         could pass into it and the socket was there: the test proved nothing ({did}; lab {})",
        ours.len(),
        lab.root.display()
    );
}

/// `childguard probe --user childguard-attacker --ready notify -- SERVER`, the server run as the
/// attacker (the reproduction).
#[test]
fn probe_user_notify_victim_file_keeps_owner_and_mode() {
    let test = "probe_user_notify_victim_file_keeps_owner_and_mode";
    let _serial = one_at_a_time();
    let Some(user) = attacker(test) else { return };
    let lab = Lab::new("chown-probe", user);
    let victim = Kept::victim_file(&lab);
    let log = lab.user_file("servers.log");
    let attacker = chown_racer(&lab, &victim);
    let mut args: Vec<String> = [
        "probe",
        "--runs",
        "1",
        "--signals",
        "TERM",
        "--window",
        "5s",
        "--ready",
        "notify",
        "--ready-timeout",
        "5s",
        "--user",
        ATTACKER,
        "--",
    ]
    .map(String::from)
    .to_vec();
    args.extend(lab.server_argv(&log));
    let mut tally = Tally::new(test);
    while tally.go_on() {
        // 3: no clean signal (sleep dies of TERM's default action); 0 would do as well.
        tally.record(cli(&args, None, &[0, 3]), Some(&victim));
    }
    conclude(&tally, attacker, &lab, &log);
}

/// The library: `Builder::notify_owner` and `Ready::Notify`, the child run as the attacker
/// (`CommandExt::uid`/`gid`).
#[test]
fn library_notify_owner_victim_file_keeps_owner_and_mode() {
    let test = "library_notify_owner_victim_file_keeps_owner_and_mode";
    let _serial = one_at_a_time();
    let Some(user) = attacker(test) else { return };
    let _env = RuntimeDirEnv::set(None);
    let lab = Lab::new("chown-lib", user);
    let victim = Kept::victim_file(&lab);
    let log = lab.user_file("servers.log");
    let attacker = chown_racer(&lab, &victim);
    let mut tally = Tally::new(test);
    while tally.go_on() {
        let mut server = lab.server(&log);
        server.uid(user.uid).gid(user.gid);
        tally.record(library_spawn(server, Some(user), None), Some(&victim));
    }
    conclude(&tally, attacker, &lab, &log);
}
