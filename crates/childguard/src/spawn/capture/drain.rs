//! The capture thread: one for the whole program, reading every captured pipe of every handle.
//!
//! It blocks in one `poll(2)` over all pipes plus a wake socket (no timeout: every change
//! arrives as readability), reads what is there (non-blocking read ends, so a read never
//! blocks the other pipes), and feeds it to each handle's [`Shared`] state. A pipe leaves the
//! set at EOF — when the child and every descendant holding it are gone — and is closed then.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use rustix::event::{poll, PollFd, PollFlags};

use super::{OutputStream, Shared, Sink};
use crate::process::per_process::PerProcess;

/// One captured pipe.
struct Entry {
    fd: OwnedFd,
    stream: OutputStream,
    shared: Arc<Shared>,
    /// Dropped if its callback panicked.
    sink: Option<Arc<Sink>>,
}

pub(super) struct Drain {
    inbox: Mutex<Vec<Entry>>,
    wake_tx: UnixStream,
}

/// This process's capture thread, once it runs. Per process ([`crate::process::per_process`]): a child
/// made by `fork()` without `exec` inherits the parent's, whose thread it does not have (its
/// pipes would never be read, its syncs never answered), and starts its own.
static DRAIN: PerProcess<Drain> = PerProcess::new();

/// Reads per readable pipe per round, at most: enough for throughput, few enough that one
/// chatty server does not starve the others.
const READS_PER_ROUND: usize = 4;
/// The read buffer, and the pipe buffer asked for (Linux `F_SETPIPE_SZ`; the default pipe holds
/// 64 KiB): a server logging fast then writes up to this much per wake-up of ours instead of
/// waiting on us every 64 KiB. Measured (`childguard-bench capture`, 100 MB of log on 2
/// busy CPUs): 2.6× the `/dev/null` time with 64 KiB, 2.0× with 1 MiB (docs/benchmarks.md). Past
/// the per-user soft limit (`/proc/sys/fs/pipe-user-pages-soft`) the kernel refuses: the pipe
/// keeps its size.
const CHUNK: usize = 1 << 20;
/// A sync reads a pipe to empty, but no further than this (a descendant that writes without
/// pause must not keep the closing thread waiting).
const SYNC_MAX: usize = 16 << 20;

/// The capture thread, started on first use; a failed start is tried again on the next use
/// (see [`PerProcess::get_or_start`]).
pub(super) fn start() -> io::Result<&'static Drain> {
    DRAIN.get_or_start(
        "childguard-capture",
        || {
            let (wake_tx, wake_rx) = UnixStream::pair()?;
            wake_tx.set_nonblocking(true)?;
            wake_rx.set_nonblocking(true)?;
            let fresh = Drain {
                inbox: Mutex::new(Vec::new()),
                wake_tx,
            };
            Ok((fresh, wake_rx))
        },
        run,
    )
}

/// Wakes the thread (a sync was asked for). One pending byte is enough: a full socket is fine.
pub(super) fn wake() {
    if let Some(d) = DRAIN.get() {
        let _ = (&d.wake_tx).write(&[1]);
    }
}

/// Hands `streams` of one handle to the thread.
pub(super) fn register(
    streams: Vec<(OutputStream, OwnedFd)>,
    shared: &Arc<Shared>,
    sink: Option<Arc<Sink>>,
) -> io::Result<()> {
    let d = start()?;
    let mut entries = Vec::with_capacity(streams.len());
    for (stream, fd) in streams {
        // Our read end is ours alone (std made it close-on-exec; the child has the write end),
        // so its O_NONBLOCK affects no other process.
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK)?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let _ = rustix::pipe::fcntl_setpipe_size(&fd, CHUNK);
        entries.push(Entry {
            fd,
            stream,
            shared: Arc::clone(shared),
            sink: sink.clone(),
        });
    }
    d.inbox
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .extend(entries);
    wake();
    Ok(())
}

fn run(d: &'static Drain, mut wake_rx: UnixStream) {
    let mut entries: Vec<Entry> = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        entries.append(&mut d.inbox.lock().unwrap_or_else(|p| p.into_inner()));
        let readable: Vec<bool> = {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(entries.len() + 1);
            fds.push(PollFd::new(&wake_rx, PollFlags::IN));
            fds.extend(entries.iter().map(|e| PollFd::new(&e.fd, PollFlags::IN)));
            match poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                // Only EINVAL/ENOMEM are possible here: wait for the next wake-up rather than
                // spin (each sync waiter has its own deadline).
                Err(_) => {
                    let _ = rustix::event::poll(&mut fds[..1], None);
                }
            }
            fds.iter().map(|fd| !fd.revents().is_empty()).collect()
        };
        if readable[0] {
            let mut sink = [0u8; 256];
            while matches!(wake_rx.read(&mut sink), Ok(n) if n > 0) {}
        }
        // Syncs asked for before this round's reads: once the reads below emptied the pipes,
        // everything written before the ask has been read.
        let pending: Vec<Option<u64>> = entries.iter().map(|e| e.shared.sync_pending()).collect();
        let mut at_eof = vec![false; entries.len()];
        for (i, entry) in entries.iter_mut().enumerate() {
            let limit = if pending[i].is_some() {
                SYNC_MAX / buf.len()
            } else if readable[i + 1] {
                READS_PER_ROUND
            } else {
                continue;
            };
            at_eof[i] = read_some(entry, &mut buf, limit);
        }
        for (entry, asked) in entries.iter().zip(&pending) {
            if let Some(asked) = asked {
                entry.shared.mark_synced(*asked);
            }
        }
        let mut i = 0;
        entries.retain(|_| {
            i += 1;
            !at_eof[i - 1]
        });
    }
}

/// Up to `limit` non-blocking reads of `entry`, fed to its handle. Returns whether it hit EOF
/// (or an error that ends it: the pipe is then dropped like one at EOF).
fn read_some(entry: &mut Entry, buf: &mut [u8], limit: usize) -> bool {
    for _ in 0..limit.max(1) {
        match rustix::io::read(entry.fd.as_fd(), &mut *buf) {
            Ok(0) => {
                let lines = entry.shared.last_line(entry.stream, entry.sink.is_some());
                pass(entry, &lines);
                entry.shared.mark_eof(entry.stream);
                return true;
            }
            Ok(n) => {
                let lines = entry
                    .shared
                    .feed(entry.stream, &buf[..n], entry.sink.is_some());
                pass(entry, &lines);
                if n < buf.len() {
                    return false; // the pipe is empty now (a pipe read returns all it has)
                }
            }
            Err(rustix::io::Errno::AGAIN) => return false,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => {
                entry.shared.mark_eof(entry.stream);
                return true;
            }
        }
    }
    false
}

fn pass(entry: &mut Entry, lines: &[Vec<u8>]) {
    if lines.is_empty() {
        return;
    }
    if let Some(sink) = &entry.sink {
        if !sink.pass(entry.stream, lines) {
            entry.sink = None;
        }
    }
}
