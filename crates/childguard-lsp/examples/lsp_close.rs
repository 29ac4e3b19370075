//! Starts a language server, `initialize`s it, and closes it with the LSP close; prints the
//! report. Any stdio language server:
//!
//! ```text
//! cd tests && npm ci && cd ..   # the pinned servers (bash tests/run.sh does it too)
//! cargo run -p childguard-lsp --example lsp_close -- tests/node_modules/.bin/pyright-langserver --stdio
//! cargo run -p childguard-lsp --example lsp_close -- tests/node_modules/.bin/typescript-language-server --stdio
//! ```
//!
//! The `initialize` here is the least a client does (one request, its answer read with
//! blocking reads); the close is the crate's.

use std::io::{Read, Write};
use std::process::{Command, ExitCode};

use childguard::ChildHandle;
use childguard_lsp::LspClose;
use serde_json::{json, Value};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: lsp_close SERVER [ARG…]   e.g. lsp_close pyright-langserver --stdio");
        return ExitCode::from(2);
    };
    let mut cmd = Command::new(&program);
    cmd.args(args);
    match run(cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lsp_close: {program}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Command) -> Result<(), Box<dyn std::error::Error>> {
    let mut server = ChildHandle::stdio_server(cmd).spawn()?;
    let root = std::env::current_dir()?;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"processId": std::process::id(), "rootUri": format!("file://{}", root.display()),
                   "capabilities": {}},
    });
    send(&mut server, &initialize)?;
    loop {
        let message = receive(&mut server)?;
        if message["id"] == 1 && message.get("method").is_none() {
            let name = &message["result"]["serverInfo"]["name"];
            println!(
                "initialized: {}",
                name.as_str().unwrap_or("(no serverInfo)")
            );
            break;
        }
    }
    send(
        &mut server,
        &json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
    )?;
    let report = childguard_lsp::close(server, LspClose::default())?;
    println!("{report}");
    Ok(())
}

fn send(server: &mut ChildHandle, message: &Value) -> std::io::Result<()> {
    let body = message.to_string();
    let stdin = server.stdin().expect("stdio_server pipes stdin");
    write!(stdin, "Content-Length: {}\r\n\r\n{body}", body.len())?;
    stdin.flush()
}

/// One message, read byte by byte up to the header's end (a sketch, not a client: no bound on
/// the wait).
fn receive(server: &mut ChildHandle) -> Result<Value, Box<dyn std::error::Error>> {
    let stdout = server.stdout().expect("stdio_server pipes stdout");
    let mut header = Vec::new();
    let mut byte = [0u8];
    while !header.ends_with(b"\r\n\r\n") {
        if stdout.read(&mut byte)? == 0 {
            return Err("the server closed its stdout".into());
        }
        header.push(byte[0]);
    }
    let header = String::from_utf8_lossy(&header).to_ascii_lowercase();
    let length: usize = header
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .ok_or("no Content-Length")?
        .trim()
        .parse()?;
    let mut body = vec![0u8; length];
    stdout.read_exact(&mut body)?;
    Ok(serde_json::from_slice(&body)?)
}
