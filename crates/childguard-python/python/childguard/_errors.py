"""The exceptions of childguard: one base class, one subclass per kind of failure.

Each carries the Rust library's message word for word (``str(e)``), and its parts as
attributes: ``kind`` (the failed step, e.g. ``"spawn"``), ``program``, ``errno`` (the OS error
number underneath, if any), ``output_tail`` (the server's last output, with capture) and
``report`` (a :class:`~childguard.CloseReport` when the error comes from a close, or from a
server that did not become ready and was closed).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Dict, Optional, Tuple, Type

if TYPE_CHECKING:
    from ._report import CloseReport


class Error(Exception):
    """Base class of every childguard error."""

    kind: str
    program: Optional[str]
    errno: Optional[int]
    output_tail: Optional[str]
    report: Optional["CloseReport"]

    def __init__(
        self,
        message: str,
        *,
        kind: str = "other",
        program: Optional[str] = None,
        errno: Optional[int] = None,
        output_tail: Optional[str] = None,
        report: Optional["CloseReport"] = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.program = program
        self.errno = errno
        self.output_tail = output_tail
        self.report = report


class ConfigError(Error, ValueError):
    """An argument was rejected (a ladder string, a signal, a timeout …); the message names it."""


class SpawnError(Error):
    """The program could not be started (not found, not executable, no socket, no pidfd …)."""


class ReadyError(Error):
    """The server did not become ready: it exited first, sent ``ERRNO=``, or the
    ``ready_timeout`` passed (it was then closed with its ladder: see ``report``)."""


class ContainmentError(Error):
    """``contain=True``: no writable cgroup v2 for the child (the message names the path)."""


class SignalError(Error):
    """The kernel refused a signal (``EPERM`` from an LSM, a child that changed its uid)."""


class WaitError(Error):
    """Waiting for or reaping the child failed."""


class ConnectError(Error):
    """``socket="activation"``: connecting to the socket-activated server failed."""


class ClosedError(Error):
    """The server was closed (or detached) already."""


class InheritedError(Error):
    """The server belongs to the process that spawned it (this one is a ``fork()`` of it)."""


class CrashLoopError(Error):
    """A supervisor gave up: more starts than its crash-loop limit within the window (or the
    start could not be made again); the message names the last exits and their output."""


_BY_KIND: Dict[str, Type[Error]] = {
    "crash_loop": CrashLoopError,
    "config": ConfigError,
    "spawn": SpawnError,
    "socket": SpawnError,
    "pidfd": SpawnError,
    "sigchld_ignored": SpawnError,
    "ready": ReadyError,
    "containment": ContainmentError,
    "signal": SignalError,
    "wait": WaitError,
    "connect": ConnectError,
    "closed": ClosedError,
    "inherited": InheritedError,
}


def from_native(
    kind: str,
    message: str,
    program: Optional[str],
    errno: Optional[int],
    output_tail: Optional[str],
    report: Optional[Tuple[str, str]],
) -> Error:
    """Called by ``childguard._native`` to build the exception of a Rust error."""
    from ._report import CloseReport

    cls = _BY_KIND.get(kind, Error)
    parsed = CloseReport(report[0], json.loads(report[1])) if report is not None else None
    return cls(
        message,
        kind=kind,
        program=program,
        errno=errno,
        output_tail=output_tail,
        report=parsed,
    )
