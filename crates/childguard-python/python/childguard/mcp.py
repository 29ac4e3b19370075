"""childguard.mcp: the MCP stdio client transport, with the server owned and closed by childguard.

>>> from mcp import ClientSession, StdioServerParameters
>>> import childguard.mcp
>>> params = StdioServerParameters(command="npx", args=["-y", "@modelcontextprotocol/server-everything"])
>>> client = childguard.mcp.stdio_client(params)
>>> async with client as (read, write), ClientSession(read, write) as session:
...     await session.initialize()
...     await session.call_tool("echo", {"message": "hi"})
>>> client.report.signals              # [] : it exited on the EOF, nothing was signalled

A drop-in for ``mcp.client.stdio.stdio_client``: it yields the same ``(read_stream,
write_stream)`` of ``SessionMessage`` (memory object streams, JSON-RPC parsed by the SDK's own
adapter, a bad line handed to the session as an exception), so ``ClientSession`` works
unchanged. What differs is the server's life:

- it is spawned by childguard: in a cgroup of its own when one can be made (``contain=
  "best-effort"``, the default; else its own process group; every rung to all of it), so
  that launchers (``npx`` → ``npm exec`` → ``sh -c`` → ``node``, ``uvx``) and whatever they
  start — ``setsid`` workers included — end with it;
- its stderr is passed on line by line to ``errlog`` (default ``sys.stderr``, as the SDK's)
  *and* kept in the bounded tail (the report's ``output_tail``); an exception leaving the block
  after the server exited by itself (a start-up failure: npm's ``E404`` through ``npx``, a
  missing module) gets a note with how it ended and its last stderr lines;
- the close is the MCP close as a childguard ladder, default ``EOF:2s,TERM:2s,KILL:5s``: our
  end of its stdin is closed (EOF), 2 s for it to exit, then ``SIGTERM``, 2 s, ``SIGKILL``
  (to the whole cgroup or group), 5 s for the reap — and the close reports what happened
  (:attr:`StdioClient.report`). It runs on leaving the ``async with`` block, on an exception
  and on cancellation (shielded: a cancelled caller neither leaks the server nor skips it);
- it dies with this process (``exit_with_parent=True``, the default): a host killed even by
  ``SIGKILL`` leaves nothing behind — the kernel kills the launcher, childguard's guardian the
  cgroup.

Needs the ``mcp`` package (the MCP Python SDK, 2.x) and anyio; works under asyncio and trio.
"""

from __future__ import annotations

import codecs
import logging
import os
import socket
import subprocess
import sys
import threading
from contextlib import asynccontextmanager, suppress
from types import TracebackType
from typing import Any, AsyncIterator, Dict, List, Optional, TextIO, Tuple, Type, Union

import anyio
import anyio.lowlevel
import anyio.to_thread
import mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from ._report import CloseReport
from ._server import Server, spawn
from ._stdio_server import MCP_LADDER  # EOF:2s,TERM:2s,KILL:5s: the MCP close

__all__ = ["MCP_LADDER", "START_ERROR_LINES", "StdioClient", "stdio_client"]

logger = logging.getLogger(__name__)


# The SDK's window for the writer to flush messages already accepted before stdin closes.
_WRITER_FLUSH_TIMEOUT = 0.5
# After the EOF the writer has been woken (notify_closing): it ends at its next step.
_WRITER_STOP_TIMEOUT = 2.0
#: How many of the server's last stderr lines the note on a start-up failure shows.
START_ERROR_LINES = 12

# The errlog forwarder ends at the line socket's EOF, once the capture has ended; bounded in
# case a process outside our reach (no cgroup: a setsid escapee) still holds the server's stderr.
_ERRLOG_JOIN_TIMEOUT = 2.0

ReadStream = MemoryObjectReceiveStream[Union[SessionMessage, Exception]]
WriteStream = MemoryObjectSendStream[SessionMessage]


