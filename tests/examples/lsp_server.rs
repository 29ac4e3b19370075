//! Closes a language server the LSP way, with childguard's ladder behind it.
//!
//! ```text
//! cargo run -p childguard-tests --example lsp_server -- tests/node_modules/.bin/pyright-langserver --stdio
//! ```
//!
//! Spawns the command line given (stdin and stdout piped, contained in a cgroup when it can
//! be, the tree killed if this process dies), `initialize`s it with the current directory as the workspace, then closes it:
//! `shutdown` (its answer awaited 2 s, as vscode-languageclient's `stop()` does), `exit`, and
//! at once `close()`, whose ladder `EOF:2s,TERM:2s,KILL:5s` closes our end of the server's
//! stdin and gives it 2 s to be gone before `SIGTERM` — and `SIGKILL` for the whole tree.
//! Prints the close report.

use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use childguard::{ChildHandle, Containment};
use childguard_tests::lsp::{file_uri, LspClient};
use serde_json::{json, Value};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: lsp_server SERVER [ARG…]   e.g. lsp_server pyright-langserver --stdio");
        return ExitCode::from(2);
    };
    let mut cmd = Command::new(program);
    cmd.args(rest).stdin(Stdio::piped()).stdout(Stdio::piped());
    let ladder = "EOF:2s,TERM:2s,KILL:5s".parse().expect("a valid ladder");
    let spawned = ChildHandle::builder(cmd)
        .contain(Containment::BestEffort)
        .exit_with_parent(true)
        .ladder(ladder)
        .spawn();
    let mut handle = match spawned {
        Ok(handle) => handle,
        Err(e) => {
            eprintln!("lsp_server: {program}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut lsp = LspClient::new(handle.take_stdout().expect("stdout is piped"));
    if let Err(e) = talk(&mut handle, &mut lsp) {
        eprintln!("lsp_server: {e}; closing with the ladder");
    }
    // Right after `exit`: the EOF rung's 2 s are the server's time to be gone.
    match handle.close() {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lsp_server: close: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `initialize`, `initialized`, `shutdown` (2 s), `exit`; an error names the step.
fn talk(
    handle: &mut ChildHandle,
    lsp: &mut LspClient<std::process::ChildStdout>,
) -> Result<(), String> {
    let stdin = handle.stdin().expect("stdin is piped");
    let root = std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?;
    let params = json!({
        "processId": std::process::id(),
        "rootUri": file_uri(&root),
        "capabilities": {},
    });
    let init = lsp
        .request(stdin, "initialize", params, Duration::from_secs(30))
        .map_err(|e| format!("initialize: {e}"))?;
    let name = init["serverInfo"]["name"]
        .as_str()
        .unwrap_or("(no serverInfo)");
    println!("initialized: {name}");
    lsp.notify(stdin, "initialized", json!({}))
        .map_err(|e| format!("initialized: {e}"))?;
    lsp.request(stdin, "shutdown", Value::Null, Duration::from_secs(2))
        .map_err(|e| format!("shutdown: {e}"))?;
    lsp.notify(stdin, "exit", Value::Null)
        .map_err(|e| format!("exit: {e}"))
}
