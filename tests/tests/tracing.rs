//! The `tracing` feature (issue 22 item 7): spawn and close are spans; readiness, each rung,
//! the exit, the reap, a hand-off to the background reaper and a cgroup kill are events, with
//! the child's pid — seen by the embedding program's own subscriber.
//!
//! The subscriber here is ours (a few lines, no tracing-subscriber): it records each event's
//! message and fields, with the names of the spans it happened in. It is the process-wide
//! default, so events of the reaper thread are seen too; this file has one test, so nothing
//! else writes to it.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use childguard::{ChildHandle, Containment, Ready, Reap, SocketMode};
use childguard_tests::{eventually, ladder, read_ready, slowserver};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// One recorded event: its message, its other fields as `k=v`, the spans it was in.
#[derive(Debug, Clone)]
struct Seen {
    message: String,
    fields: String,
    spans: Vec<&'static str>,
}

#[derive(Default)]
struct Recorder {
    next_id: AtomicU64,
    spans: Mutex<Vec<(u64, &'static str)>>,
    /// Entered spans per thread (a stack).
    entered: Mutex<Vec<(std::thread::ThreadId, u64)>>,
    seen: Mutex<Vec<Seen>>,
}

struct Fields(String, String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?}");
        } else {
            let _ = write!(self.1, "{}={value:?} ", field.name());
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.push_str(value);
        } else {
            let _ = write!(self.1, "{}={value} ", field.name());
        }
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("childguard")
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        self.spans
            .lock()
            .unwrap()
            .push((id, span.metadata().name()));
        Id::from_u64(id)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(String::new(), String::new());
        event.record(&mut fields);
        let me = std::thread::current().id();
        let names = self.spans.lock().unwrap().clone();
        let spans = self
            .entered
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t == me)
            .filter_map(|(_, id)| names.iter().find(|(n, _)| n == id).map(|(_, name)| *name))
            .collect();
        self.seen.lock().unwrap().push(Seen {
            message: fields.0,
            fields: fields.1,
            spans,
        });
    }
    fn enter(&self, span: &Id) {
        let me = std::thread::current().id();
        self.entered.lock().unwrap().push((me, span.into_u64()));
    }
    fn exit(&self, span: &Id) {
        let me = std::thread::current().id();
        let mut entered = self.entered.lock().unwrap();
        if let Some(at) = entered.iter().rposition(|e| *e == (me, span.into_u64())) {
            entered.remove(at);
        }
    }
}

static RECORDER: std::sync::OnceLock<&'static Recorder> = std::sync::OnceLock::new();

fn recorder() -> &'static Recorder {
    RECORDER.get_or_init(|| {
        let r: &'static Recorder = Box::leak(Box::default());
        tracing::subscriber::set_global_default(RefSubscriber(r)).expect("first subscriber");
        r
    })
}

/// `set_global_default` takes a value; this one forwards to the leaked recorder, so the test
/// can read what it saw.
struct RefSubscriber(&'static Recorder);

impl Subscriber for RefSubscriber {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        self.0.enabled(m)
    }
    fn new_span(&self, s: &Attributes<'_>) -> Id {
        self.0.new_span(s)
    }
    fn record(&self, i: &Id, r: &Record<'_>) {
        self.0.record(i, r)
    }
    fn record_follows_from(&self, a: &Id, b: &Id) {
        self.0.record_follows_from(a, b)
    }
    fn event(&self, e: &Event<'_>) {
        self.0.event(e)
    }
    fn enter(&self, i: &Id) {
        self.0.enter(i)
    }
    fn exit(&self, i: &Id) {
        self.0.exit(i)
    }
}

/// The events that carry `pid=<pid>`, in order.
fn events_of(pid: u32) -> Vec<Seen> {
    let tag = format!("pid={pid} ");
    let seen = recorder().seen.lock().unwrap();
    seen.iter()
        .filter(|s| s.fields.contains(&tag))
        .cloned()
        .collect()
}

fn messages(events: &[Seen]) -> Vec<&str> {
    events.iter().map(|s| s.message.as_str()).collect()
}

/// slowserver ignoring TERM (and EOF), ready by `READY=1`, closed by `TERM:300ms,KILL:20s`
/// with every rung sent (`NOSKIP`: the ignored TERM too, so that both rungs are traced).
fn term_ignoring_server(contained: bool, reap: Reap) -> ChildHandle {
    let server = slowserver(&["--notify", "--ignore", "TERM", "--ignore-eof"]);
    let mut builder = ChildHandle::builder(server)
        .socket(SocketMode::Stdio)
        .ready(Ready::Notify)
        .reap(reap)
        .ladder(ladder("NOSKIP,TERM:300ms,KILL:20s"));
    if contained {
        builder = builder.contain(Containment::Cgroup);
    }
    builder
        .spawn()
        .expect("spawn with Ready::Notify (contained: needs a writable cgroup v2; CI runs as root)")
}

