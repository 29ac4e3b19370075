//! `cg_builder`: what to spawn and how, collected call by call, turned into a
//! `childguard::Builder` by `cg_spawn`.

use std::ffi::{c_char, OsString};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::time::Duration;

use childguard::{
    Capture, ConnectTo, Containment, ExecCheck, HttpCheck, KillMode, Ladder, Ready, Signal,
    SocketMode,
};

use crate::error::{cg_status, guard, guard_status, Failure};
use crate::ptr;

/// No socket: the child's stdio is inherited from this process.
pub const CG_SOCKET_NONE: i32 = 0;
/// A `socketpair(2)`: the child's end on its fds 0 and 1 (as libnbd's `connect_command`), ours
/// is `cg_socket_fd()`.
pub const CG_SOCKET_STDIO: i32 = 1;
/// systemd socket activation: a listening Unix socket in a private directory reaches the child
/// as fd 3 (`LISTEN_FDS=1`, `LISTEN_PID`, `LISTEN_FDNAMES`); `cg_spawn` connects to it and
/// `cg_socket_fd()` is that connection.
pub const CG_SOCKET_ACTIVATION: i32 = 2;

/// No containment: the ladder reaches the child (or its process group).
pub const CG_CONTAIN_NONE: i32 = 0;
/// A cgroup v2 of the child's own (Linux): `cg_spawn` fails with `CG_ERR_CONTAINMENT` if it
/// cannot be made; the `KILL` rung kills every member; the close ends when it is empty.
pub const CG_CONTAIN_CGROUP: i32 = 1;
/// The best backend that works here — a cgroup, else a PID namespace (in a user namespace of
/// our own ids without root), else a subreaper — falling back to a process group if none can
/// be had (the report says which, and why the others were passed over).
pub const CG_CONTAIN_BEST_EFFORT: i32 = 2;
/// The whole tree in a new PID namespace whose PID 1 is childguard's tree init; `cg_spawn`
/// fails with `CG_ERR_CONTAINMENT` if the namespace is refused.
pub const CG_CONTAIN_PID_NAMESPACE: i32 = 3;
/// childguard's tree init as a subreaper: every orphan of the tree is re-parented to it and
/// killed at the close.
pub const CG_CONTAIN_SUBREAPER: i32 = 4;
/// As `CG_CONTAIN_BEST_EFFORT`, but `cg_spawn` fails with `CG_ERR_CONTAINMENT` instead of
/// falling back to a process group.
pub const CG_CONTAIN_ANY: i32 = 5;

/// With containment: the catchable rungs go to the child (or its process group) only, as
/// systemd's `KillMode=mixed` (the default); the `KILL` rung reaches every member of the cgroup.
pub const CG_KILL_MODE_MIXED: i32 = 0;
/// With containment: every rung goes to every process in the child's cgroup, as systemd's
/// `KillMode=control-group`.
pub const CG_KILL_MODE_CONTROL_GROUP: i32 = 1;

/// Capture the child's stderr.
pub const CG_CAPTURE_STDERR: i32 = 1;
/// Capture the child's stdout (not with `CG_SOCKET_STDIO`: stdout is the socket).
pub const CG_CAPTURE_STDOUT: i32 = 2;
/// Capture both.
pub const CG_CAPTURE_BOTH: i32 = 3;

