//! The capture drain: every captured pipe of every handle, read by the event loop
//! ([`crate::core::event_loop`]) — no thread of its own.
//!
//! Each pipe's read end is an io source of the loop (non-blocking, so a read never blocks the
//! other sources); what is read goes to the handle's [`Shared`] state (tail, line assembly,
//! the readiness watch), and complete lines a user looks at are queued for the callback
//! thread ([`super::dispatch`]) — never passed on here, so a slow, blocking or re-entrant
//! `on_line` or passthrough write never delays the reading of any pipe. A pipe leaves the loop
//! at EOF — when the child and every descendant holding it are gone — and is closed then.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dispatch::Sink;
use super::{OutputStream, Shared};
use crate::core::event_loop::{self, IoId, Ops};

/// One captured pipe (its fd is the loop's).
struct Entry {
    stream: OutputStream,
    shared: Arc<Shared>,
    sink: Option<Arc<Sink>>,
}

thread_local! {
    /// On the loop thread: every captured pipe, by its io source.
    static ENTRIES: RefCell<HashMap<IoId, Entry>> = RefCell::default();
    /// On the loop thread: the read buffer.
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// On the loop thread: the sync handler is in place.
    static SYNCING: Cell<bool> = const { Cell::new(false) };
}

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

/// The event loop, started if need be; a failed start is tried again on the next use.
pub(super) fn start() -> io::Result<()> {
    event_loop::get().map(drop)
}

/// Wakes the loop (a sync was asked for).
pub(super) fn wake() {
    if let Some(lp) = event_loop::running() {
        lp.wake();
    }
}

/// Hands `streams` of one handle to the loop.
pub(super) fn register(
    streams: Vec<(OutputStream, OwnedFd)>,
    shared: &Arc<Shared>,
    sink: Option<Arc<Sink>>,
) -> io::Result<()> {
    let lp = event_loop::get()?;
    let mut entries = Vec::with_capacity(streams.len());
    for (stream, fd) in streams {
        // Our read end is ours alone (std made it close-on-exec; the child has the write end),
        // so its O_NONBLOCK affects no other process.
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, flags | rustix::fs::OFlags::NONBLOCK)?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let _ = rustix::pipe::fcntl_setpipe_size(&fd, CHUNK);
        let entry = Entry {
            stream,
            shared: Arc::clone(shared),
            sink: sink.clone(),
        };
        entries.push((fd, entry));
    }
    lp.post(move |ops| {
        if !SYNCING.replace(true) {
            ops.on_wake(serve_syncs);
        }
        for (fd, entry) in entries {
            add(ops, fd, entry);
        }
    });
    Ok(())
}

/// On the loop thread: makes `fd` a source. Refused (epoll's `ENOMEM`, `ENOSPC`): tried again
/// in 100 ms — the pipe is never dropped, which would leave the server a broken pipe.
fn add(ops: &mut Ops, fd: OwnedFd, entry: Entry) {
    match ops.add_io(fd, Box::new(on_readable)) {
        Ok(id) => {
            ENTRIES.with(|e| e.borrow_mut().insert(id, entry));
        }
        Err((fd, _)) => {
            let at = Instant::now() + Duration::from_millis(100);
            ops.add_timer(at, move |ops| add(ops, fd, entry));
        }
    }
}

/// On the loop thread: the pipe `id` is readable (or at EOF).
fn on_readable(ops: &mut Ops, id: IoId) {
    read_from(ops, id, READS_PER_ROUND);
}

/// Up to `limit` reads of the pipe `id`; at EOF it leaves the loop and closes.
fn read_from(ops: &mut Ops, id: IoId, limit: usize) {
    let Some(fd) = ops.fd(id) else { return };
    let eof = ENTRIES.with(|entries| {
        let mut entries = entries.borrow_mut();
        let Some(entry) = entries.get_mut(&id) else {
            return false;
        };
        BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            if buf.len() < CHUNK {
                buf.resize(CHUNK, 0);
            }
            read_some(fd, entry, &mut buf, limit)
        })
    });
    if eof {
        // Race avoided (an fd outliving the close): the pipe is closed *before* a waiter hears
        // of its EOF, so a close whose sync ended on that EOF returns with the pipe gone.
        drop(ops.remove_io(id));
        if let Some(entry) = ENTRIES.with(|e| e.borrow_mut().remove(&id)) {
            entry.shared.mark_eof(entry.stream);
        }
    }
}

/// On every wake-up of the loop: syncs asked for before it. Once the reads below emptied the
/// pipes, everything written before the ask has been read.
///
/// Race avoided (lost sync): a sync counts its ask *before* it wakes the loop, and the loop
/// reads its wake socket empty before it runs this: an ask this round does not see comes with
/// a wake-up not yet read.
fn serve_syncs(ops: &mut Ops) {
    let pending: Vec<(IoId, Arc<Shared>, u64)> = ENTRIES.with(|e| {
        e.borrow()
            .iter()
            .filter_map(|(id, entry)| {
                let asked = entry.shared.sync_pending()?;
                Some((*id, Arc::clone(&entry.shared), asked))
            })
            .collect()
    });
    for (id, _, _) in &pending {
        read_from(ops, *id, SYNC_MAX / CHUNK);
    }
    for (_, shared, asked) in pending {
        shared.mark_synced(asked);
    }
}

/// On the loop thread: reads each pipe of one handle (`shared`) to empty now, as a sync
/// does — for a caller that runs on the loop itself (the supervisor at a child's exit) and so
/// cannot wait for a sync, which the loop serves in a later round.
///
/// Race avoided (an exit seen before the last output): the child's pidfd and its pipes are
/// sources of the same loop, and one round may hand us the exit before the pipe's data; what
/// the child wrote before it exited is in the pipe by then, so reading it now puts it in the
/// tail before the exit is reported.
pub(super) fn read_now(ops: &mut Ops, shared: &Arc<Shared>) {
    let ids: Vec<IoId> = ENTRIES.with(|e| {
        e.borrow()
            .iter()
            .filter(|(_, entry)| Arc::ptr_eq(&entry.shared, shared))
            .map(|(id, _)| *id)
            .collect()
    });
    for id in ids {
        read_from(ops, id, SYNC_MAX / CHUNK);
    }
}

/// Up to `limit` non-blocking reads of `fd`, fed to its handle. Returns whether it hit EOF
/// (or an error that ends it: the pipe is then dropped like one at EOF); the caller closes the
/// pipe, then marks the stream's EOF.
fn read_some(
    fd: std::os::fd::BorrowedFd<'_>,
    entry: &mut Entry,
    buf: &mut [u8],
    limit: usize,
) -> bool {
    let collect = entry.sink.as_ref().is_some_and(|s| s.wants_lines());
    for _ in 0..limit.max(1) {
        match rustix::io::read(fd.as_fd(), &mut *buf) {
            Ok(0) => {
                let lines = entry.shared.last_line(entry.stream, collect);
                pass(entry, lines);
                return true;
            }
            Ok(n) => {
                let lines = entry.shared.feed(entry.stream, &buf[..n], collect);
                pass(entry, lines);
                if n < buf.len() {
                    return false; // the pipe is empty now (a pipe read returns all it has)
                }
            }
            Err(rustix::io::Errno::AGAIN) => return false,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return true,
        }
    }
    false
}

/// Queues `lines` for the callback thread (never calls anything of the user's here).
fn pass(entry: &Entry, lines: Vec<Vec<u8>>) {
    if let (Some(sink), false) = (&entry.sink, lines.is_empty()) {
        sink.enqueue(entry.stream, lines);
    }
}
