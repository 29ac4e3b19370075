"""spawn() and Server: the Pythonic face of ``childguard._native``."""

from __future__ import annotations

import asyncio
import atexit
import functools
import io
import json
import os
import pwd
import signal as _signal
import socket as _socket
import subprocess
import threading
import weakref
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from ._errors import ClosedError, ConfigError
from ._ready import Ready, uses_notify
from ._report import CloseReport

StrPath = Union[str, "os.PathLike[str]"]
SignalLike = Union[int, str, _signal.Signals]


class Server:
    """A spawned server and the socket connected to it. Made by :func:`spawn`.

    ``with spawn(...) as server:`` closes it on exit (also on an exception): the socket is shut
    down and closed, the ladder climbed, the child reaped, and :attr:`report` set. A Server
    collected without a close is closed in the background (childguard's reaper climbs the
    ladder), never blocking the interpreter; one still open when the interpreter exits is
    closed by an ``atexit`` drain, bounded by its ladder.

    Any thread may use it while another waits in :meth:`wait` or :meth:`close`: no call waits
    for another's wait. In a process made by ``os.fork()`` from the one that spawned it, every
    call but :attr:`pid`, :attr:`program` and ``repr`` raises :class:`InheritedError`: the
    server is the parent's.
    """

    def __init__(self, native: "_native.Handle", argv: Sequence[str], cwd: Optional[Path]) -> None:
        self._native = native
        self._argv = tuple(argv)
        self._cwd = cwd
        self._socket: Optional[_socket.socket] = None
        self._stdin: Optional[io.FileIO] = None
        self._stdout: Optional[io.FileIO] = None
        self._report: Optional[CloseReport] = None
        self._close_lock = threading.Lock()
        self._interrupted = False
        _OPEN.add(self)

    # --- what it is ---------------------------------------------------------------------
    @property
    def pid(self) -> Optional[int]:
        """The child's pid (still readable after the close)."""
        return self._native.pid

    @property
    def program(self) -> str:
        return self._native.program

    @property
    def argv(self) -> Tuple[str, ...]:
        return self._argv

    @property
    def cwd(self) -> Optional[Path]:
        """The working directory the server was started in, if ``cwd=`` was given."""
        return self._cwd

    @property
    def closed(self) -> bool:
        return self._native.closed

    @property
    def report(self) -> Optional[CloseReport]:
        """The close's report, once closed."""
        return self._report

    @property
    def socket(self) -> Optional[_socket.socket]:
        """Our end of the connection (``socket="stdio"`` or ``"activation"``), as a
        ``socket.socket``; ``None`` without one. The same object on every access; the close
        closes it (after shutting the connection down for the server)."""
        if self._socket is None:
            fd = self._native.socket_fd()
            if fd is None:
                return None
            self._socket = _socket.socket(fileno=fd)
        return self._socket

    @property
    def stdin(self) -> Optional[io.FileIO]:
        """With ``stdin=PIPE``: our end of the server's stdin, an unbuffered binary file
        (``subprocess``'s ``bufsize=0``); ``None`` otherwise or once taken. The same object on
        every access; the close closes it first (the server sees EOF), before any signal."""
        if self._stdin is None:
            fd = self._native.take_stdin_fd()
            if fd is None:
                return None
            self._stdin = io.FileIO(fd, "wb")
        return self._stdin

    @property
    def stdout(self) -> Optional[io.FileIO]:
        """With ``stdout=PIPE``: our end of the server's stdout, an unbuffered binary file;
        ``None`` otherwise or once taken. Closed by the close after the reap (a server logging
        its shutdown is not killed by ``SIGPIPE``)."""
        if self._stdout is None:
            fd = self._native.take_stdout_fd()
            if fd is None:
                return None
            self._stdout = io.FileIO(fd, "rb")
        return self._stdout

    def take_stdin(self) -> Optional[int]:
        """Takes our end of the piped stdin as a file descriptor, now yours: the close no longer
        closes it — close it yourself, before the close, for the server's EOF (an async writer
        closes it once it has stopped writing: no write races the close). ``None``: not piped,
        or already taken (by this or by :attr:`stdin`)."""
        return None if self._stdin is not None else self._native.take_stdin_fd()

    def take_stdout(self) -> Optional[int]:
        """Takes our end of the piped stdout as a file descriptor, now yours (close it)."""
        return None if self._stdout is not None else self._native.take_stdout_fd()

    @property
    def socket_path(self) -> Optional[str]:
        """With ``socket="activation"``: the listening socket's path (removed on close)."""
        path = self._native.socket_path()
        return os.fspath(path) if path is not None else None

    @property
    def output_tail(self) -> Optional[str]:
        """With ``capture=`` (or ``ready=Output(...)``): the last lines the server wrote
        (64 KiB / 1000 lines at most). After the close, the report's tail."""
        if self._report is not None:
            return self._report.output_tail
        return self._native.output_tail()

    # --- before the close ---------------------------------------------------------------
    def poll(self) -> Optional[int]:
        """The returncode if the server has exited (``-N``: signal ``N``), else ``None``."""
        return self._native.try_wait()

    def wait(self, timeout: float) -> Optional[int]:
        """Waits up to ``timeout`` seconds (GIL released) for the exit; ``None``: still running.

        Other threads may use the server meanwhile; a :meth:`close` on another thread ends the
        wait at once with :class:`ClosedError`. Ctrl-C raises ``KeyboardInterrupt`` within
        0.05 s (in the main thread); the server keeps running."""
        return self._native.wait(float(timeout))

    def kill(self, sig: SignalLike = _signal.SIGTERM, grace: float = 0.0) -> Optional[int]:
        """Sends ``sig`` (a number, ``signal.SIGTERM``, or a name: ``"TERM"``) once — to the
        group with ``process_group=True`` — then ``SIGCONT`` if it is catchable, and waits up to
        ``grace`` seconds (GIL released). Returns the returncode, or ``None`` if still alive.
        A later close resumes after the rung that sends the same signal."""
        spec: Union[int, str] = sig if isinstance(sig, str) else int(sig)
        return self._native.kill(spec, float(grace))

    def reload(self, sig: SignalLike = _signal.SIGHUP, timeout: float = 30.0) -> float:
        """Reloads a ``Notify()`` server as systemd's ``Type=notify-reload``: sends ``sig``,
        then waits up to ``timeout`` seconds for ``RELOADING=1`` followed by ``READY=1``.
        Returns the seconds it took; :class:`ReadyError` on a timeout, an exit during the
        reload or a watchdog miss. Ctrl-C raises ``KeyboardInterrupt``."""
        spec: Union[int, str] = sig if isinstance(sig, str) else int(sig)
        return self._native.reload(spec, float(timeout))

    def watchdog_missed(self) -> Optional[float]:
        """With ``watchdog=``: seconds from the spawn to the missed deadline, or ``None``."""
        return self._native.watchdog_missed()

    def detach(self) -> Optional[_socket.socket]:
        """Gives the server up: it keeps running, childguard still reaps it when it exits.
        Returns our end of the socket (now yours), or ``None``."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        fd = self._native.detach()
        return _socket.socket(fileno=fd) if fd is not None else None

    # --- the close ----------------------------------------------------------------------
    def close(self) -> CloseReport:
        """Shuts the socket down, closes it, climbs the ladder and reaps — bounded by the
        ladder's total grace — with the GIL released. Returns the :class:`CloseReport`; a second
        call returns the same report. Raises :class:`SignalError`/:class:`WaitError` (with
        ``report``) if a step failed; the child is still reaped (by childguard's reaper).

        Ctrl-C during the close raises ``KeyboardInterrupt`` within 0.1 s (in the main
        thread): the rest of the ladder, on its schedule, and the reap then go to childguard's
        background reaper (the ``atexit`` drain waits for it); there is no report, and a later
        ``close()`` raises :class:`ClosedError` saying so."""
        return self._close(None)

    def _close(self, cancel: Optional[_native.Cancel]) -> CloseReport:
        """The close, ended early (the rest to the reaper) once ``cancel`` is set."""
        with self._close_lock:
            if self._report is not None:
                return self._report
            if self._interrupted:
                raise ClosedError(
                    f"close on `{self.program}`: an earlier close was interrupted; childguard's "
                    "background reaper finishes it (no report)",
                    kind="closed",
                    program=self.program,
                )
            if self._socket is not None:
                # Our copy of the socket goes first; the native close then shuts down the
                # connection itself (which acts on every copy, the server's included).
                self._socket.close()
                self._socket = None
            if self._stdin is not None:
                # The server's EOF, as the native close gives it for a stdin still in the handle.
                self._stdin.close()
            try:
                line, data = self._native.close(cancel)
            except ClosedError:
                if self._report is not None:
                    return self._report
                raise
            except (KeyboardInterrupt, asyncio.CancelledError):
                self._interrupted = True
                raise
            finally:
                if self._stdout is not None:
                    self._stdout.close()
            self._report = CloseReport(line, json.loads(data))
            return self._report

    async def aclose(self) -> CloseReport:
        """:meth:`close` without blocking the event loop: it runs on the loop's default
        executor (a thread, the GIL released while it waits). Cancelling the awaiting task
        hands the rest of the close to childguard's background reaper: the thread stops
        waiting within 0.05 s (so Ctrl-C under ``asyncio.run``, which cancels the main task and
        then joins the executor, raises ``KeyboardInterrupt`` at once), the remaining rungs go
        out on their schedule and the reap follows; a later ``close()`` raises
        :class:`ClosedError` saying so."""
        loop = asyncio.get_running_loop()
        cancel = _native.Cancel()
        future = loop.run_in_executor(None, self._close, cancel)
        try:
            return await asyncio.shield(future)
        except BaseException:
            cancel.set()
            # The thread's CancelledError (or report) is nobody's now: retrieved, not logged.
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Server":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        if self._native.inherited:
            state = f"inherited from process {self._native.owner}"
        else:
            state = "closed" if self.closed else "running"
        return f"<childguard.Server {self.program}[{self.pid}] {state}>"


# Every Server not yet collected, for the atexit drain (a weak set: it keeps none alive).
_OPEN: "weakref.WeakSet[Server]" = weakref.WeakSet()


def _drain_at_exit() -> None:
    """At interpreter exit: closes the servers still open in the background and waits for
    childguard's reaper — bounded by the longest ladder of this process's servers plus 2 s (a
    spawn interrupted while it waited for readiness is closed by that reaper too).
    Without it the exit would end the reaper's thread mid-ladder and leave the server running."""
    _native.drain_at_exit([s._native for s in list(_OPEN)])


atexit.register(_drain_at_exit)


def _resolve_user(user: Union[str, int]) -> Tuple[int, int]:
    try:
        entry = pwd.getpwnam(user) if isinstance(user, str) else pwd.getpwuid(int(user))
    except KeyError as e:
        raise ConfigError(f"user={user!r}: no such user", kind="config") from e
    return entry.pw_uid, entry.pw_gid


def _pipe(value: Any) -> bool:
    return isinstance(value, (int, str)) and (value == subprocess.PIPE or value == "pipe")


def _devnull(name: str, value: Any) -> bool:
    if value is None or (name != "stderr" and _pipe(value)):
        return False
    if value == subprocess.DEVNULL:
        return True
    expected = "subprocess.DEVNULL" if name == "stderr" else "subprocess.DEVNULL or subprocess.PIPE"
    raise ConfigError(f"{name}={value!r}: expected None (inherit), {expected}", kind="config")


def spawn(
    argv: Union[StrPath, Sequence[StrPath]],
    *,
    ladder: Optional[str] = None,
    ready: Optional[Ready] = None,
    ready_timeout: Optional[float] = None,
    contain: Union[bool, str] = False,
    kill_mode: Optional[str] = None,
    cgroup_parent: Optional[StrPath] = None,
    process_group: bool = False,
    socket: Optional[str] = None,
    capture: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[StrPath] = None,
    user: Optional[Union[str, int]] = None,
    exit_with_parent: bool = False,
    stdin: Optional[Union[int, str]] = None,
    stdout: Optional[Union[int, str]] = None,
    stderr: Optional[int] = None,
    connect_timeout: Optional[float] = None,
    runtime_dir: Optional[StrPath] = None,
    notify_access: Optional[str] = None,
    skip_ignored: bool = True,
    watchdog: Optional[float] = None,
    memory_max: Optional[Union[int, str]] = None,
    memory_high: Optional[Union[int, str]] = None,
    tasks_max: Optional[Union[int, str]] = None,
    cpu_quota: Optional[Union[int, str]] = None,
    _stderr_lines: bool = False,
) -> Server:
    """Spawns ``argv`` and returns the :class:`Server` — once it is ready, with ``ready=``.

    - ``ladder``: the close's signal ladder, e.g. ``"INT:5s,QUIT:1s,KILL"`` (default
      ``HUP:1s,TERM:2s,KILL:5s``); a bad one raises :class:`ConfigError` naming the rung.
    - ``skip_ignored`` (default ``True``): a rung whose signal the server ignores (``SigIgn``
      in ``/proc/PID/status``, Linux; redis ignores ``SIGHUP``) is skipped at once, its grace
      not spent (:attr:`CloseReport.skipped`); ``KILL`` and the last rung never are.
      ``False`` sends every rung as written (so does ``"NOSKIP,"`` first in ``ladder``).
    - ``ready``: :class:`Notify`, :class:`Output`, :class:`Connect`, :class:`Http`,
      :class:`Exec`, or a list of them as
      :class:`AnyOf` / :class:`AllOf`; ``ready_timeout``
      (seconds, default 30): then the server is closed with its ladder and
      :class:`ReadyError` carries the report. An exit before ready fails at once, with the
      status and the output tail.
    - ``contain=True``: a cgroup v2 of its own, so that nothing it starts (``setsid``
      workers, daemons) outlives the close (:class:`ContainmentError` if none can be made;
      ``"best-effort"`` falls back to a process group). ``kill_mode``: ``"mixed"`` (default:
      catchable rungs to the leader only) or ``"control-group"``.
    - ``process_group=True``: the server leads a new group and every rung reaches it all.
    - ``socket``: ``"stdio"`` (a socketpair on its stdin/stdout: :attr:`Server.socket`) or
      ``"activation"`` (systemd socket activation, fd 3).
    - ``capture``: ``"stderr"``, ``"stdout"`` or ``"both"``: drained by one thread, the tail in
      :attr:`Server.output_tail`, errors and the report.
    - ``env`` replaces the environment (as ``subprocess``'s ``env=``); ``cwd``; ``user``: a name
      or uid to run as (root only; its group too; with ``Notify()`` the notify socket is
      given to it); ``stdin``/``stdout``/``stderr``: ``None`` (inherit) or
      ``subprocess.DEVNULL``; ``stdin``/``stdout`` also ``subprocess.PIPE`` (or ``"pipe"``):
      a pipe, our end in :attr:`Server.stdin`/:attr:`Server.stdout` (or
      :meth:`Server.take_stdin`/:meth:`Server.take_stdout`); ``exit_with_parent=True``: the
      kernel kills it if we die.
    - ``notify_access``: with ``Notify()``, whose ``READY=1`` counts: ``"all"`` (default: any
      process of its cgroup with ``contain=True``, else it and its descendants — so that a
      wrapper such as ``runuser`` works) or ``"main"`` (the spawned process only, systemd's
      default); others are ignored and listed in the report. ``runtime_dir``: where the
      socket directory is made (a relative one is made absolute).
    - ``watchdog``: with ``Notify()``, seconds: systemd's watchdog — the server gets
      ``WATCHDOG_USEC`` and must send ``WATCHDOG=1`` at least that often once ready; a miss
      (or ``WATCHDOG=trigger``) closes it with its ladder in the background
      (:meth:`Server.watchdog_missed` says when; the close report names it).
    - ``memory_max``, ``memory_high``, ``tasks_max``, ``cpu_quota`` (with ``contain=``):
      systemd's ``MemoryMax=``, ``MemoryHigh=``, ``TasksMax=``, ``CPUQuota=`` on the server's
      cgroup — bytes or ``"512M"``/``"infinity"``, a count, a percentage of one CPU (``50`` or
      ``"50%"``). Written before the server runs (cgroup v2, or the v1 hierarchies of a hybrid
      host); one that cannot be applied raises :class:`ContainmentError`, without ``contain=``
      :class:`ConfigError`. The kernel's OOM killer is named in the report
      (:attr:`CloseReport.oom_kill`, :attr:`CloseReport.limits`).

    The GIL is released for the whole spawn, readiness wait included. With ``ready=``, Ctrl-C
    during the wait raises ``KeyboardInterrupt`` within 0.05 s (in the main thread); the
    server is then closed in the background as soon as the library's spawn returns — at the
    latest once ``ready_timeout`` has passed (the ``atexit`` drain waits for that).
    """
    plan, args = _plan(dict(locals()))
    native = _native.spawn(
        plan, stdin_pipe=_pipe(stdin), stdout_pipe=_pipe(stdout), stderr_lines=_stderr_lines
    )
    return Server(native, args, Path(cwd) if cwd is not None else None)


def _plan(p: Dict[str, Any]) -> Tuple[Any, List[str]]:
    """The native plan of a start from :func:`spawn`'s parameters (``p``, by name), and argv
    as text. Shared by :func:`spawn` and :func:`childguard.supervise`."""
    if isinstance(p["argv"], (str, bytes, os.PathLike)):
        p["argv"] = [p["argv"]]
    args = [os.fsdecode(os.fspath(a)) for a in p["argv"]]
    uid_gid = _resolve_user(p["user"]) if p["user"] is not None else None
    ready_spec = None
    ready = p["ready"]
    if ready is not None:
        if not hasattr(ready, "_spec"):
            raise ConfigError(
                f"ready={ready!r}: expected childguard.Notify(), Output(text), Connect(address), "
                "Http(url), Exec(argv), AnyOf(...) or AllOf(...)",
                kind="config",
            )
        ready_spec = ready._spec()
    env_pairs = None
    if p["env"] is not None:
        env_pairs = [(os.fsdecode(k), os.fsdecode(v)) for k, v in p["env"].items()]
    plan = _native.plan(
        args,
        env=env_pairs,
        cwd=os.fspath(p["cwd"]) if p["cwd"] is not None else None,
        ladder=p["ladder"],
        ready=ready_spec,
        ready_timeout=p["ready_timeout"],
        contain=p["contain"],
        kill_mode=p["kill_mode"],
        cgroup_parent=(
            os.fspath(p["cgroup_parent"]) if p["cgroup_parent"] is not None else None
        ),
        process_group=p["process_group"],
        socket=p["socket"],
        capture=p["capture"],
        exit_with_parent=p["exit_with_parent"],
        uid=uid_gid[0] if uid_gid else None,
        gid=uid_gid[1] if uid_gid else None,
        notify_owner=uid_gid if (uid_gid and uses_notify(p["ready"])) else None,
        stdin_null=_devnull("stdin", p["stdin"]),
        stdout_null=_devnull("stdout", p["stdout"]),
        stderr_null=_devnull("stderr", p["stderr"]),
        connect_timeout=p["connect_timeout"],
        runtime_dir=os.fspath(p["runtime_dir"]) if p["runtime_dir"] is not None else None,
        notify_access=p["notify_access"],
        skip_ignored=p["skip_ignored"],
        watchdog=p["watchdog"],
        limits=_limits(p["memory_max"], p["memory_high"], p["tasks_max"], p["cpu_quota"]),
        passthrough=p.get("passthrough", False),  # stdio_server's (_stdio_server.py)
    )
    return plan, args


def _limits(
    memory_max: Optional[Union[int, str]],
    memory_high: Optional[Union[int, str]],
    tasks_max: Optional[Union[int, str]],
    cpu_quota: Optional[Union[int, str]],
) -> Optional[List[Tuple[str, str]]]:
    """The limits as (name, value) pairs in systemd's spelling, for the native spawn."""
    pairs: List[Tuple[str, str]] = []
    for name, value in (
        ("memory-max", memory_max),
        ("memory-high", memory_high),
        ("tasks-max", tasks_max),
        ("cpu-quota", cpu_quota),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(
                f"{name.replace('-', '_')}={value!r}: expected an int or a str such as '512M'",
                kind="config",
            )
        text = str(value)
        if name == "cpu-quota" and isinstance(value, int):
            text += "%"
        pairs.append((name, text))
    return pairs or None


async def spawn_async(argv: Union[StrPath, Sequence[StrPath]], **kwargs: Any) -> Server:
    """:func:`spawn` without blocking the event loop (it runs on the loop's default executor,
    the GIL released while it waits for readiness). If the awaiting task is cancelled, the
    server that the spawn still returns is closed, on the executor too."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(None, functools.partial(spawn, argv, **kwargs))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:

        def close_late(done: "asyncio.Future[Server]") -> None:
            if not done.cancelled() and done.exception() is None:
                loop.run_in_executor(None, done.result().close)

        future.add_done_callback(close_late)
        raise


def parse_ladder(text: str) -> str:
    """The ladder's canonical text, or :class:`ConfigError` naming the rung that is wrong."""
    return _native.parse_ladder(text)


DEFAULT_LADDER: str = _native.DEFAULT_LADDER
