//! Python values → childguard configuration. Every rejection is a `ConfigError` that names the
//! argument and the value.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use childguard::{
    Capture, Containment, ExecCheck, HttpCheck, KillMode, Ladder, NotifyAccess, Ready, Signal,
    SocketMode,
};
use pyo3::prelude::*;

use crate::errors::config_error;

/// `ladder` as text (`"TERM:5s,KILL:1s"`) → a [`Ladder`]; `None` → the default.
pub fn ladder(py: Python<'_>, text: Option<&str>) -> PyResult<Option<Ladder>> {
    let Some(text) = text else { return Ok(None) };
    text.parse::<Ladder>()
        .map(Some)
        .map_err(|e| config_error(py, format!("ladder {text:?}: {e}")))
}

/// `childguard.parse_ladder(text)`: the ladder's canonical text, or `ConfigError` naming the
/// rung that is wrong. For callers that check a ladder before spawning anything.
#[pyfunction]
pub fn parse_ladder(py: Python<'_>, text: &str) -> PyResult<String> {
    Ok(ladder(py, Some(text))?.unwrap_or_default().to_string())
}

/// A duration in seconds (a float, as Python's `timeout=` arguments).
pub fn seconds(py: Python<'_>, what: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    let Some(value) = value else { return Ok(None) };
    Duration::try_from_secs_f64(value)
        .map(Some)
        .map_err(|e| config_error(py, format!("{what}={value}: {e} (seconds, >= 0)")))
}

/// `ready=`, as the Python layer passes it: `("notify",)`, `("output", text)`,
/// `("connect_tcp", "ip:port")`, `("connect_unix", path)`, `("http", url, status or None)`,
/// `("exec", [argv])`, or `("any" | "all", [those])`.
#[derive(Debug, FromPyObject)]
pub enum ReadySpec {
    Http(String, String, Option<u16>),
    /// `("exec", [argv])` — and `("any" | "all", [])`, an empty list of either kind.
    Argv(String, Vec<OsString>),
    List(String, Vec<ReadySpec>),
    Tagged(String, Option<OsString>),
    Bare((String,)),
}

pub fn ready(py: Python<'_>, spec: Option<ReadySpec>) -> PyResult<Option<Ready>> {
    spec.map(|spec| condition(py, spec)).transpose()
}

/// One condition, or a list: a nested list is passed on for the library to refuse, with its
/// own message.
fn condition(py: Python<'_>, spec: ReadySpec) -> PyResult<Ready> {
    let (tag, arg) = match spec {
        ReadySpec::List(tag, parts) => {
            let parts = parts
                .into_iter()
                .map(|part| condition(py, part))
                .collect::<PyResult<Vec<_>>>()?;
            return match tag.as_str() {
                "any" => Ok(Ready::any(parts)),
                "all" => Ok(Ready::all(parts)),
                other => Err(config_error(
                    py,
                    format!("ready: unknown list {other:?} (any, all)"),
                )),
            };
        }
        ReadySpec::Http(tag, url, status) if tag == "http" => {
            let check =
                HttpCheck::parse(&url).map_err(|e| config_error(py, format!("ready=Http: {e}")))?;
            return Ok(Ready::Http(match status {
                Some(status) => check.status(status),
                None => check,
            }));
        }
        ReadySpec::Argv(tag, argv) if tag == "exec" => {
            return ExecCheck::new(argv)
                .map(Ready::Exec)
                .map_err(|e| config_error(py, format!("ready=Exec: {e}")));
        }
        ReadySpec::Argv(tag, argv) if argv.is_empty() => {
            return condition(py, ReadySpec::List(tag, Vec::new()));
        }
        ReadySpec::Http(tag, ..) | ReadySpec::Argv(tag, _) => {
            return Err(config_error(
                py,
                format!("ready: unknown condition {tag:?}"),
            ))
        }
        ReadySpec::Bare((tag,)) => (tag, None),
        ReadySpec::Tagged(tag, arg) => (tag, arg),
    };
    let text = |arg: Option<OsString>| -> PyResult<String> {
        arg.and_then(|a| a.into_string().ok())
            .ok_or_else(|| config_error(py, format!("ready={tag}: needs a text argument")))
    };
    Ok(match tag.as_str() {
        "notify" => Ready::Notify,
        "output" => Ready::output(text(arg)?),
        "connect_tcp" => {
            let addr = text(arg)?;
            let parsed: SocketAddr = addr.parse().map_err(|e| {
                config_error(py, format!("ready=Connect({addr:?}): not an address: {e}"))
            })?;
            Ready::connect(parsed)
        }
        "connect_unix" => {
            let path = arg.ok_or_else(|| config_error(py, "ready=Connect: needs a path"))?;
            Ready::connect(PathBuf::from(path))
        }
        other => {
            return Err(config_error(
                py,
                format!("ready: unknown condition {other:?}"),
            ))
        }
    })
}

