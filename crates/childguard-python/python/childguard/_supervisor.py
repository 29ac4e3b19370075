"""Restarts: :func:`supervise` starts a server as :func:`~childguard.spawn` does and starts it
again when it exits, as the restart policy says (the library's ``Supervisor``: delays on its
event loop's timers, a crash-loop limit, a close that wins over a delay or a start)."""

from __future__ import annotations

import asyncio
import atexit
import inspect
import json
import socket as _socket
import weakref
from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _native
from ._errors import ConfigError
from ._report import CloseReport
from ._server import StrPath, _plan, spawn

# spawn()'s keyword parameters and their defaults: supervise() takes the same.
_SPAWN_DEFAULTS = {
    name: param.default
    for name, param in inspect.signature(spawn).parameters.items()
    if param.kind is inspect.Parameter.KEYWORD_ONLY and not name.startswith("_")
}


@dataclass
class SupervisionReport:
    """What :meth:`Supervisor.close` returns."""

    last: Optional[CloseReport]
    """The close of the start running when the close came (``None``: none ran)."""
    previous: List[CloseReport] = field(default_factory=list)
    """The closes of the starts that ended before (their reap, their cgroup removed)."""
    restarts: int = 0
    exits: List[str] = field(default_factory=list)
    """Each exit (or failed start) as text: ``start 1: exit 3; its output ended with: …``."""
    gave_up: Optional[str] = None
    """Why the supervisor gave up, if it did."""


def _report(parts: Tuple[str, str]) -> CloseReport:
    return CloseReport(parts[0], json.loads(parts[1]))


_OPEN: "weakref.WeakSet[Supervisor]" = weakref.WeakSet()


class Supervisor:
    """A supervised server, made by :func:`supervise`. A context manager: leaving it closes."""

    def __init__(self, native: Any, args: List[str]) -> None:
        self._native = native
        self.args = args
        self.report: Optional[SupervisionReport] = None
        _OPEN.add(self)

    @property
    def generation(self) -> int:
        """The running start: 1, then one more per restart."""
        return int(self._native.generation())

    @property
    def restarts(self) -> int:
        return int(self._native.restarts())

    @property
    def ended(self) -> bool:
        """The supervision ended: no restart by the policy, or it gave up."""
        return bool(self._native.ended())

    @property
    def pid(self) -> Optional[int]:
        """The running start's pid (``None`` during a delay or a start)."""
        pid = self._native.pid()
        return int(pid) if pid is not None else None

    def socket(self) -> Optional[_socket.socket]:
        """A new ``socket.socket`` on the running start's socket (``socket="stdio"``), yours to
        close; ``None`` when none runs. Each start has its own: take it again after a restart."""
        fd = self._native.socket_fd()
        return _socket.socket(fileno=fd) if fd is not None else None

    def exits(self) -> List[str]:
        return list(self._native.exits())

    def wait_for_start(self, after: int, timeout: float) -> int:
        """Waits for a start newer than ``after`` and returns it; :class:`CrashLoopError` once
        the supervisor gave up, :class:`WaitError` when it ended or ``timeout`` passed."""
        return int(self._native.wait_for_start(after, timeout))

    async def wait_for_start_async(self, after: int, timeout: float) -> int:
        """:meth:`wait_for_start` for asyncio: on the loop's default executor, the event loop
        free meanwhile."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.wait_for_start, after, timeout)

    async def close_async(self) -> SupervisionReport:
        """:meth:`close` for asyncio, on the loop's default executor."""
        return await asyncio.get_running_loop().run_in_executor(None, self.close)

    def close(self) -> SupervisionReport:
        """Ends the supervision — no more restarts, a delay or a start broken off — and closes
        every start with its ladder; returns once nothing is left."""
        if self.report is not None:
            return self.report
        last, previous, restarts, gave_up, exits = self._native.close()
        self.report = SupervisionReport(
            last=_report(last) if last is not None else None,
            previous=[_report(p) for p in previous],
            restarts=int(restarts),
            exits=list(exits),
            gave_up=gave_up,
        )
        _OPEN.discard(self)
        return self.report

    def __enter__(self) -> "Supervisor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.report is not None else f"start {self.generation}"
        return f"<childguard.Supervisor {self.args[0]!r} {state}>"


@atexit.register
def _close_at_exit() -> None:
    for sup in list(_OPEN):
        try:
            sup.close()
        except Exception:  # noqa: BLE001 - at exit, close what can be closed
            pass


def supervise(
    argv: Union[StrPath, Sequence[StrPath]],
    *,
    restart: str = "on-failure",
    restart_delay: Union[float, Tuple[float, float]] = (0.1, 5.0),
    restart_limit: Tuple[int, float] = (5, 60.0),
    restart_hold: float = 1.0,
    **spawn_kwargs: Any,
) -> Supervisor:
    """Starts ``argv`` as :func:`~childguard.spawn` would (the same keyword arguments:
    ``ready=``, ``socket=``, ``contain=``, ``memory_max=`` …; not pipes) and starts it again
    when it exits: ``restart`` ``"on-failure"`` (a non-zero exit or a signal), ``"always"`` or
    ``"no"``; after ``restart_delay`` seconds (``(first, max)``: doubled after each start that
    did not hold ``restart_hold`` seconds); at most ``restart_limit`` = ``(starts, seconds)``,
    then it gives up (:meth:`Supervisor.wait_for_start` raises :class:`CrashLoopError` naming
    the last exits and their output). Each start re-runs its readiness and gets its own socket.
    """
    unknown = sorted(set(spawn_kwargs) - set(_SPAWN_DEFAULTS))
    if unknown:
        raise ConfigError(f"supervise(): unknown argument(s) {', '.join(unknown)}", kind="config")
    for name in ("stdin", "stdout"):
        if spawn_kwargs.get(name) not in (None, -3):  # subprocess.DEVNULL is -3
            raise ConfigError(
                f"supervise(): {name}={spawn_kwargs[name]!r}: pipes belong to one start; "
                "use socket='stdio' (each start's socket: Supervisor.socket())",
                kind="config",
            )
    params = {**_SPAWN_DEFAULTS, **spawn_kwargs, "argv": argv}
    plan, args = _plan(params)
    first, most = (
        (restart_delay, restart_delay)
        if isinstance(restart_delay, (int, float))
        else restart_delay
    )
    burst, window = restart_limit
    native = _native.supervise(
        plan,
        restart=restart,
        delay_first=float(first),
        delay_max=float(most),
        burst=int(burst),
        interval=float(window),
        hold=float(restart_hold),
    )
    return Supervisor(native, args)
