//! What the LSP close tests share (`lsp_close.rs`, `lsp_close_bad.rs`): the spawn as a user
//! does it (`ChildHandle::stdio_server`), the session before the close (the tests' LSP client
//! over a copy of the handle's stdout, the handle's stdin lent per message: the pipes stay in
//! the handle, as `childguard_lsp::close` takes them), and the tree's check after it.

#![allow(dead_code)] // each test file uses its part

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use childguard::{ChildHandle, CloseReport};
use childguard_tests::cgroups::{cgroup_mount, cgroup_of};
use childguard_tests::lsp::{file_uri, LspClient};
use childguard_tests::*;
use serde_json::{json, Value};

/// A bound for a loaded machine on each answer and each wait: not what they take.
pub const ANSWER: Duration = Duration::from_secs(60);

/// Spawned as a user would: `ChildHandle::stdio_server` (piped stdio, stderr captured,
/// contained, `EOF:2s,TERM:2s,KILL:5s`, gone with us), with `ladder` if given.
pub fn spawn(cmd: Command, ladder_text: Option<&str>) -> ChildHandle {
    let mut builder = ChildHandle::stdio_server(cmd);
    if let Some(text) = ladder_text {
        builder = builder.ladder(ladder(text));
    }
    builder.spawn().expect("spawning the language server")
}

/// A client reading a copy of the handle's stdout: the handle keeps its own end.
pub fn client(handle: &mut ChildHandle) -> LspClient<File> {
    let stdout = handle.stdout().expect("stdout piped");
    LspClient::new(File::from(stdout.as_fd().try_clone_to_owned().unwrap()))
}

/// `initialize` (root `root`) and `initialized`, over the handle's stdin and `lsp`.
pub fn initialize(handle: &mut ChildHandle, lsp: &mut LspClient<File>, root: &Path) -> Value {
    let params = json!({
        "processId": std::process::id(),
        "clientInfo": {"name": "childguard-tests"},
        "rootUri": file_uri(root),
        "workspaceFolders": [{"uri": file_uri(root), "name": "ws"}],
        "capabilities": {},
    });
    let stdin = handle.stdin().expect("stdin kept in the handle");
    let result = lsp
        .request(stdin, "initialize", params, ANSWER)
        .unwrap_or_else(|e| panic!("initialize: {e}"));
    lsp.notify(stdin, "initialized", json!({})).unwrap();
    result
}

/// The server's cgroup and its members now, each pinned by a pidfd. Fails loudly if the
/// server got no cgroup of its own: "nothing left" rests on it.
pub fn tree(handle: &ChildHandle) -> (PathBuf, Vec<(u32, OwnedFd)>) {
    let path = cgroup_of(handle.id().expect("a child")).expect("/proc/PID/cgroup");
    assert!(
        path.rsplit('/')
            .next()
            .unwrap_or_default()
            .starts_with("childguard-"),
        "precondition: the server is not in a cgroup of its own (it is in {path}); these tests \
         need cgroup v2 with write access to this process's cgroup (root)"
    );
    let dir = cgroup_mount().join(path.trim_start_matches('/'));
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    let members = procs
        .lines()
        .map(|p| p.parse::<u32>().unwrap())
        .map(|p| (p, pidfd(p)))
        .collect();
    (dir, members)
}

/// After the close: the cgroup removed and gone, and no process of `members` alive (its pidfd
/// readable: exited; `/proc/PID/status` not there or `Z`).
pub fn assert_nothing_left(close: &CloseReport, dir: &Path, members: &[(u32, OwnedFd)]) {
    let cgroup = close
        .cgroup
        .as_ref()
        .expect("a contained close reports its cgroup");
    assert!(cgroup.removed && cgroup.members_left == 0, "{close}");
    assert!(!dir.exists(), "{} is still there: {close}", dir.display());
    for (pid, pin) in members {
        let state = proc_state(*pid);
        assert!(
            exited_within(pin, Duration::ZERO) && matches!(state, None | Some('Z')),
            "process {pid} of the server's tree is alive (state {state:?}): {close}"
        );
    }
}

pub fn pids(members: &[(u32, OwnedFd)]) -> Vec<u32> {
    members.iter().map(|(p, _)| *p).collect()
}