/// The configuration of one spawn, made by `cg_builder_new()`.
///
/// Opaque. Ownership: the caller's until it is passed to `cg_spawn()` (which always consumes
/// it, on success and on failure) or freed with `cg_builder_free()`. Thread-safety: an object
/// may be used by one thread at a time; different builders on different threads are fine.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone)]
pub struct cg_builder {
    pub(crate) argv: Vec<OsString>,
    pub(crate) env: Vec<(OsString, Option<OsString>)>,
    /// `cg_builder_env_clear`: `env` applies to an empty environment.
    pub(crate) env_clear: bool,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) socket: SocketMode,
    pub(crate) ladder: Option<Ladder>,
    pub(crate) process_group: bool,
    /// `cg_builder_skip_ignored`.
    pub(crate) skip_ignored: bool,
    pub(crate) containment: Containment,
    pub(crate) kill_mode: KillMode,
    pub(crate) cgroup_parent: Option<PathBuf>,
    /// `cg_builder_limit`.
    pub(crate) limits: childguard::Limits,
    pub(crate) ready: Option<Ready>,
    pub(crate) ready_timeout: Option<Duration>,
    /// `cg_builder_watchdog`.
    pub(crate) watchdog: Option<Duration>,
    pub(crate) exit_with_parent: bool,
    pub(crate) death_signal: Option<Signal>,
    pub(crate) capture: Option<Capture>,
    /// `cg_builder_capture_tail`'s bytes and lines, applied to `capture` by `cg_spawn`.
    pub(crate) tail: Option<(usize, usize)>,
    /// `cg_builder_cancel`: the flag the spawn's waits read.
    pub(crate) interrupt: Option<childguard::Interrupt>,
}

/// A new builder for the program `argv[0]` with arguments `argv[1..]`; `argv` is a
/// NULL-terminated array of NUL-terminated strings (copied: the caller keeps ownership of
/// `argv`). The program is looked up in `PATH` when it has no `/`.
///
/// Returns NULL on error (`argv` NULL or empty): see `cg_last_error_message()`.
///
/// Ownership: the returned builder is the caller's: pass it to `cg_spawn()` or free it with
/// `cg_builder_free()`. Thread-safety: safe from any thread.
#[no_mangle]
pub extern "C" fn cg_builder_new(argv: *const *const c_char) -> *mut cg_builder {
    guard(
        "cg_builder_new",
        |_| std::ptr::null_mut(),
        || {
            let argv: Vec<OsString> = ptr::string_array(argv, "argv")?
                .into_iter()
                .map(|s| OsString::from_vec(s.into_bytes()))
                .collect();
            if argv.is_empty() {
                return Err(Failure::invalid(
                    "argv is empty (argv[0] must name the program)",
                ));
            }
            Ok(ptr::give(cg_builder {
                argv,
                env: Vec::new(),
                env_clear: false,
                cwd: None,
                socket: SocketMode::None,
                ladder: None,
                process_group: false,
                skip_ignored: true,
                containment: Containment::None,
                kill_mode: KillMode::Mixed,
                cgroup_parent: None,
                limits: childguard::Limits::default(),
                ready: None,
                ready_timeout: None,
                watchdog: None,
                exit_with_parent: false,
                death_signal: None,
                capture: None,
                tail: None,
                interrupt: None,
            }))
        },
    )
}

/// Frees a builder that was not passed to `cg_spawn()`. NULL is a no-op.
///
/// Thread-safety: not while another thread uses the same builder.
#[no_mangle]
pub extern "C" fn cg_builder_free(builder: *mut cg_builder) {
    guard(
        "cg_builder_free",
        |_| (),
        || {
            if !builder.is_null() {
                drop(ptr::take(builder, "builder")?);
            }
            Ok(())
        },
    )
}

/// Runs `f` on the builder; NULL is an error.
fn with(
    function: &str,
    builder: *mut cg_builder,
    f: impl FnOnce(&mut cg_builder) -> Result<(), Failure>,
) -> cg_status {
    guard_status(function, || f(ptr::borrow_mut(builder, "builder")?))
}

/// Sets `key=value` in the child's environment (both copied). The child's environment is
/// this process's (empty after `cg_builder_env_clear`) with these settings applied, in every
/// socket mode; the mode adds only its own variables (`LISTEN_FDS`, `LISTEN_FDNAMES`,
/// `LISTEN_PID` with `CG_SOCKET_ACTIVATION`, `NOTIFY_SOCKET` with `cg_builder_ready_notify`).
///
/// Thread-safety (all `cg_builder_*` setters): one thread at a time per builder.
#[no_mangle]
pub extern "C" fn cg_builder_env(
    builder: *mut cg_builder,
    key: *const c_char,
    value: *const c_char,
) -> cg_status {
    with("cg_builder_env", builder, |b| {
        let key = ptr::os_str(key, "key")?.to_owned();
        let value = ptr::os_str(value, "value")?.to_owned();
        if key.is_empty() || key.as_encoded_bytes().contains(&b'=') {
            return Err(Failure::invalid(format!(
                "key {key:?} is empty or contains '='"
            )));
        }
        b.env.push((key, Some(value)));
        Ok(())
    })
}