class _Pipe:
    """One pipe end of ours, non-blocking, used from the event loop only.

    The close is the one place the fd is closed, in the order anyio asks for: marked closed,
    waiters woken (``notify_closing``: a task in ``wait_readable``/``wait_writable`` gets
    ``ClosedResourceError``), then ``os.close`` — with no checkpoint between. Every read and
    write looks at the mark first, after each wait, so no task touches the fd number once it is
    closed (and perhaps reused): a write never races the close of stdin.
    """

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.closed = False

    async def read(self) -> bytes:
        while True:
            if self.closed:
                raise anyio.ClosedResourceError
            try:
                return os.read(self.fd, 65536)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)

    async def write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.closed:
                raise anyio.ClosedResourceError
            try:
                view = view[os.write(self.fd, view):]
            except BlockingIOError:
                await anyio.wait_writable(self.fd)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            anyio.notify_closing(self.fd)
            os.close(self.fd)


def _parse_line(line: str) -> Union[SessionMessage, Exception]:
    """One stdout line → a message, or the parse error as a value for the session (as the SDK)."""
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        logger.exception("Failed to parse JSONRPC message from server")
        return exc
    return SessionMessage(message)


async def _drain(stdout: _Pipe) -> None:
    """Reads and drops the rest of the server's stdout (so a server flushing its output is not
    blocked on a full pipe and can exit), until EOF or until our shutdown closes our end."""
    with anyio.CancelScope(shield=True):
        with suppress(anyio.ClosedResourceError, OSError):
            while await stdout.read():
                pass


def _forward_lines(fd: int, errlog: TextIO, encoding: str) -> None:
    """The errlog thread: the captured stderr lines (the native line socket) into ``errlog``,
    until the socket's EOF (the capture ended). A failing ``errlog`` ends it: our end closes,
    and the library stops writing lines to it."""
    with socket.socket(fileno=fd) as sock, sock.makefile("rb") as lines:
        for line in lines:
            try:
                errlog.write(line.decode(encoding, "replace"))
                errlog.flush()
            except Exception:
                return