#[test]
fn spawn_readiness_rungs_exit_reap_hand_off_and_cgroup_kill_are_traced() {
    recorder();

    // A contained server that ignores TERM: rung 0 TERM reaches it and is ignored, rung 1 KILL
    // goes through cgroup.kill.
    let handle = term_ignoring_server(true, Reap::Blocking);
    let pid = handle.id().unwrap();
    let report = handle.close().expect("close");
    assert!(report.reaped.is_some(), "{report}");

    let events = events_of(pid);
    let names = messages(&events);
    for expected in ["spawned", "ready", "rung", "exited", "reaped"] {
        assert!(
            names.contains(&expected),
            "no {expected:?} event for pid {pid}: {events:#?}"
        );
    }
    // The backend that holds the tree is named (issue 50): here the cgroup, nothing passed over.
    assert!(
        events
            .iter()
            .any(|e| e.message == "contained" && e.fields.contains("backend=cgroup")),
        "no contained event naming the cgroup: {events:#?}"
    );
    let at = |m: &str| names.iter().position(|n| *n == m).unwrap();
    assert!(
        at("spawned") < at("ready") && at("ready") < at("rung"),
        "{names:?}"
    );
    assert!(
        at("rung") < at("exited") && at("exited") <= at("reaped"),
        "{names:?}"
    );
    let rungs: Vec<&Seen> = events.iter().filter(|s| s.message == "rung").collect();
    assert_eq!(rungs.len(), 2, "TERM then KILL: {rungs:#?}");
    assert!(rungs[0].fields.contains("signal=TERM") && rungs[0].fields.contains("rung=0"));
    assert!(rungs[1].fields.contains("signal=KILL") && rungs[1].fields.contains("rung=1"));
    // Spans: spawned and ready inside `spawn`; the rungs of a blocking close inside `close`.
    let spawned = &events[at("spawned")];
    assert!(spawned.spans.contains(&"spawn"), "{spawned:?}");
    assert!(events[at("ready")].spans.contains(&"spawn"));
    assert!(
        rungs.iter().all(|r| r.spans.contains(&"close")),
        "{rungs:#?}"
    );
    let dir = report
        .cgroup
        .as_ref()
        .expect("a cgroup report")
        .path
        .clone();
    let path = format!("path={} ", dir.display());
    let killed = recorder()
        .seen
        .lock()
        .unwrap()
        .iter()
        .any(|s| s.message == "cgroup killed" && s.fields.contains(&path));
    assert!(killed, "no 'cgroup killed' event for {}", dir.display());

    // A background close: handed off, then climbed and reaped by the reaper thread.
    let handle = term_ignoring_server(false, Reap::Background);
    let pid = handle.id().unwrap();
    let report = handle.close().expect("background close");
    assert!(
        report.reaped.is_none(),
        "a TERM-ignoring server cannot be gone at once: {report}"
    );
    assert!(
        eventually(Duration::from_secs(60), || messages(&events_of(pid))
            .contains(&"reaped")),
        "the reaper never reaped {pid}: {:#?}",
        events_of(pid)
    );
    let names = messages(&events_of(pid)).join(",");
    assert!(names.contains("handed off"), "{names}");
    let pos = |m: &str| names.find(m).unwrap();
    assert!(pos("handed off") < pos("reaped"), "{names}");
}

/// A rung the server ignores is skipped, and the skip is an event of its own ("rung skipped"),
/// before the rung that was sent.
#[test]
fn a_skipped_rung_is_traced() {
    recorder();
    let server = slowserver(&["--ignore", "HUP", "--ignore-eof"]);
    let handle = ChildHandle::builder(server)
        .socket(SocketMode::Stdio)
        .ladder(ladder("HUP:10s,TERM:10s,KILL:5s"))
        .spawn()
        .unwrap();
    read_ready(&handle);
    let pid = handle.id().unwrap();
    let report = handle.close().expect("close");
    assert_eq!(report.skipped.len(), 1, "{report}");
    let events = events_of(pid);
    let names = messages(&events);
    let skipped = names.iter().position(|n| *n == "rung skipped");
    let sent = names.iter().position(|n| *n == "rung");
    assert!(
        skipped.is_some() && skipped < sent,
        "no 'rung skipped' before the rung sent: {events:#?}"
    );
    let event = &events[skipped.unwrap()];
    assert!(
        event.fields.contains("signal=HUP") && event.fields.contains("rung=0"),
        "{event:?}"
    );
}
