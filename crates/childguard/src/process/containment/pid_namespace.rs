//! The PID namespace backend: the tree init is the PID 1 of a new PID namespace. When it dies,
//! however it dies, the kernel kills every process in the namespace (`zap_pid_ns_processes`),
//! `setsid`'d and double-forked ones included, and its exit is seen only once they are gone.
//!
//! Root makes the namespace directly (`CAP_SYS_ADMIN`); anyone else inside a new user
//! namespace of their own, their uid and gid mapped to themselves so that the server sees its
//! own ids — what bubblewrap's `--unshare-pid` does. Refused where the host refuses user
//! namespaces (`user.max_user_namespaces=0`, Ubuntu's AppArmor restriction, Docker's default
//! seccomp profile): the next backend then answers.
//!
//! What the server sees: its own pid is 2 (the tree init is 1), while `/proc` is still ours
//! (not remounted: the server sees every process of the machine there, by our pids). Inside a
//! user namespace, setuid programs do not gain their owner's ids, and files of other users
//! show as the overflow ids (`nobody`).

use std::ffi::c_long;

use super::Backend;

/// One way to clone the tree init: the `clone` flags, and the `uid_map` and `gid_map` lines
/// a new user namespace needs.
pub(super) type Way = (c_long, Option<(Vec<u8>, Vec<u8>)>);

/// The ways to try for a backend, in order.
pub(super) fn ways(backend: Backend) -> Vec<Way> {
    if backend != Backend::PidNamespace {
        return vec![(0, None)];
    }
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let maps = (
        format!("{uid} {uid} 1\n").into_bytes(),
        format!("{gid} {gid} 1\n").into_bytes(),
    );
    let pid_ns = libc::CLONE_NEWPID as c_long;
    let user_ns = libc::CLONE_NEWUSER as c_long;
    let mut ways = Vec::with_capacity(2);
    if uid == 0 {
        // Root: no user namespace, so the server keeps every privilege it has.
        ways.push((pid_ns, None));
    }
    ways.push((pid_ns | user_ns, Some(maps)));
    ways
}