class StdioClient:
    """``async with StdioClient(server) as (read_stream, write_stream):`` — see the module.

    Made by :func:`stdio_client`. Enter it once. Attributes: :attr:`server` (the
    :class:`~childguard.Server`, from the spawn on), :attr:`report` (the close's
    :class:`~childguard.CloseReport`, once the block is left), :attr:`pid`.
    """

    def __init__(
        self,
        server: Any,
        *,
        ladder: str = MCP_LADDER,
        contain: Union[bool, str] = "best-effort",
        kill_mode: str = "control-group",
        errlog: Optional[TextIO] = sys.stderr,
        exit_with_parent: bool = True,
    ) -> None:
        self.params = server
        self.ladder = ladder
        self.contain = contain
        self.kill_mode = kill_mode
        self.errlog = errlog
        self.exit_with_parent = exit_with_parent
        self.server: Optional[Server] = None
        self.report: Optional[CloseReport] = None
        self._cm: Optional[Any] = None

    @property
    def pid(self) -> Optional[int]:
        return self.server.pid if self.server is not None else None

    async def __aenter__(self) -> Tuple[ReadStream, WriteStream]:
        if self._cm is not None:
            raise RuntimeError("childguard.mcp.StdioClient: entered twice (make one per server)")
        self._cm = self._run()
        streams: Tuple[ReadStream, WriteStream] = await self._cm.__aenter__()
        return streams

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Optional[bool]:
        assert self._cm is not None
        try:
            result: Optional[bool] = await self._cm.__aexit__(exc_type, exc, tb)
        except BaseException as raised:
            self._note_server_end(raised)
            raise
        if exc is not None and not result:
            self._note_server_end(exc)
        return result

    def _note_server_end(self, exc: BaseException) -> None:
        """Adds to ``exc``, which leaves the block, a note naming how the server ended and its
        last stderr lines — when it ended by itself (before the close or at its EOF, not by a
        signal of ours) with a failure or before the close began: what a start-up failure looks
        like, where the SDK's session says only ``Connection closed``. Python >= 3.11 prints
        notes with the traceback; before, the lines are still on ``errlog``."""
        report = self.report
        if report is None or not hasattr(exc, "add_note"):
            return
        kind = report.ended_by.get("kind")
        code = report.returncode
        if not (kind == "before_close" or (kind == "eof" and code != 0)):
            return
        how = f"exited with status {code}" if code is not None and code >= 0 else (
            f"died of signal {-code}" if code is not None else "ended")
        lines = [line for line in (report.output_tail or "").splitlines() if line.strip()]
        lines = lines[-START_ERROR_LINES:]
        text = f"the MCP server `{report.program}` (pid {report.pid}) {how}"
        text += " before the close" if kind == "before_close" else " at its stdin's EOF"
        if lines:
            text += "; its last stderr lines:\n" + "\n".join(f"    {line}" for line in lines)
        else:
            text += "; it wrote nothing on stderr"
        exc.add_note(text)

    def _argv_env(self) -> Tuple[List[str], Dict[str, str], Any, str, str]:
        p = self.params
        command = getattr(p, "command", None)
        if not isinstance(command, str) or not command:
            raise ValueError(f"server={p!r}: needs a `command` (StdioServerParameters or the same fields)")
        args = [str(a) for a in (getattr(p, "args", None) or [])]
        # As the SDK: a safe subset of our environment, the server's env merged over it.
        env = dict(get_default_environment())
        env.update(getattr(p, "env", None) or {})
        encoding = getattr(p, "encoding", None) or "utf-8"
        errors = getattr(p, "encoding_error_handler", None) or "strict"
        try:  # before the spawn: a bad name would otherwise end the reader mid-session
            codecs.lookup(encoding)
            codecs.lookup_error(errors)
        except LookupError as e:
            raise ValueError(f"server={p!r}: encoding {encoding!r} / {errors!r}: {e}") from e
        return [command, *args], env, getattr(p, "cwd", None), encoding, errors

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[Tuple[ReadStream, WriteStream]]:
        argv, env, cwd, encoding, errors = self._argv_env()
        # Synchronous, on the loop: a spawn without readiness returns within milliseconds, and
        # no await comes between it and the try below, so a cancellation cannot leak the server.
        server = spawn(
            argv,
            env=env,
            cwd=cwd,
            ladder=self.ladder,
            contain=self.contain,
            kill_mode=self.kill_mode,
            # Without a cgroup, a group of its own, as the SDK's start_new_session: every rung
            # reaches the launcher and what it started (but not a setsid escapee).
            process_group=self.contain is False,
            capture="stderr",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            exit_with_parent=self.exit_with_parent,
            _stderr_lines=self.errlog is not None,
        )
        self.server = server
        try:
            stdin_fd, stdout_fd = server.take_stdin(), server.take_stdout()
            assert stdin_fd is not None and stdout_fd is not None
            stdin, stdout = _Pipe(stdin_fd), _Pipe(stdout_fd)
            forwarder: Optional[threading.Thread] = None
            lines_fd = server._native.take_lines_fd()
            if self.errlog is not None and lines_fd is not None:
                forwarder = threading.Thread(
                    target=_forward_lines,
                    args=(lines_fd, self.errlog, encoding),
                    name=f"childguard-mcp-errlog-{server.pid}",
                    daemon=True,
                )
                forwarder.start()
        except BaseException:
            server.close()
            raise

        read_stream_writer, read_stream = anyio.create_memory_object_stream[
            Union[SessionMessage, Exception]
        ](0)
        write_stream, write_stream_reader = anyio.create_memory_object_stream[SessionMessage](0)
        shutting_down = False
        writer_done = anyio.Event()

        async def stdout_reader() -> None:
            decoder = codecs.getincrementaldecoder(encoding)(errors=errors)
            try:
                async with read_stream_writer:
                    try:
                        buffer = ""
                        while True:
                            data = await stdout.read()
                            if not data:
                                return  # EOF: the session sees the stream end
                            lines = (buffer + decoder.decode(data)).split("\n")
                            buffer = lines.pop()
                            for line in lines:
                                try:
                                    await read_stream_writer.send(_parse_line(line))
                                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                    return  # the session is gone; only the drain remains
                    finally:
                        await _drain(stdout)
            except anyio.ClosedResourceError:
                pass  # our shutdown closed stdout under the read
            except (anyio.BrokenResourceError, OSError):
                if not shutting_down:
                    logger.exception("Reading from the MCP server's stdout failed mid-session")

        async def stdin_writer() -> None:
            try:
                async with write_stream_reader:
                    async for session_message in write_stream_reader:
                        json = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await stdin.write_all((json + "\n").encode(encoding, errors))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                # The server may still run: end the read side, so that the session sees the
                # connection end instead of a request waiting forever.
                await read_stream_writer.aclose()
            finally:
                writer_done.set()

        async def shutdown() -> None:
            # As the SDK: the reader goes to its drain, the writer gets a bounded window to
            # flush what the session already handed over.
            read_stream.close()
            write_stream.close()
            with anyio.move_on_after(_WRITER_FLUSH_TIMEOUT):
                await writer_done.wait()
            # The EOF. The writer is not in a write (it is parked at an await: the loop runs
            # one task at a time), and the close wakes it with ClosedResourceError if it waits
            # for room in the pipe; it looks at the mark before touching the fd again. Then
            # it is waited for, so nothing of ours writes to the server after this point.
            stdin.close()
            with anyio.move_on_after(_WRITER_STOP_TIMEOUT):
                await writer_done.wait()
            try:
                # childguard's close: stdin is closed already, so its EOF rung counts from now;
                # then TERM, KILL, to the whole cgroup or group, and the reap. On a thread
                # (bounded by the ladder), the loop runs on: the reader drains stdout meanwhile.
                self.report = await anyio.to_thread.run_sync(server.close)
            except BaseException as e:
                self.report = getattr(e, "report", None)
                raise
            finally:
                # A survivor outside our reach may hold stdout open: wake the drain, close ours.
                stdout.close()
                if forwarder is not None:
                    await anyio.to_thread.run_sync(forwarder.join, _ERRLOG_JOIN_TIMEOUT)
                for stream in (read_stream, write_stream, read_stream_writer, write_stream_reader):
                    await stream.aclose()
                await anyio.lowlevel.checkpoint()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stdout_reader)
                tg.start_soon(stdin_writer)
                try:
                    yield read_stream, write_stream
                finally:
                    shutting_down = True
                    # Shielded: the close must run to its end under the caller's cancellation,
                    # or the server would be left; every wait in it is bounded.
                    with anyio.CancelScope(shield=True):
                        await shutdown()
                    tg.cancel_scope.cancel()
        finally:
            if not server.closed:  # the task group failed before the shutdown ran
                with anyio.CancelScope(shield=True):
                    stdin.close()
                    stdout.close()
                    self.report = await anyio.to_thread.run_sync(server.close)
        await anyio.lowlevel.cancel_shielded_checkpoint()


