"""CloseReport: the timeline of one close, as the Rust library reports it."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional


class CloseReport:
    """What a close did, and when (times in milliseconds since the close began).

    ``str(report)`` is the Rust report's one-line ``Display``; ``report.to_dict()`` is its serde
    form (the same keys as ``childguard run --report json``). The properties below read that
    dict; anything else is in ``to_dict()``.
    """

    __slots__ = ("_line", "_data")

    def __init__(self, line: str, data: Dict[str, Any]) -> None:
        self._line = line
        self._data = data

    def to_dict(self) -> Dict[str, Any]:
        """The whole report (a copy), JSON-serializable."""
        return copy.deepcopy(self._data)

    def __str__(self) -> str:
        return self._line

    def __repr__(self) -> str:
        return f"<CloseReport {self._line}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CloseReport) and other._data == self._data

    __hash__ = None  # type: ignore[assignment]

    @property
    def program(self) -> Optional[str]:
        return self._data.get("program")

    @property
    def pid(self) -> Optional[int]:
        return self._data.get("pid")

    @property
    def ended_by(self) -> Dict[str, Any]:
        """What ended the child: ``{"kind": "rung", "index": 1, "signal": "KILL"}``,
        ``{"kind": "eof"}``, ``{"kind": "before_close"}``, ``{"kind": "kill", "signal": ...}``,
        ``{"kind": "outlived"}``, ``{"kind": "in_background"}``, ``{"kind": "no_child"}``."""
        return dict(self._data["ended_by"])

    @property
    def ending_signal(self) -> Optional[str]:
        """The signal of the rung (or ``kill()``) that ended the child, e.g. ``"KILL"``."""
        sig = self._data["ended_by"].get("signal")
        return str(sig) if sig is not None else None

    @property
    def signals(self) -> List[str]:
        """The signals the ladder sent, in order (``["TERM", "KILL"]``)."""
        return [s["signal"] for s in self._data.get("signals", [])]

    @property
    def skipped(self) -> List[str]:
        """The signals of the rungs skipped because the server ignored them, in order
        (``["HUP"]``): nothing was sent for them and their grace was not spent."""
        return [s["signal"] for s in self._data.get("skipped", [])]

    @property
    def default_action(self) -> bool:
        """The server died of the signal of the rung that ended it, which it had no handler
        for: the kernel's default action ended it, no handler ran, no cleanup was done."""
        return bool(self._data.get("default_action"))

    @property
    def returncode(self) -> Optional[int]:
        """``subprocess``'s convention: the exit code, or ``-N`` for death by signal ``N``;
        ``None`` if the child was not reaped by the close."""
        status = self._data.get("status")
        if status is None:
            return None
        if status.get("code") is not None:
            return int(status["code"])
        return -int(status["signal"])

    @property
    def exited_ms(self) -> Optional[float]:
        return self._data.get("exited_ms")

    @property
    def reaped_ms(self) -> Optional[float]:
        return self._data.get("reaped_ms")

    @property
    def total_ms(self) -> float:
        """How long the close took."""
        return float(self._data["total_ms"])

    @property
    def outlived_ladder(self) -> bool:
        return bool(self._data.get("outlived_ladder"))

    @property
    def handed_to_reaper(self) -> bool:
        return bool(self._data.get("handed_to_reaper"))

    @property
    def escaped(self) -> List[int]:
        """Descendants that had left the process group (``setsid``) and outlived the close."""
        return list(self._data.get("escaped", []))

    @property
    def cgroup(self) -> Optional[Dict[str, Any]]:
        """With ``contain=True``: ``{"path", "kill_mode", "removed", "members_left"}``."""
        cg = self._data.get("cgroup")
        return dict(cg) if cg is not None else None

    @property
    def limits(self) -> Optional[Dict[str, Any]]:
        """With ``memory_max=`` …: ``{"limits", "result", "oom_kills", "memory_high_events",
        "memory_peak", "tasks_max_hits", "hierarchies"}`` (``result`` is ``"oom-kill"`` when
        the kernel's OOM killer killed a process of the cgroup)."""
        cg = self._data.get("cgroup") or {}
        limits = cg.get("limits")
        return copy.deepcopy(limits) if limits is not None else None

    @property
    def oom_kill(self) -> bool:
        """Whether the kernel's OOM killer ended a process of the server's cgroup (systemd's
        result ``oom-kill``)."""
        return (self.limits or {}).get("result") == "oom-kill"

    @property
    def notify(self) -> Optional[Dict[str, Any]]:
        """With ``ready=Notify()``: ``{"status", "stopping_ms", "extensions", "ignored"}``."""
        n = self._data.get("notify")
        return copy.deepcopy(n) if n is not None else None

    @property
    def output_tail(self) -> Optional[str]:
        return self._data.get("output_tail")

    @property
    def notes(self) -> List[str]:
        return list(self._data.get("notes", []))
