//! The tokio face: the same steps over childguard's async halves (or any `AsyncWrite` and
//! `AsyncRead`), every wait a tokio timer, then the handle's `close_async`.

use std::time::Instant;

use childguard::ChildHandle;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{timeout_at, Instant as TokioInstant};

use crate::blocking::{later, NO_CHANNEL};
use crate::report::{Error, LspCloseReport, Shutdown};
use crate::session::{exit_notification, shutdown_request, Next};
use crate::steps::Steps;
use crate::LspClose;

/// The whole close over the handle's own halves (pipes, or its stdio socket).
pub(crate) async fn run_own(
    mut handle: ChildHandle,
    how: &LspClose,
) -> Result<LspCloseReport, Error> {
    if handle.stdin().is_some() && handle.stdout().is_some() {
        if let (Some(to), Some(from)) = (handle.async_stdin(), handle.async_stdout()) {
            return run(handle, Ok((to, from)), how).await;
        }
    }
    if let Some(socket) = handle.socket() {
        let stream = socket
            .try_clone()
            .and_then(|s| s.set_nonblocking(true).map(|()| s))
            .and_then(tokio::net::UnixStream::from_std);
        return match stream {
            Ok(stream) => {
                let (from, to) = stream.into_split();
                run(handle, Ok((to, from)), how).await
            }
            Err(e) => {
                let why = format!("copying the handle's stdio socket failed: {e}");
                run::<tokio::io::Sink, tokio::io::Empty>(handle, Err(why), how).await
            }
        };
    }
    run::<tokio::io::Sink, tokio::io::Empty>(handle, Err(NO_CHANNEL.into()), how).await
}

/// The whole close over `channel` (or, without one, straight to the handle's close).
pub(crate) async fn run<W, R>(
    mut handle: ChildHandle,
    channel: Result<(W, R), String>,
    how: &LspClose,
) -> Result<LspCloseReport, Error>
where
    W: AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
{
    let mut steps = Steps::new();
    let gone = steps.gone_before(&mut handle);
    let mut kept = None;
    match channel {
        Err(why) if !gone => steps.shutdown = Shutdown::NotSent(why),
        Err(_) => {}
        Ok((mut to, mut from)) => {
            if !gone {
                speak(&mut handle, &mut to, &mut from, how, &mut steps).await;
            }
            drop(to);
            kept = Some(from);
        }
    }
    let closed = handle.close_async().await;
    drop(kept);
    steps.finish(closed)
}

async fn speak<W, R>(
    handle: &mut ChildHandle,
    to: &mut W,
    from: &mut R,
    how: &LspClose,
    steps: &mut Steps,
) where
    W: AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
{
    let deadline = later(steps.began, how.shutdown_timeout);
    let outcome = match write_all(to, &shutdown_request(), deadline).await {
        Err(why) => Shutdown::NotSent(why),
        Ok(()) => listen(handle, to, from, deadline, steps).await,
    };
    steps.shutdown_over(outcome);
    if steps.exit_due(handle) {
        let exit_deadline = later(Instant::now(), how.exit_grace);
        let written = write_all(to, &exit_notification(), exit_deadline).await;
        steps.exit_written(written);
    }
    // The end of file: our end of stdin closed (a socket shut down for writing). Immediate
    // for childguard's halves; bounded all the same for a writer of the caller's.
    let _ = timeout_at(TokioInstant::now() + how.exit_grace, to.shutdown()).await;
    if steps.exit_sent.is_some() {
        let exited = handle
            .wait_timeout_async(how.exit_grace)
            .await
            .map(|s| s.is_some());
        steps.exit_grace_over(exited);
    }
}

async fn listen<W, R>(
    handle: &mut ChildHandle,
    to: &mut W,
    from: &mut R,
    deadline: Instant,
    steps: &mut Steps,
) -> Shutdown
where
    W: AsyncWrite + Unpin,
    R: AsyncRead + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    let mut watch = true;
    loop {
        match steps.listener.next() {
            Next::Done(outcome) => return outcome,
            Next::Reply(reply) => {
                if steps.input_broken.is_none() {
                    if let Err(why) = write_all(to, &reply, deadline).await {
                        steps.reply_failed(why);
                    }
                }
                continue;
            }
            Next::Read => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Shutdown::TimedOut;
        }
        // The read, raced against the server's exit (its stdout may outlive it, held by a
        // process it started). Both are cancel-safe: a read that lost got no bytes.
        let read = tokio::select! {
            read = timeout_at(TokioInstant::from_std(deadline), from.read(&mut buf)) => read,
            exited = handle.wait_timeout_async(left), if watch => match exited {
                Ok(Some(_)) => {
                    steps.exited_now(handle);
                    return Shutdown::Exited;
                }
                Ok(None) => return Shutdown::TimedOut,
                Err(e) => {
                    steps.notes.push(format!("watching the server's exit failed: {e}"));
                    watch = false;
                    continue;
                }
            },
        };
        match read {
            Err(_elapsed) => return Shutdown::TimedOut,
            Ok(Ok(0)) => return Shutdown::StdoutClosed,
            Ok(Ok(n)) => steps.listener.push(&buf[..n]),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => return Shutdown::Unreadable(format!("reading the server's stdout: {e}")),
        }
    }
}

/// Writes all of `bytes` before `deadline`. A write cut by the deadline leaves half a frame:
/// nothing more is written after it (the close goes on to the end of file).
async fn write_all<W: AsyncWrite + Unpin>(
    to: &mut W,
    bytes: &[u8],
    deadline: Instant,
) -> Result<(), String> {
    match timeout_at(TokioInstant::from_std(deadline), to.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("writing to the server's stdin failed: {e}")),
        Err(_elapsed) => Err("the server's stdin stayed full (it does not read)".into()),
    }
}