/// `socket=`: `None`, `"stdio"`, `"activation"` (or `"activation:NAME"`).
pub fn socket(py: Python<'_>, mode: Option<&str>) -> PyResult<SocketMode> {
    Ok(match mode {
        None | Some("none") => SocketMode::None,
        Some("stdio") => SocketMode::Stdio,
        Some("activation") => SocketMode::Activation { name: None },
        Some(m) if m.starts_with("activation:") => SocketMode::Activation {
            name: Some(m["activation:".len()..].to_string()),
        },
        Some(other) => {
            return Err(config_error(
                py,
                format!(
                "socket={other:?}: expected None, \"stdio\", \"activation\" or \"activation:NAME\""
            ),
            ))
        }
    })
}

/// `capture=`: `None`, `"stdout"`, `"stderr"`, `"both"`.
pub fn capture(py: Python<'_>, which: Option<&str>) -> PyResult<Option<Capture>> {
    Ok(match which {
        None => None,
        Some("stderr") => Some(Capture::stderr()),
        Some("stdout") => Some(Capture::stdout()),
        Some("both") => Some(Capture::both()),
        Some(other) => {
            return Err(config_error(
                py,
                format!("capture={other:?}: expected None, \"stdout\", \"stderr\" or \"both\""),
            ))
        }
    })
}

/// `contain=`: `False`, `True` (a cgroup, or `ContainmentError`), `"best-effort"`, `"any"`,
/// `"pid-namespace"`, `"subreaper"` (the backends of `childguard::Containment`).
#[derive(Debug, FromPyObject)]
pub enum ContainSpec {
    Flag(bool),
    Name(String),
}

pub fn contain(py: Python<'_>, spec: ContainSpec) -> PyResult<Containment> {
    Ok(match spec {
        ContainSpec::Flag(false) => Containment::None,
        ContainSpec::Flag(true) => Containment::Cgroup,
        ContainSpec::Name(n) => match n.as_str() {
            "best-effort" => Containment::BestEffort,
            "any" => Containment::Any,
            "cgroup" => Containment::Cgroup,
            "pid-namespace" => Containment::PidNamespace,
            "subreaper" => Containment::Subreaper,
            _ => {
                return Err(config_error(
                    py,
                    format!(
                        "contain={n:?}: expected True, False, \"best-effort\", \"any\", \
                         \"cgroup\", \"pid-namespace\" or \"subreaper\""
                    ),
                ))
            }
        },
    })
}

/// `memory_max=`, `memory_high=`, `tasks_max=`, `cpu_quota=` as (name, value) pairs in
/// systemd's spelling; a bad one is a `ConfigError` naming it and why.
pub fn limits(py: Python<'_>, pairs: &[(String, String)]) -> PyResult<childguard::Limits> {
    let mut limits = childguard::Limits::new();
    for (name, value) in pairs {
        limits
            .set(name, value)
            // The message starts with the name as given (`memory-max=…`): Python's spelling.
            .map_err(|why| {
                crate::errors::config_error(py, why.replacen(name, &name.replace('-', "_"), 1))
            })?;
    }
    Ok(limits)
}

/// `kill_mode=`: `"mixed"` (default) or `"control-group"`.
pub fn kill_mode(py: Python<'_>, mode: Option<&str>) -> PyResult<KillMode> {
    Ok(match mode {
        None | Some("mixed") => KillMode::Mixed,
        Some("control-group") => KillMode::ControlGroup,
        Some(other) => {
            return Err(config_error(
                py,
                format!("kill_mode={other:?}: expected \"mixed\" or \"control-group\""),
            ))
        }
    })
}

/// `notify_access=`: `"all"` (default: the cgroup when contained, else descendants) or
/// `"main"` (the spawned process only).
pub fn notify_access(py: Python<'_>, access: Option<&str>) -> PyResult<NotifyAccess> {
    Ok(match access {
        None | Some("all") => NotifyAccess::All,
        Some("main") => NotifyAccess::Main,
        Some(other) => {
            return Err(config_error(
                py,
                format!("notify_access={other:?}: expected \"all\" or \"main\""),
            ))
        }
    })
}

/// A signal as Python gives it: a number (`signal.SIGTERM` is an int) or a name (`"TERM"`).
#[derive(Debug, FromPyObject)]
pub enum SignalSpec {
    Number(i32),
    Name(String),
}

pub fn signal(py: Python<'_>, spec: SignalSpec) -> PyResult<Signal> {
    match spec {
        SignalSpec::Number(n) => Signal::from_raw(n)
            .ok_or_else(|| config_error(py, format!("signal {n}: not a signal number"))),
        SignalSpec::Name(name) => name
            .parse()
            .map_err(|e| config_error(py, format!("signal {name:?}: {e}"))),
    }
}
