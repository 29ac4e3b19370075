//! Issue 49, item 4: the attacks of a second local user on root's childguard, each as a test,
//! run as the real unprivileged user `childguard-attacker` (tests/run.sh makes it) with the
//! attacker program `cg-attacker` (tests/src/bin/cg-attacker.rs: a blocking inotify read, then
//! `renameat2(RENAME_EXCHANGE)` or a rename), against the CLI and the library, each
//! `CHILDGUARD_ATTACK_SPAWNS` (default 200) spawns:
//!
//! - `chown_race.rs`: with `notify_owner` (`probe --user`), the swap of the socket for a
//!   symlink to a root-owned file once the socket's directory is the user's; the file must
//!   keep its owner and mode.
//! - `runtime_dir_cli.rs`, `runtime_dir_lib.rs`: root with an `XDG_RUNTIME_DIR` the user owns —
//!   its directory stolen (root's READY must still come, CMD run), or swapped for a symlink to a
//!   directory of root's (its mode, owner and content must stay).
//! - `stranger.rs`: another user sending to root's notify socket (refused by the kernel), and
//!   the owner under `notify_owner` (reaches it, still judged by `NotifyAccess`).
//!
//! No assertion depends on a race won or lost: what root must keep is checked after every
//! spawn, whatever the scheduling. Each attacker shows it was in the game: it acted on root's
//! directories with the socket in place, or took a decoy made as the old code made its
//! directories, before and after the spawns. Needs root; one test at a time.

mod attack;
mod attacker;
mod chown_race;
mod runtime_dir_cli;
mod runtime_dir_lib;
mod stranger;