/// Removes `key` from the child's environment (copied).
#[no_mangle]
pub extern "C" fn cg_builder_env_remove(builder: *mut cg_builder, key: *const c_char) -> cg_status {
    with("cg_builder_env_remove", builder, |b| {
        b.env.push((ptr::os_str(key, "key")?.to_owned(), None));
        Ok(())
    })
}

/// Starts the child's environment empty instead of a copy of this process's (std's
/// `Command::env_clear`, `env -i`): it gets only what `cg_builder_env` sets, whether called
/// before or after this, plus the variables of its socket mode and readiness. Use it so that
/// nothing of this process's environment (a secret, say) reaches the server.
#[no_mangle]
pub extern "C" fn cg_builder_env_clear(builder: *mut cg_builder) -> cg_status {
    with("cg_builder_env_clear", builder, |b| {
        b.env_clear = true;
        Ok(())
    })
}

/// The child's working directory (copied; default: this process's).
#[no_mangle]
pub extern "C" fn cg_builder_cwd(builder: *mut cg_builder, dir: *const c_char) -> cg_status {
    with("cg_builder_cwd", builder, |b| {
        b.cwd = Some(PathBuf::from(ptr::os_str(dir, "dir")?));
        Ok(())
    })
}

/// How the child is connected: `CG_SOCKET_NONE` (default), `CG_SOCKET_STDIO` or
/// `CG_SOCKET_ACTIVATION`. With activation, `name` (nullable, copied) is `LISTEN_FDNAMES`
/// (default `unknown`); it must be NULL for the other modes.
#[no_mangle]
pub extern "C" fn cg_builder_socket(
    builder: *mut cg_builder,
    mode: i32,
    name: *const c_char,
) -> cg_status {
    with("cg_builder_socket", builder, |b| {
        let name = match name.is_null() {
            true => None,
            false => Some(ptr::utf8(name, "name")?.to_owned()),
        };
        b.socket = match (mode, name) {
            (CG_SOCKET_NONE, None) => SocketMode::None,
            (CG_SOCKET_STDIO, None) => SocketMode::Stdio,
            (CG_SOCKET_ACTIVATION, name) => SocketMode::Activation { name },
            (CG_SOCKET_NONE | CG_SOCKET_STDIO, Some(_)) => {
                return Err(Failure::invalid("name is only for CG_SOCKET_ACTIVATION"))
            }
            (other, _) => {
                return Err(Failure::invalid(format!(
                    "mode {other} is not CG_SOCKET_NONE, CG_SOCKET_STDIO or CG_SOCKET_ACTIVATION"
                )))
            }
        };
        Ok(())
    })
}

/// The ladder climbed on close, as text: e.g. `"EOF:200ms,HUP:1s,TERM:2s,KILL:5s"` (the
/// default is `HUP:1s,TERM:2s,KILL:5s`). Signal names with or without `SIG`, or numbers;
/// durations as `200ms`, `2s`, `1min`. A string that does not parse is `CG_ERR_CONFIG`, with
/// the parser's message naming the rung and why.
#[no_mangle]
pub extern "C" fn cg_builder_ladder(builder: *mut cg_builder, ladder: *const c_char) -> cg_status {
    with("cg_builder_ladder", builder, |b| {
        let text = ptr::utf8(ladder, "ladder")?;
        let parsed = text
            .parse::<Ladder>()
            .map_err(|e| Failure::new(cg_status::CG_ERR_CONFIG, format!("ladder {text:?}: {e}")))?;
        b.ladder = Some(parsed);
        Ok(())
    })
}

/// `on` (nonzero): the child leads a new process group and every rung goes to the whole group;
/// members that outlive the leader get the remaining rungs.
#[no_mangle]
pub extern "C" fn cg_builder_process_group(builder: *mut cg_builder, on: bool) -> cg_status {
    with("cg_builder_process_group", builder, |b| {
        b.process_group = on;
        Ok(())
    })
}

