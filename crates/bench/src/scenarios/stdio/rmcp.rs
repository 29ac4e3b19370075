//! Baselines: rmcp's `TokioChildProcess` (rmcp 3.11, `transport-child-process`), dropped, or
//! closed by `graceful_shutdown()`.
//!
//! What rmcp does (src/transport/child_process.rs): `graceful_shutdown` closes the transport
//! (the server's stdin), waits up to 3 s for the child to exit, sends `SIGTERM`, waits up to
//! 3 s again, then `kill()`s (SIGKILL and wait) — the direct child only, no group. A drop
//! returns at once and `tokio::spawn`s a task that SIGKILLs the direct child and waits for it.
//! The handshake is done by hand through the `Transport` trait (`initialize`, then
//! `initialized`), so that the `TokioChildProcess` itself is what is dropped or shut down.

use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use rmcp::transport::{TokioChildProcess, Transport};

use super::lines::{initialize_request, initialized_notification};
use super::peers::Launch;
use super::tree::Tree;
use super::{Measure, LEFT_AFTER, READY_TIMEOUT};
use crate::fixture::ms;
use crate::Result;

/// How the `TokioChildProcess` is ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Drop,
    GracefulShutdown,
}

/// One close of `launch`'s server through rmcp, on a runtime of its own (the drop's kill task
/// runs on it while we wait [`LEFT_AFTER`]).
pub fn close_rmcp(end: End, launch: &Launch) -> Result<Measure> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let measured = runtime.block_on(measure(end, launch));
    runtime.shutdown_timeout(Duration::from_secs(10));
    let (took, left, tree) = measured?;
    tree.kill_rest()?;
    Ok(Measure {
        close_ms: ms(took),
        left,
    })
}

/// Returns the close's duration, the processes of the tree alive [`LEFT_AFTER`] after it
/// returned, and the tree (for the clean-up).
async fn measure(end: End, launch: &Launch) -> Result<(Duration, usize, Tree)> {
    let mut cmd = tokio::process::Command::new(&launch.argv[0]);
    cmd.args(&launch.argv[1..]).current_dir(&launch.cwd);
    let (mut transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()?;
    let pid = transport.id().ok_or("rmcp: the child has no pid")?;
    match tokio::time::timeout(READY_TIMEOUT, initialize(&mut transport)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(abandon(transport, pid, e).await),
        Err(_) => {
            let e = format!("rmcp: no initialize answer within {READY_TIMEOUT:?}").into();
            return Err(abandon(transport, pid, e).await);
        }
    }
    let pids = match launch.pidfile_pids() {
        Ok(pids) => pids,
        Err(e) => return Err(abandon(transport, pid, e).await),
    };
    let tree = Tree::snapshot(pid, true, &pids);
    if let Err(e) = launch.check(&tree) {
        return Err(abandon(transport, pid, e).await);
    }
    let start = Instant::now();
    let took = match end {
        End::Drop => {
            drop(transport);
            start.elapsed()
        }
        End::GracefulShutdown => {
            let shut = transport.graceful_shutdown().await;
            let took = start.elapsed();
            drop(transport);
            if let Err(e) = shut {
                let _ = tokio::task::spawn_blocking(move || tree.kill_rest()).await;
                return Err(format!("rmcp: graceful_shutdown: {e}").into());
            }
            took
        }
    };
    // The runtime keeps running meanwhile, as an application's would: the drop's kill task
    // gets its chance.
    tokio::time::sleep(LEFT_AFTER).await;
    let left = tree.alive().len();
    Ok((took, left, tree))
}

/// The handshake through rmcp's `Transport`: `initialize` (messages parsed by rmcp's own
/// model), its response, then `notifications/initialized`.
async fn initialize(transport: &mut TokioChildProcess) -> Result<()> {
    let request: ClientJsonRpcMessage = serde_json::from_value(initialize_request())?;
    transport.send(request).await?;
    loop {
        match transport.receive().await {
            Some(JsonRpcMessage::Response(_)) => break,
            Some(JsonRpcMessage::Error(e)) => {
                return Err(format!("rmcp: initialize failed: {e:?}").into())
            }
            Some(_) => continue,
            None => return Err("rmcp: the server closed its stdout before answering".into()),
        }
    }
    let note: ClientJsonRpcMessage = serde_json::from_value(initialized_notification())?;
    transport.send(note).await?;
    Ok(())
}

/// Ends a child whose handshake failed (and what it started), returning `error`.
async fn abandon(
    transport: TokioChildProcess,
    pid: u32,
    error: Box<dyn std::error::Error + Send + Sync>,
) -> Box<dyn std::error::Error + Send + Sync> {
    let tree = Tree::snapshot(pid, true, &[]);
    drop(transport);
    let _ = tokio::task::spawn_blocking(move || tree.kill_rest()).await;
    error
}
