//! The readiness conditions: [`Ready`] and its builders, [`NotifyAccess`], and how a condition
//! is described in errors and reports.

use super::connect::ConnectTo;
use super::exec::ExecCheck;
use super::http::HttpCheck;
use super::probe::ReadyParseError;

/// Who may send on the private `NOTIFY_SOCKET` of [`Ready::Notify`](crate::Ready::Notify)
/// ([`Builder::notify_access`](crate::Builder::notify_access)), after systemd's
/// `NotifyAccess=`. Datagrams from anyone else are ignored and listed in
/// [`NotifyReport::ignored`](crate::NotifyReport::ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NotifyAccess {
    /// Only the main process: the child that was spawned (systemd's `NotifyAccess=main`, its
    /// default for `Type=notify`). Right for a server that sends from its own main process
    /// (postgres, redis) and is started directly.
    Main,
    /// Any process of the child's cgroup when it is [contained](crate::Builder::contain), else
    /// the child and its descendants (systemd's `NotifyAccess=all` is the cgroup). The
    /// default, unlike systemd's: a child here is often a wrapper — `runuser -u postgres --
    /// postgres …` forks and waits, and postgres, its child, sends `READY=1`; `sh -c
    /// 'helper; exec server'` sends from a helper — where systemd would be told the server's
    /// pid by `PIDFile=` or `MAINPID=`.
    ///
    /// Contained, membership is the cgroup the kernel recorded for the sender, kept even after
    /// it was reaped: a helper that sends `READY=1` and exits at once, and a double-forked
    /// daemon, count. Uncontained, the kernel forgets a reaped process's parent: a sender
    /// reaped before its datagram is read, or one that left the child's tree, is refused with
    /// a note saying so — contain the child for those.
    #[default]
    All,
}