/// `on` (nonzero, the default): right before each catchable rung but the last, the close reads
/// what the child does with its signal (Linux: `SigIgn` in `/proc/PID/status`), and skips a
/// rung whose signal it ignores — nothing sent, its grace not spent (redis ignores `SIGHUP`).
/// The report's `skipped` lists such rungs. `KILL` is never skipped. `false`: every rung is
/// sent as written (as is also asked by `NOSKIP,` first in `cg_builder_ladder`'s text).
#[no_mangle]
pub extern "C" fn cg_builder_skip_ignored(builder: *mut cg_builder, on: bool) -> cg_status {
    with("cg_builder_skip_ignored", builder, |b| {
        b.skip_ignored = on;
        Ok(())
    })
}

/// Containment: `CG_CONTAIN_NONE` (default), `CG_CONTAIN_CGROUP`, `CG_CONTAIN_PID_NAMESPACE`,
/// `CG_CONTAIN_SUBREAPER`, `CG_CONTAIN_ANY` or `CG_CONTAIN_BEST_EFFORT`.
/// A cgroup needs write access to this process's cgroup (root, or a delegated subtree).
#[no_mangle]
pub extern "C" fn cg_builder_contain(builder: *mut cg_builder, containment: i32) -> cg_status {
    with("cg_builder_contain", builder, |b| {
        b.containment = match containment {
            CG_CONTAIN_NONE => Containment::None,
            CG_CONTAIN_CGROUP => Containment::Cgroup,
            CG_CONTAIN_BEST_EFFORT => Containment::BestEffort,
            CG_CONTAIN_PID_NAMESPACE => Containment::PidNamespace,
            CG_CONTAIN_SUBREAPER => Containment::Subreaper,
            CG_CONTAIN_ANY => Containment::Any,
            other => {
                return Err(Failure::invalid(format!(
                    "containment {other} is not CG_CONTAIN_NONE, CG_CONTAIN_CGROUP, \
                     CG_CONTAIN_PID_NAMESPACE, CG_CONTAIN_SUBREAPER, CG_CONTAIN_ANY or \
                     CG_CONTAIN_BEST_EFFORT"
                )))
            }
        };
        Ok(())
    })
}

/// With containment (`cg_builder_contain`): who gets the catchable rungs —
/// `CG_KILL_MODE_MIXED` (default: the child, or its process group, so a server that stops its
/// own workers does so in order) or `CG_KILL_MODE_CONTROL_GROUP` (every process in the cgroup).
/// The `KILL` rung always reaches every member (`cgroup.kill`), whatever the mode; the
/// report's `signals[i].to_cgroup` / `reached` say where each rung went. Without containment
/// the mode has no effect. Another value is `CG_ERR_INVALID_ARGUMENT`, naming it.
#[no_mangle]
pub extern "C" fn cg_builder_kill_mode(builder: *mut cg_builder, mode: i32) -> cg_status {
    with("cg_builder_kill_mode", builder, |b| {
        b.kill_mode = match mode {
            CG_KILL_MODE_MIXED => KillMode::Mixed,
            CG_KILL_MODE_CONTROL_GROUP => KillMode::ControlGroup,
            other => {
                return Err(Failure::invalid(format!(
                    "mode {other} is not CG_KILL_MODE_MIXED or CG_KILL_MODE_CONTROL_GROUP"
                )))
            }
        };
        Ok(())
    })
}

/// With containment: the cgroup v2 directory (an absolute path under the cgroup2 mount, e.g.
/// a delegated subtree; copied) under which the child's cgroup `childguard-<pid>-<n>-…` is made,
/// instead of the cgroup this process runs in. An empty or relative `path` is
/// `CG_ERR_INVALID_ARGUMENT` at once; a directory that does not exist, is not in a cgroup2 file
/// system or is not writable fails `cg_spawn` with `CG_ERR_CONTAINMENT`, naming the path and
/// the reason (`CG_CONTAIN_BEST_EFFORT` falls back to a process group instead, also when the
/// child cannot join the cgroup: non-root, a parent outside this process's own subtree). Without
/// containment it has no effect.
#[no_mangle]
pub extern "C" fn cg_builder_cgroup_parent(
    builder: *mut cg_builder,
    path: *const c_char,
) -> cg_status {
    with("cg_builder_cgroup_parent", builder, |b| {
        let path = PathBuf::from(ptr::os_str(path, "path")?);
        if !path.is_absolute() {
            return Err(Failure::invalid(format!(
                "path {path:?} is not absolute (a cgroup directory under the cgroup2 mount, \
                 e.g. /sys/fs/cgroup/my.slice)"
            )));
        }
        b.cgroup_parent = Some(path);
        Ok(())
    })
}

