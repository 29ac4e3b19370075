"""childguard: own a spawned server and its socket; close both fast, safely and within a bound.

>>> import childguard
>>> with childguard.spawn(["redis-server", "--port", "6390"],
...                       ready=childguard.Connect(("127.0.0.1", 6390)),
...                       ladder="TERM:5s,KILL:1s") as redis:
...     ...                                   # redis accepts connections now
>>> redis.report.signals
['TERM']

The close — on leaving the ``with`` block, ``close()``, ``await aclose()`` — shuts the socket
down, closes it, climbs the signal ladder (pidfd-based: each rung waits only until the exit)
and reaps, within the ladder's total grace. See ``docs/python.md``.
"""

from ._errors import (
    ClosedError,
    ConfigError,
    ConnectError,
    ContainmentError,
    CrashLoopError,
    Error,
    InheritedError,
    ReadyError,
    SignalError,
    SpawnError,
    WaitError,
)
from ._ready import AllOf, AnyOf, Connect, Exec, Http, Notify, Output, Ready
from ._report import CloseReport
from ._server import DEFAULT_LADDER, Server, parse_ladder, spawn, spawn_async
from ._stdio_server import MCP_LADDER, stdio_server
from ._supervisor import SupervisionReport, Supervisor, supervise

try:
    from importlib.metadata import version as _version

    __version__ = _version("childguard")
except Exception:  # not installed as a distribution (e.g. a source checkout on sys.path)
    __version__ = "0+unknown"

__all__ = [
    "AllOf",
    "AnyOf",
    "CloseReport",
    "ClosedError",
    "ConfigError",
    "Connect",
    "CrashLoopError",
    "ConnectError",
    "ContainmentError",
    "DEFAULT_LADDER",
    "Error",
    "Exec",
    "Http",
    "InheritedError",
    "MCP_LADDER",
    "Notify",
    "Output",
    "Ready",
    "ReadyError",
    "Server",
    "SignalError",
    "SpawnError",
    "SupervisionReport",
    "Supervisor",
    "WaitError",
    "parse_ladder",
    "spawn",
    "spawn_async",
    "stdio_server",
    "supervise",
]

# Shown as childguard.X in tracebacks and reprs, where users import them from.
for _cls in (Error, ConfigError, SpawnError, ReadyError, ContainmentError, SignalError, WaitError,
             ConnectError, ClosedError, InheritedError, CloseReport, Server, Notify, Output, Connect,
             Http, Exec, AnyOf, AllOf, CrashLoopError, Supervisor, SupervisionReport):
    _cls.__module__ = __name__
del _cls
