"""The pytest plugin: servers as fixtures, closed with their ladder at teardown.

Loaded by pytest on its own once the wheel is installed (entry point ``pytest11``); without the
entry point, add ``pytest_plugins = ["childguard.pytest"]`` to a ``conftest.py``.

Two ways to declare a server:

- the fixture ``childguard_spawn`` (function scope; ``childguard_spawn_session`` for the
  session): ``childguard.spawn`` with the same arguments, each server closed at teardown::

      @pytest.fixture
      def redis(childguard_spawn, tmp_path):
          sock = tmp_path / "redis.sock"
          return childguard_spawn(["redis-server", "--port", "0", "--unixsocket", str(sock)],
                                  ready=childguard.Connect(sock), ladder="TERM:5s,KILL:1s")

- :func:`server_fixture`, one line: ``argv`` and any keyword may be a callable, called with a
  fresh private directory (a short ``pathlib.Path`` under the temp dir, so that socket paths
fit ``sun_path``; removed at teardown; also the server's ``cwd`` unless ``cwd=`` is
  given)::

      redis = server_fixture(
          lambda d: ["redis-server", "--port", "0", "--unixsocket", str(d / "redis.sock")],
          ready=lambda d: childguard.Connect(d / "redis.sock"), ladder="TERM:5s,KILL:1s",
          scope="session")

At teardown each server is closed (ladder, reap) and its report printed (pytest shows it with
a failing test's output). ``check=True`` (the default) fails the teardown when the close left
something behind — the server outlived its ladder, or a process that escaped its group
(``report.escaped``) or its cgroup (``members_left``) is still alive.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, List, Union

import pytest

from ._report import CloseReport
from ._server import Server, spawn

Spawner = Callable[..., Server]


def leftovers(report: CloseReport) -> List[str]:
    """What a close left alive, in words (empty: nothing)."""
    problems = []
    if report.outlived_ladder:
        problems.append("the server outlived its ladder (handed to the background reaper)")
    if report.escaped:
        problems.append(f"escaped its process group and still alive: {report.escaped}")
    cgroup = report.cgroup
    if cgroup is not None and cgroup.get("members_left"):
        problems.append(f"{cgroup['members_left']} process(es) left in {cgroup['path']}")
    return problems


class _Servers:
    """The servers one fixture scope spawned, closed in reverse order at its end."""

    def __init__(self, check: bool) -> None:
        self.check = check
        self.servers: List[Server] = []

    def spawn(self, argv: Any, **kwargs: Any) -> Server:
        server = spawn(argv, **kwargs)
        self.servers.append(server)
        return server

    def close_all(self) -> None:
        problems = []
        errors: List[BaseException] = []
        for server in reversed(self.servers):
            try:
                report = server.close()
            except Exception as e:  # keep closing the others
                errors.append(e)
                continue
            print(f"childguard: {report}")
            problems += [f"{server.program}[{server.pid}]: {p}" for p in leftovers(report)]
        if errors:
            raise errors[0]
        if self.check and problems:
            pytest.fail("childguard: " + "; ".join(problems), pytrace=False)


@pytest.fixture
def childguard_spawn() -> Iterator[Spawner]:
    """``childguard.spawn``, each server closed with its ladder when the test ends."""
    servers = _Servers(check=True)
    yield servers.spawn
    servers.close_all()


@pytest.fixture(scope="session")
def childguard_spawn_session() -> Iterator[Spawner]:
    """As ``childguard_spawn``, the servers closed when the session ends."""
    servers = _Servers(check=True)
    yield servers.spawn
    servers.close_all()


def server_fixture(
    argv: Union[Any, Callable[[Path], Any]],
    *,
    scope: str = "function",
    check: bool = True,
    **spawn_kwargs: Any,
) -> Any:
    """A pytest fixture that spawns one server (``childguard.spawn(argv, **spawn_kwargs)``)
    and closes it at the end of ``scope``. ``argv`` and each keyword value may be a callable
    of the server's private directory (made under the system's temp dir, removed at
    teardown). Assign it to the fixture's name in a test module or
    ``conftest.py``."""

    def fixture() -> Iterator[Server]:
        # Not tmp_path_factory: its paths are long, and a Unix socket's path must fit
        # sun_path (108 bytes). A short directory under the system's temp dir instead.
        directory = Path(tempfile.mkdtemp(prefix="childguard-"))

        def resolve(value: Any) -> Any:
            return value(directory) if callable(value) else value

        kwargs = {k: resolve(v) for k, v in spawn_kwargs.items()}
        kwargs.setdefault("cwd", directory)
        servers = _Servers(check)
        server = servers.spawn(resolve(argv), **kwargs)
        try:
            yield server
        finally:
            try:
                servers.close_all()
            finally:
                shutil.rmtree(directory, ignore_errors=True)

    return pytest.fixture(scope=scope)(fixture)  # type: ignore[call-overload]