/// With containment: a resource limit on the child's cgroup, by its name — `"memory-max"`,
/// `"memory-high"`, `"tasks-max"`, `"cpu-quota"` (or systemd's `"MemoryMax"`, …) — and its
/// value in systemd's spelling (`"512M"`, `"infinity"`, `"100"`, `"50%"`); both copied. An
/// unknown name or a bad value is `CG_ERR_INVALID_ARGUMENT` at once, naming it and why. The
/// limits are written before the child runs, in cgroup v2 or (a hybrid host) in a cgroup of
/// the same name in each v1 hierarchy; one that cannot be applied fails `cg_spawn` with
/// `CG_ERR_CONTAINMENT` (never a silent no-op; `CG_CONTAIN_BEST_EFFORT` does not fall back),
/// and without containment with `CG_ERR_CONFIG`. The report says what the kernel did
/// (`oom_kill`, `memory_peak`, …).
#[no_mangle]
pub extern "C" fn cg_builder_limit(
    builder: *mut cg_builder,
    name: *const c_char,
    value: *const c_char,
) -> cg_status {
    with("cg_builder_limit", builder, |b| {
        let name = ptr::utf8(name, "name")?;
        let value = ptr::utf8(value, "value")?;
        b.limits.set(name, value).map_err(Failure::invalid)
    })
}

/// `on`: the kernel kills the child when this process dies, even by `SIGKILL` (Linux
/// `PR_SET_PDEATHSIG`, tied to childguard's own long-lived spawner thread, so spawning from a
/// short-lived thread is safe). Elsewhere `cg_spawn` fails with `CG_ERR_CONFIG`.
#[no_mangle]
pub extern "C" fn cg_builder_exit_with_parent(builder: *mut cg_builder, on: bool) -> cg_status {
    with("cg_builder_exit_with_parent", builder, |b| {
        b.exit_with_parent = on;
        Ok(())
    })
}

/// The signal `cg_builder_exit_with_parent` has the kernel send the child when this process
/// dies (default `SIGKILL`), e.g. `SIGTERM` for a server that must clean up first (it may
/// then outlive us if it ignores it). Without `cg_builder_exit_with_parent(b, true)` it has no
/// effect. `signo` must be a signal number of this system other than 0
/// (`CG_ERR_INVALID_ARGUMENT` otherwise, naming it, as `cg_kill` does).
#[no_mangle]
pub extern "C" fn cg_builder_parent_death_signal(
    builder: *mut cg_builder,
    signo: i32,
) -> cg_status {
    with("cg_builder_parent_death_signal", builder, |b| {
        let signal = Signal::from_raw(signo)
            .filter(|s| *s != Signal::NONE)
            .ok_or_else(|| {
                Failure::invalid(format!(
                    "signo {signo} is not a signal number (0 sends nothing; to send nothing, \
                     leave cg_builder_exit_with_parent off)"
                ))
            })?;
        b.death_signal = Some(signal);
        Ok(())
    })
}

/// Capture the child's output (`CG_CAPTURE_STDERR`, `_STDOUT`, `_BOTH`): one shared thread
/// drains it, so the child never blocks on a full pipe; the last 64 KiB / 1000 lines (see
/// `cg_builder_capture_tail`) are in errors after the fork and in the report's `output_tail`.
#[no_mangle]
pub extern "C" fn cg_builder_capture(builder: *mut cg_builder, streams: i32) -> cg_status {
    with("cg_builder_capture", builder, |b| {
        b.capture = Some(match streams {
            CG_CAPTURE_STDERR => Capture::stderr(),
            CG_CAPTURE_STDOUT => Capture::stdout(),
            CG_CAPTURE_BOTH => Capture::both(),
            other => {
                return Err(Failure::invalid(format!(
                    "streams {other} is not CG_CAPTURE_STDERR, CG_CAPTURE_STDOUT or \
                     CG_CAPTURE_BOTH"
                )))
            }
        });
        Ok(())
    })
}

