"""Readiness conditions: ``spawn(..., ready=...)`` returns once the server is ready by one."""

from __future__ import annotations

import os
import socket as _socket
from typing import Any, List, Optional, Sequence, Tuple, Union, cast

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


class Http:
    """An HTTP/1.1 ``GET`` of ``url`` answers with a 2xx status, or exactly ``status``:
    ``Http("http://127.0.0.1:8080/health")``, or over a Unix socket with its path
    percent-encoded as the host, ``Http("http+unix://%2Frun%2Fapp.sock/health")``. No TLS
    (``https://`` raises :class:`ConfigError`). Each attempt is bounded (1 s) and waits with
    the server's exit and Ctrl-C; retried every 0.1-0.5 ms while nothing listens, every
    10-100 ms after an answer that is not ready. A timeout's :class:`ReadyError` quotes the
    last answer. A URL that cannot be parsed raises :class:`ConfigError` at ``spawn``."""

    def __init__(self, url: str, status: Optional[int] = None) -> None:
        if not isinstance(url, str) or not url:
            raise ConfigError(f"Http({url!r}): needs a non-empty str URL", kind="config")
        if status is not None and (
            isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 999
        ):
            raise ConfigError(
                f"Http({url!r}, status={status!r}): an HTTP status (100-999) or None for any 2xx",
                kind="config",
            )
        self.url = url
        self.status = status

    def _spec(self) -> Tuple[Any, ...]:
        return ("http", self.url, self.status)

    def __repr__(self) -> str:
        if self.status is None:
            return f"Http({self.url!r})"
        return f"Http({self.url!r}, status={self.status!r})"


class Exec:
    """A probe command exits 0: ``Exec(["pg_isready", "-h", "/run/pg"])``,
    ``Exec(["redis-cli", "-s", sock, "ping"])``. Run as is (no shell), as our child, outside
    the server's cgroup, stdin ``/dev/null``; each run bounded (5 s, then killed and reaped);
    the first at once, the next 10 ms after one fails, the pause doubling to 100 ms. A
    timeout's :class:`ReadyError` has the last run's exit and the end of its output."""

    def __init__(self, argv: Sequence[StrPath]) -> None:
        if isinstance(argv, (str, bytes, os.PathLike)):
            raise ConfigError(
                f"Exec({argv!r}): expected a list of arguments, e.g. "
                "Exec(['pg_isready', '-h', '/run/pg'])",
                kind="config",
            )
        try:
            args = [os.fsdecode(os.fspath(a)) for a in argv]
        except TypeError as e:
            raise ConfigError(f"Exec({argv!r}): {e}", kind="config") from e
        if not args or not args[0]:
            raise ConfigError(f"Exec({argv!r}): needs a program (argv[0])", kind="config")
        self.argv = args

    def _spec(self) -> Tuple[Any, ...]:
        return ("exec", list(self.argv))

    def __repr__(self) -> str:
        return f"Exec({self.argv!r})"


Single = Union[Notify, Output, Connect, Http, Exec]


class _Group:
    _tag = ""

    def __init__(self, *conditions: Single) -> None:
        if not conditions:
            raise ConfigError(f"{type(self).__name__}(): needs at least one condition", kind="config")
        for c in conditions:
            if not isinstance(c, (Notify, Output, Connect, Http, Exec)):
                raise ConfigError(
                    f"{type(self).__name__}(..., {c!r}, ...): expected Notify(), Output(text), "
                    "Connect(address), Http(url) or Exec(argv) (lists do not nest)",
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


Ready = Union[Notify, Output, Connect, Http, Exec, AnyOf, AllOf]


def uses_notify(ready: object) -> bool:
    """Whether ``ready`` waits for ``READY=1`` (so needs the notify socket)."""
    if isinstance(ready, _Group):
        return any(isinstance(c, Notify) for c in ready.conditions)
    return isinstance(ready, Notify)