/// When the server counts as ready (see [`Builder::ready`](crate::Builder::ready)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ready {
    /// The server sends `READY=1` on a private `NOTIFY_SOCKET`, as for a systemd
    /// `Type=notify` service (postgres ≥ 15 built with systemd support, redis with
    /// `--supervised systemd`, nginx does not). Linux only.
    ///
    /// - `NOTIFY_SOCKET` names a datagram socket in a new 0700 directory (under
    ///   [`runtime_dir`](crate::Builder::runtime_dir), else `$XDG_RUNTIME_DIR`, else
    ///   `/tmp`), removed when the handle closes.
    /// - Only datagrams from whom [`notify_access`](crate::Builder::notify_access) admits
    ///   count (default [`NotifyAccess::All`]: the child's cgroup when contained, else the
    ///   child and its descendants), judged by the sender the kernel attached when it sent
    ///   (`SCM_PIDFD`, `SCM_CREDENTIALS`); others, and malformed ones, are ignored and listed
    ///   in [`NotifyReport::ignored`](crate::NotifyReport::ignored).
    /// - `STATUS=` is kept (the latest); `ERRNO=` before `READY=1` fails the spawn.
    /// - `EXTEND_TIMEOUT_USEC=` extends the ready timeout, and during the close the current
    ///   rung's grace, to that long after the message (systemd's semantics: the server must
    ///   keep sending), but never more than [`notify_extend_max`](crate::Builder::notify_extend_max)
    ///   beyond it. Honoured on every close path, because the socket belongs to the one
    ///   climb (`climb.rs`) that every driver steps: each step first reads what came
    ///   (`STOPPING=1`, `EXTEND_TIMEOUT_USEC=`), then sends the rungs that are due. The
    ///   blocking close (`close`, `drop` outside a runtime) and `close_async` also wake on
    ///   the socket; the shared reaper (`Reap::Background`, a drop inside a runtime, a
    ///   cancelled `close_async`) holds it in its epoll set until the ladder is over;
    ///   [`output`](crate::ChildHandle::output) reads it at each wake-up (its pipes, the
    ///   pidfd, the deadline) before any rung. After a hand-off to the reaper the report has
    ///   what was heard until then; the socket and its directory are removed with the climb.
    /// - `STOPPING=1` during the close is recorded in
    ///   [`CloseReport::notify`](crate::CloseReport::notify).
    Notify,
    /// A line of the server's output contains this text. Enables a
    /// [`Capture`](crate::Capture) of stdout and stderr (stderr only with
    /// [`SocketMode::Stdio`](crate::SocketMode::Stdio)) unless the builder has one.
    Output(String),
    /// A connection to this address is accepted (then closed at once). Retried every
    /// 0.1 ms, doubling to 0.5 ms.
    ///
    /// Who answers is not checked: any process that binds the port or the path first — another
    /// local user's included — makes the server "ready". On a machine shared with users you do
    /// not trust, prefer [`Ready::Notify`] (only the child's tree is heard, on a socket in a
    /// private directory) or a Unix path in a directory only you can write (see
    /// docs/security.md). The same holds for [`Ready::Http`].
    Connect(ConnectTo),
    /// An HTTP/1.1 `GET` answers with a 2xx status, or the one asked for
    /// ([`HttpCheck::status`]); over TCP or a Unix socket, no TLS ([`Ready::http`]; the URL
    /// forms are [`HttpCheck`]'s).
    ///
    /// Each attempt: a non-blocking `connect`, the request (`Connection: close`), and the
    /// status line read (at most [`MAX_STATUS_LINE`](crate::MAX_STATUS_LINE) bytes, within
    /// the [`attempt_timeout`](HttpCheck::attempt_timeout), default 1 s), every wait of it in
    /// the child's one `poll` — the child's exit and the caller's
    /// [`interrupt`](crate::Builder::interrupt) end it at once. The body is not read.
    /// Retried: after *nothing listening* (refused, no socket file yet) every 0.1 ms doubling
    /// to 0.5 ms, as [`Ready::Connect`]; after an *answer that is not ready* (another status,
    /// not HTTP, reset, no status line in time) every 10 ms doubling to 100 ms, so a server
    /// answering `503` while it starts is not flooded. A timeout's error quotes the last
    /// answer (an attempt the timeout cut short only if none finished). A failure no retry fixes (`EACCES` on the socket) fails the spawn at once.
    Http(HttpCheck),
    /// A probe command exits 0 ([`Ready::exec`]): `pg_isready -h /run/pg`, `redis-cli -s
    /// /run/r.sock ping`.
    ///
    /// Each attempt runs the command (no shell) as our own child, outside the server's cgroup
    /// (why: [`ExecCheck`]), its stdin `/dev/null`, its output captured; one that runs past
    /// its [`attempt_timeout`](ExecCheck::attempt_timeout) (default 5 s) is killed and reaped
    /// by its close (ladder `KILL:1s`, its own process group). The first attempt starts at
    /// once, the next 10 ms after one ends, the pause doubling to 100 ms. The server's exit or
    /// the caller's interrupt ends the wait at once (the probe running then is closed the
    /// same way). A timeout's error quotes how the last finished probe ended and the end of its output
    /// (at most [`EXEC_OUTPUT_LINES`](crate::EXEC_OUTPUT_LINES) lines). A probe that cannot be
    /// started (no such program) fails the spawn at once.
    Exec(ExecCheck),
    /// With [`SocketMode::Activation`](crate::SocketMode::Activation): the server accepted our
    /// connection on the activation socket (what activation always awaits, bounded by
    /// [`connect_timeout`](crate::Builder::connect_timeout)). Any other mode: a
    /// [`Config`](crate::ErrorKind::Config) error.
    Accepted,
    /// Ready as soon as one of these holds ([`Ready::any`]).
    Any(Vec<Ready>),
    /// Ready once every one of these has held ([`Ready::all`]); each counts from the moment it
    /// was first seen (a port that accepted once need not accept again).
    All(Vec<Ready>),
}

impl Ready {
    /// [`Ready::Connect`] to a TCP address or a Unix path. Whoever binds it first answers: see
    /// [`Ready::Connect`] for what that means on a shared machine.
    pub fn connect(to: impl Into<ConnectTo>) -> Ready {
        Ready::Connect(to.into())
    }