/// How much of the captured output the tail keeps: at most `bytes` bytes and `lines` complete
/// lines, the oldest dropped first (defaults 64 KiB and 1000 lines; 0 keeps no tail). It
/// bounds the tail only: lines are assembled whole up to 64 KiB whatever `bytes` is, so
/// `cg_builder_ready_output` sees a line that came in several reads even with no tail. The
/// tail is held in memory for the handle's life: about `bytes`, plus per captured stream the
/// line not yet ended (at most 64 KiB). Needs `cg_builder_capture` first (`CG_ERR_CONFIG`
/// otherwise: without it nothing is captured — output readiness's own capture keeps the
/// default tail); a later `cg_builder_capture` keeps these sizes.
#[no_mangle]
pub extern "C" fn cg_builder_capture_tail(
    builder: *mut cg_builder,
    bytes: usize,
    lines: usize,
) -> cg_status {
    with("cg_builder_capture_tail", builder, |b| {
        if b.capture.is_none() {
            return Err(Failure::new(
                cg_status::CG_ERR_CONFIG,
                "nothing is captured: call cg_builder_capture first",
            ));
        }
        b.tail = Some((bytes, lines));
        Ok(())
    })
}

/// Readiness: `cg_spawn` returns once the child sent `READY=1` on a private `NOTIFY_SOCKET`
/// (systemd `Type=notify`; Linux). The child exiting first, or the ready timeout, fails the
/// spawn with `CG_ERR_READY` (the child is closed with its ladder).
#[no_mangle]
pub extern "C" fn cg_builder_ready_notify(builder: *mut cg_builder) -> cg_status {
    with("cg_builder_ready_notify", builder, |b| {
        b.ready = Some(Ready::Notify);
        Ok(())
    })
}

/// Readiness: a line of the child's output contains `text` (copied). Captures stdout and
/// stderr (stderr only with `CG_SOCKET_STDIO`) unless `cg_builder_capture` chose.
#[no_mangle]
pub extern "C" fn cg_builder_ready_output(
    builder: *mut cg_builder,
    text: *const c_char,
) -> cg_status {
    with("cg_builder_ready_output", builder, |b| {
        b.ready = Some(Ready::output(ptr::utf8(text, "text")?));
        Ok(())
    })
}

/// Readiness: a TCP connection to `addr` (`"127.0.0.1:6379"`, `"[::1]:80"`; copied) is
/// accepted. Retried every 0.1–0.5 ms.
#[no_mangle]
pub extern "C" fn cg_builder_ready_connect_tcp(
    builder: *mut cg_builder,
    addr: *const c_char,
) -> cg_status {
    with("cg_builder_ready_connect_tcp", builder, |b| {
        let text = ptr::utf8(addr, "addr")?;
        let addr: std::net::SocketAddr = text.parse().map_err(|e| {
            Failure::invalid(format!("addr {text:?}: {e} (expected e.g. 127.0.0.1:6379)"))
        })?;
        b.ready = Some(Ready::Connect(ConnectTo::Tcp(addr)));
        Ok(())
    })
}

/// Readiness: a connection to the Unix stream socket at `path` (copied) is accepted.
#[no_mangle]
pub extern "C" fn cg_builder_ready_connect_unix(
    builder: *mut cg_builder,
    path: *const c_char,
) -> cg_status {
    with("cg_builder_ready_connect_unix", builder, |b| {
        let path = PathBuf::from(ptr::os_str(path, "path")?);
        b.ready = Some(Ready::Connect(ConnectTo::Unix(path)));
        Ok(())
    })
}

