"""Readiness conditions: ``spawn(..., ready=...)`` returns once the server is ready by one."""

from __future__ import annotations

import os
import socket as _socket
from typing import Any, List, Tuple, Union, cast

from ._errors import ConfigError

StrPath = Union[str, "os.PathLike[str]"]
Address = Union[StrPath, Tuple[str, int], int]


class Notify:
    """The server sends ``READY=1`` on a private ``NOTIFY_SOCKET`` (systemd's ``Type=notify``:
    redis with ``--supervised systemd``, postgres built with systemd support). Only datagrams
    from the child or its descendants count. Linux only."""

    def _spec(self) -> Tuple[str, ...]:
        return ("notify",)

    def __repr__(self) -> str:
        return "Notify()"


class Output:
    """A line of the server's output (stdout or stderr) contains ``text``. Turns on capture of
    both streams unless ``capture=`` says otherwise."""

    def __init__(self, text: str) -> None:
        if not isinstance(text, str) or not text:
            raise ConfigError(f"Output({text!r}): needs a non-empty str", kind="config")
        self.text = text

    def _spec(self) -> Tuple[str, ...]:
        return ("output", self.text)

    def __repr__(self) -> str:
        return f"Output({self.text!r})"


class Connect:
    """A connection to ``address`` is accepted (then closed at once): ``("127.0.0.1", 6379)``
    or a port number (``127.0.0.1``) for TCP, a path (``"/run/x.sock"``) for a Unix socket.
    Retried every 0.1 ms, doubling to 0.5 ms; the server exiting ends the wait at once."""

    def __init__(self, address: Address) -> None:
        self.address = address

    def _spec(self) -> Tuple[str, ...]:
        address = self.address
        if isinstance(address, int) and not isinstance(address, bool):
            address = ("127.0.0.1", address)
        if isinstance(address, tuple):
            if len(address) != 2:
                raise ConfigError(f"Connect({self.address!r}): expected (host, port)", kind="config")
            host, port = address
            try:
                infos = _socket.getaddrinfo(host, port, type=_socket.SOCK_STREAM)
            except (OSError, TypeError) as e:
                raise ConfigError(f"Connect({self.address!r}): {e}", kind="config") from e
            ip, real_port = str(infos[0][4][0]), int(infos[0][4][1])
            text = f"[{ip}]:{real_port}" if ":" in ip else f"{ip}:{real_port}"
            return ("connect_tcp", text)
        try:
            return ("connect_unix", os.fspath(cast("StrPath", address)))
        except TypeError as e:
            raise ConfigError(
                f"Connect({self.address!r}): expected (host, port), a port or a path", kind="config"
            ) from e

    def __repr__(self) -> str:
        return f"Connect({self.address!r})"


Single = Union[Notify, Output, Connect]


class _Group:
    _tag = ""

    def __init__(self, *conditions: Single) -> None:
        if not conditions:
            raise ConfigError(f"{type(self).__name__}(): needs at least one condition", kind="config")
        for c in conditions:
            if not isinstance(c, (Notify, Output, Connect)):
                raise ConfigError(
                    f"{type(self).__name__}(..., {c!r}, ...): expected Notify(), Output(text) or "
                    "Connect(address) (lists do not nest)",
                    kind="config",
                )
        self.conditions = conditions

    def _spec(self) -> Tuple[Any, ...]:
        parts: List[Tuple[str, ...]] = [c._spec() for c in self.conditions]
        return (self._tag, parts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.conditions))})"


class AnyOf(_Group):
    """Ready when the first of ``conditions`` holds: ``AnyOf(Notify(), Connect(6379))`` for a
    server that may be built with or without systemd support. The conditions are checked in
    turn until one holds, the server exits or ``ready_timeout`` passes (the library's
    ``Ready::any``). At most one ``Output`` in the list: the capture watches one text."""

    _tag = "any"


class AllOf(_Group):
    """Ready once every one of ``conditions`` has held, each from the moment it was first
    seen: ``AllOf(Notify(), Connect(8080))``. A timeout's error names every condition (the
    library's ``Ready::all``). At most one ``Output`` in the list."""

    _tag = "all"


Ready = Union[Notify, Output, Connect, AnyOf, AllOf]


def uses_notify(ready: object) -> bool:
    """Whether ``ready`` waits for ``READY=1`` (so needs the notify socket)."""
    if isinstance(ready, _Group):
        return any(isinstance(c, Notify) for c in ready.conditions)
    return isinstance(ready, Notify)
