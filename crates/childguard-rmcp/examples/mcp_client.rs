//! An MCP client over a childguard-owned stdio server: initialize, list the tools, call
//! `echo`, cancel a long call, close (the MCP close on the whole tree), print the report.
//!
//! ```text
//! cd tests && cargo run -p childguard-rmcp --example mcp_client -- npx --no-install mcp-server-everything
//! ```
//!
//! (`npm ci` in `tests/` first installs the pinned server; without it npx's own error, on our
//! stderr and in the start-up error, says the package could not be found.)
//!
//! Any stdio MCP server will do; `echo` and `trigger-long-running-operation` are the
//! "everything" reference server's tools (the steps that need them say so when missing).

use std::time::Duration;

use childguard_rmcp::ChildTransport;
use rmcp::model::CallToolRequestParams;
use tokio::process::Command;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: mcp_client PROGRAM [ARGS…]   (a stdio MCP server)");
        std::process::exit(2);
    };
    let mut cmd = Command::new(program);
    cmd.args(args);

    // Piped stdio, stderr passed on to ours and kept, contained, gone with us, ladder
    // EOF:2s,TERM:2s,KILL:5s.
    let transport = ChildTransport::spawn(cmd)?;
    let closed = transport.closed();
    println!("spawned pid {:?}", transport.id());

    // initialize (rmcp's handshake), then the service runs in a task of its own. A server that
    // fails to start: the error says how it ended and shows its last stderr lines.
    let client = transport.serve(()).await?;
    if let Some(info) = client.peer_info() {
        println!("server: {:?}", info.server_info);
    }

    let tools = client.list_tools(Default::default()).await?;
    let names: Vec<_> = tools.tools.iter().map(|t| t.name.to_string()).collect();
    println!("{} tools: {}", names.len(), names.join(", "));

    if names.iter().any(|n| n == "echo") {
        let mut arguments = serde_json::Map::new();
        arguments.insert("message".into(), "hello through childguard".into());
        let answer = client
            .call_tool(CallToolRequestParams::new("echo").with_arguments(arguments))
            .await?;
        println!("echo: {:?}", answer.content);
    }

    // Cancel: dropping a call's future sends notifications/cancelled for it.
    if names.iter().any(|n| n == "trigger-long-running-operation") {
        let mut arguments = serde_json::Map::new();
        arguments.insert("duration".into(), 30.into());
        arguments.insert("steps".into(), 30.into());
        let long = client.call_tool(
            CallToolRequestParams::new("trigger-long-running-operation").with_arguments(arguments),
        );
        match tokio::time::timeout(Duration::from_millis(500), long).await {
            Ok(done) => println!("the long call ended early: {done:?}"),
            Err(_) => println!("long call cancelled after 500 ms"),
        }
    }

    // rmcp cancels its service and closes the transport: childguard's close runs.
    let quit = client.cancel().await?;
    println!("rmcp: {quit:?}");
    match closed.report().await {
        Some(report) => println!("{report}"),
        None => println!("no close report (the close was cancelled)"),
    }
    Ok(())
}