/// Readiness: an HTTP/1.1 `GET` of `url` (copied) answers with a 2xx status, or exactly
/// `status` when it is not 0. `url`: `http://HOST[:PORT]/PATH` (TCP; a name is resolved now)
/// or `http+unix://%2Frun%2Fapp.sock/PATH` (the Unix socket's path percent-encoded as the
/// host); `https://` is refused (no TLS). Each attempt is bounded (1 s); retried every
/// 0.1-0.5 ms while nothing listens, every 10-100 ms after an answer that is not ready; a
/// ready timeout's message quotes the last answer. `CG_ERR_INVALID_ARGUMENT` for a bad URL
/// or a `status` outside 100-999, the message naming it.
#[no_mangle]
pub extern "C" fn cg_builder_ready_http(
    builder: *mut cg_builder,
    url: *const c_char,
    status: u16,
) -> cg_status {
    with("cg_builder_ready_http", builder, |b| {
        let url = ptr::utf8(url, "url")?;
        let mut check = HttpCheck::parse(url).map_err(|e| Failure::invalid(e.to_string()))?;
        if status != 0 {
            if !(100..=999).contains(&status) {
                return Err(Failure::invalid(format!(
                    "status {status} is not an HTTP status (100-999, or 0 for any 2xx)"
                )));
            }
            check = check.status(status);
        }
        b.ready = Some(Ready::Http(check));
        Ok(())
    })
}

/// Readiness: the probe command `argv` (a NULL-terminated array, copied; `argv[0]` looked up
/// in `PATH`, no shell) exits 0 — e.g. `{"pg_isready", "-h", "/run/pg", NULL}`. Each run is
/// bounded (5 s, then it is killed and reaped), not in the server's cgroup; the first starts
/// at once, the next 10 ms after one fails, the pause doubling to 100 ms. A ready timeout's
/// message has the last run's exit and the end of its output; a probe that cannot be started
/// fails `cg_spawn` at once (`CG_ERR_READY`). `CG_ERR_INVALID_ARGUMENT` for an empty `argv`.
#[no_mangle]
pub extern "C" fn cg_builder_ready_exec(
    builder: *mut cg_builder,
    argv: *const *const c_char,
) -> cg_status {
    with("cg_builder_ready_exec", builder, |b| {
        let argv: Vec<OsString> = ptr::string_array(argv, "argv")?
            .into_iter()
            .map(|a| OsString::from_vec(a.into_bytes()))
            .collect();
        let check = ExecCheck::new(argv).map_err(|e| Failure::invalid(e.to_string()))?;
        b.ready = Some(Ready::Exec(check));
        Ok(())
    })
}

/// Readiness, with `CG_SOCKET_ACTIVATION`: the server accepted our connection (any other mode
/// fails the spawn with `CG_ERR_CONFIG`).
#[no_mangle]
pub extern "C" fn cg_builder_ready_accepted(builder: *mut cg_builder) -> cg_status {
    with("cg_builder_ready_accepted", builder, |b| {
        b.ready = Some(Ready::Accepted);
        Ok(())
    })
}

/// How long `cg_spawn` waits for readiness, in milliseconds (default 30000).
#[no_mangle]
pub extern "C" fn cg_builder_ready_timeout(builder: *mut cg_builder, timeout_ms: u64) -> cg_status {
    with("cg_builder_ready_timeout", builder, |b| {
        b.ready_timeout = Some(Duration::from_millis(timeout_ms));
        Ok(())
    })
}

/// With `cg_builder_ready_notify`: systemd's watchdog. The server gets `WATCHDOG_USEC` and must
/// send `WATCHDOG=1` on its `NOTIFY_SOCKET` at least every `interval_ms` once ready; a miss (or
/// `WATCHDOG=trigger`) closes it with its ladder in the background, and `cg_close`'s report
/// then says "watchdog missed at +X ms". 0, or no notify readiness, fails the spawn with
/// `CG_ERR_CONFIG`.
#[no_mangle]
pub extern "C" fn cg_builder_watchdog(builder: *mut cg_builder, interval_ms: u64) -> cg_status {
    with("cg_builder_watchdog", builder, |b| {
        b.watchdog = Some(Duration::from_millis(interval_ms));
        Ok(())
    })
}