def stdio_client(
    server: Any,
    *,
    ladder: str = MCP_LADDER,
    contain: Union[bool, str] = "best-effort",
    kill_mode: str = "control-group",
    errlog: Optional[TextIO] = sys.stderr,
    exit_with_parent: bool = True,
) -> StdioClient:
    """``async with stdio_client(params) as (read_stream, write_stream):`` — what
    ``mcp.client.stdio.stdio_client(params)`` yields, with the server owned by childguard.

    - ``server``: ``mcp.StdioServerParameters``, or any object with its fields ``command``,
      ``args``, ``env`` (merged over the SDK's default environment, as the SDK does), ``cwd``,
      ``encoding``, ``encoding_error_handler``.
    - ``ladder``: the close (default :data:`MCP_LADDER`, ``EOF:2s,TERM:2s,KILL:5s``).
    - ``contain``: ``"best-effort"`` (default: a cgroup when possible, else a process group),
      ``True`` (a cgroup or :class:`~childguard.ContainmentError`), ``False`` (a process group
      only, as the SDK's ``start_new_session``: every rung to the group).
    - ``kill_mode``: ``"control-group"`` (default: every rung to every process of the cgroup,
      as the SDK's ``killpg`` — a launcher such as ``npm exec`` does not pass ``SIGTERM`` on
      to the server it started) or ``"mixed"`` (catchable rungs to the spawned process only;
      ``KILL`` to all).
    - ``errlog``: a text file the server's stderr lines are written to, as they come (default
      ``sys.stderr``, as the SDK's; ``None``: kept only in the bounded tail,
      ``report.output_tail``, which has them either way). Unlike the SDK's it need not have a
      ``fileno()``.
    - ``exit_with_parent`` (default ``True``): if this process dies, even by ``SIGKILL``, the
      kernel kills the spawned process and childguard's guardian its cgroup (Linux). The SDK
      has nothing of the kind: its server outlives a killed host.

    Keep the returned :class:`StdioClient` to read ``report`` after the block.
    """
    return StdioClient(
        server,
        ladder=ladder,
        contain=contain,
        kill_mode=kill_mode,
        errlog=errlog,
        exit_with_parent=exit_with_parent,
    )