    /// [`Ready::Http`] for `url`: `http://127.0.0.1:8080/health`,
    /// `http+unix://%2Frun%2Fapp.sock/health` (see [`HttpCheck`]); ready on any 2xx. For
    /// another status: `Ready::Http(HttpCheck::parse(url)?.status(204))`.
    ///
    /// # Errors
    ///
    /// A [`ReadyParseError`] naming the URL: not `http://` or `http+unix://` (`https://`
    /// included: no TLS), no host, a bad port, a name that does not resolve.
    pub fn http(url: &str) -> Result<Ready, ReadyParseError> {
        HttpCheck::parse(url).map(Ready::Http)
    }

    /// [`Ready::Exec`] for the probe `argv` (no shell): `Ready::exec(["pg_isready", "-h",
    /// "/run/pg"])`.
    ///
    /// # Errors
    ///
    /// A [`ReadyParseError`] for an empty `argv` or program name.
    pub fn exec<I, S>(argv: I) -> Result<Ready, ReadyParseError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        ExecCheck::new(argv).map(Ready::Exec)
    }

    /// [`Ready::Output`] for a line containing `text`.
    pub fn output(text: impl Into<String>) -> Ready {
        Ready::Output(text.into())
    }

    /// Ready when the first of `conditions` holds: e.g. `READY=1` from a server built with
    /// systemd support, or its port for one built without —
    /// `Ready::any([Ready::Notify, Ready::connect(addr)])`.
    ///
    /// What happens: everything each condition needs is made before the fork (the
    /// `NOTIFY_SOCKET`, the capture), then the conditions are checked in turn, every 0.1 ms
    /// doubling to 0.5 ms (as [`Ready::Connect`] retries; the notify socket and the child's
    /// pidfd also end each pause), until one holds, the child exits, or the
    /// [`ready_timeout`](crate::Builder::ready_timeout) passes — the same outcomes as a single
    /// condition. Refused as [`Config`](crate::ErrorKind::Config) errors: an empty list, a
    /// nested `any`/`all`, and more than one [`Ready::Output`] (the capture watches one text).
    pub fn any(conditions: impl IntoIterator<Item = Ready>) -> Ready {
        Ready::Any(conditions.into_iter().collect())
    }

    /// Ready once every one of `conditions` has held, each from the moment it was first seen:
    /// e.g. `READY=1` *and* the HTTP port accepting. Checked, and refused, as [`Ready::any`];
    /// the error on a timeout names every condition of the list.
    pub fn all(conditions: impl IntoIterator<Item = Ready>) -> Ready {
        Ready::All(conditions.into_iter().collect())
    }

    /// The single conditions: the list of an `Any`/`All`, or this one.
    pub(super) fn parts(&self) -> &[Ready] {
        match self {
            Ready::Any(parts) | Ready::All(parts) => parts,
            one => std::slice::from_ref(one),
        }
    }

    /// What was awaited, for error messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Ready::Notify => "READY=1 on NOTIFY_SOCKET".into(),
            Ready::Output(text) => format!("an output line containing {text:?}"),
            Ready::Connect(to) => format!("a connection to {to} to be accepted"),
            Ready::Http(check) => check.to_string(),
            Ready::Exec(check) => check.to_string(),
            Ready::Accepted => "the activation socket's accept".into(),
            Ready::Any(parts) => format!("any of: {}", describe_all(parts)),
            Ready::All(parts) => format!("all of: {}", describe_all(parts)),
        }
    }
}

impl Ready {
    /// The condition in a few words, before what its last attempt got.
    pub(super) fn describe_short(&self) -> String {
        match self {
            Ready::Http(check) => format!("GET {}", check.url()),
            Ready::Exec(check) => format!("probe `{}`", super::exec::words(check.argv())),
            other => other.describe(),
        }
    }
}

impl From<HttpCheck> for Ready {
    fn from(check: HttpCheck) -> Ready {
        Ready::Http(check)
    }
}

impl From<ExecCheck> for Ready {
    fn from(check: ExecCheck) -> Ready {
        Ready::Exec(check)
    }
}

fn describe_all(parts: &[Ready]) -> String {
    parts
        .iter()
        .map(Ready::describe)
        .collect::<Vec<_>>()
        .join("; ")
}
