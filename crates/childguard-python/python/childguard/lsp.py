"""childguard.lsp: the Language Server Protocol's close for a stdio language server.

>>> import childguard, childguard.lsp
>>> server = childguard.stdio_server(["pyright-langserver", "--stdio"])
>>> # ... `initialize` and the session, over server.stdin and server.stdout ...
>>> report = childguard.lsp.close(server)   # shutdown, exit, then the server's close
>>> report.ended_by, report.clean            # ('exit', True)

The same close as the Rust crate ``childguard-lsp`` (its docs have the whole timeline), with the
``Content-Length`` framing done here:

1. ``shutdown`` (a request, id ``"childguard-lsp/shutdown"``) is written, and the server's stdout
   read until its answer, ``shutdown_timeout`` seconds at most (default 2, as
   vscode-languageclient). What comes before the answer is dropped (notifications, answers to
   your earlier requests); a request of the server's is answered at once with a
   ``RequestCancelled`` (-32800) error (JSON-RPC wants every request answered, and a server may
   hold its shutdown until it is); bytes that are not a frame (a stream begun mid-message, a
   stray line) are skipped up to the next ``Content-Length:``. A ``Content-Length`` that is not a
   number or is over 64 MiB ends the step (``"unreadable"``, saying why), as do the end of the
   stdout and the server's exit (looked at every 50 ms).
2. ``exit`` (a notification) is written — unless the server exited or a write failed — and our
   end of its stdin closed right after (its end of file).
3. ``exit_grace`` seconds at most (default 2) for the server to exit: gone, it ended by
   ``"exit"``.
4. The server's own :meth:`~childguard.Server.close`: its ladder from the top (an ``EOF:`` wait
   first if it has one), the whole tree, the reap. Its report is :attr:`LspCloseReport.close`.

Every write is non-blocking, bounded by its step's time: a server that does not read its stdin
gets nothing more and the ladder, never a hung client. The close is bounded by
``shutdown_timeout + exit_grace`` plus the ladder's total grace.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import select
import socket
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from . import _native
from ._report import CloseReport
from ._server import Server

__all__ = ["LspCloseReport", "aclose", "close"]

SHUTDOWN_ID = "childguard-lsp/shutdown"
REQUEST_CANCELLED = -32800
MAX_BODY = 64 << 20
_MAX_HEADER = 8 * 1024
_CONTENT_LENGTH = b"content-length:"
_LOOK_EVERY = 0.05
_NAME_BYTES = frozenset(b"-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def _frame(message: Dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class _Unreadable(Exception):
    pass


class _Decoder:
    """The server's bytes in, whole messages out; skips what is not a frame (see the module)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.skipped = 0
        self.garbled = 0

    def push(self, data: bytes) -> None:
        self.buf += data

    def next(self) -> Optional[Any]:
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > _MAX_HEADER:
                    self._resync(0)
                return None
            length = self._length(bytes(self.buf[:end]))
            if length is None:
                self._resync(end + 4)
                continue
            if length > MAX_BODY:
                raise _Unreadable(
                    f"Content-Length {length} is over the {MAX_BODY >> 20} MiB a message may have"
                )
            start = end + 4
            if len(self.buf) - start < length:
                return None
            body = bytes(self.buf[start:start + length])
            del self.buf[:start + length]
            try:
                return json.loads(body)
            except ValueError:
                self.garbled += 1

    @staticmethod
    def _length(header: bytes) -> Optional[int]:
        """The Content-Length; None if this is not a header at all."""
        length: Optional[int] = None
        for line in header.split(b"\n"):
            name, colon, value = line.rstrip(b"\r").partition(b":")
            if not colon or not name or not all(c in _NAME_BYTES for c in name):
                return None
            if name.lower() == b"content-length":
                text = value.strip().decode("latin-1")
                if not (text.isascii() and text.isdigit()):
                    raise _Unreadable(f"the header's Content-Length {text!r} is not a length")
                length = int(text)
        return length

    def _resync(self, at_least: int) -> None:
        found = bytes(self.buf[1:]).lower().find(_CONTENT_LENGTH)
        if found >= 0:
            drop = found + 1
        else:
            drop = min(max(len(self.buf) - (len(_CONTENT_LENGTH) - 1), at_least), len(self.buf))
        self.skipped += drop
        del self.buf[:drop]


class LspCloseReport:
    """What the LSP close did, and the server's :class:`~childguard.CloseReport` after it.

    - ``shutdown``: ``"answered"``, ``"refused"`` (an error answer: ``shutdown_detail``),
      ``"timed_out"``, ``"exited"``, ``"stdout_closed"``, ``"unreadable"`` or ``"not_sent"``
      (``shutdown_detail`` says why);
    - ``exit_sent`` (``exit_detail``: why not);
    - ``ended_by``: ``"before_shutdown"`` (it had exited: nothing sent), ``"shutdown"`` (it
      exited before ``exit`` went out), ``"exit"`` (gone after ``exit``, before its close), or
      ``"ladder"`` (its close ended it: ``close.ended_by`` says how);
    - times in milliseconds since the close began; counts ``dropped``, ``refused``,
      ``skipped_bytes``, ``garbled``, ``partial_bytes``; ``notes``; ``close``; ``total_ms``.
    """

    def __init__(self) -> None:
        self.shutdown = "not_sent"
        self.shutdown_detail: Optional[str] = "the LSP steps did not run"
        self.shutdown_answered_ms: Optional[float] = None
        self.exit_sent = False
        self.exit_detail: Optional[str] = "shutdown was not sent"
        self.exit_sent_ms: Optional[float] = None
        self.exited_ms: Optional[float] = None
        self.ended_by = ""
        self.dropped = 0
        self.refused = 0
        self.skipped_bytes = 0
        self.garbled = 0
        self.partial_bytes = 0
        self.notes: List[str] = []
        self.close: Optional[CloseReport] = None
        self.total_ms = 0.0

    @property
    def clean(self) -> bool:
        """``shutdown`` answered, gone after ``exit``, and its close sent no signal."""
        return (self.shutdown == "answered" and self.ended_by == "exit"
                and self.close is not None and not self.close.signals)

    def __str__(self) -> str:
        parts = [f"LSP close: shutdown {self.shutdown}"
                 + (f" ({self.shutdown_detail})" if self.shutdown_detail else "")
                 + (f" +{self.shutdown_answered_ms:.1f}ms" if self.shutdown_answered_ms is not None else "")]
        if self.exit_sent:
            parts.append(f"exit +{self.exit_sent_ms or 0:.1f}ms")
        else:
            parts.append(f"exit not sent ({self.exit_detail})")
        if self.exited_ms is not None:
            parts.append(f"exited +{self.exited_ms:.1f}ms")
        text = ", ".join(parts) + f": ended by {self.ended_by}"
        counts = [f"{v} {k}" for k, v in (("dropped", self.dropped), ("refused", self.refused),
                                           ("bytes skipped", self.skipped_bytes),
                                           ("bodies not JSON", self.garbled),
                                           ("bytes of no whole message", self.partial_bytes)) if v]
        for extra in counts + self.notes:
            text += f"; {extra}"
        return text + f"; total {self.total_ms:.1f}ms; close: {self.close}"

    def __repr__(self) -> str:
        return f"<LspCloseReport {self}>"


class _Steps:
    """The steps of one close over (stdin fd, stdout fd); fills ``report``."""

    def __init__(self, server: Server, to: int, frm: int, stop: Optional[threading.Event]) -> None:
        self.server, self.to, self.frm, self.stop = server, to, frm, stop
        self.began = time.monotonic()
        self.report = LspCloseReport()
        self.decoder = _Decoder()
        self.broken: Optional[str] = None

    def ms(self) -> float:
        return (time.monotonic() - self.began) * 1e3

    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def exited(self) -> bool:
        try:
            gone = self.server.poll() is not None
        except Exception as e:  # a failed look: the close still ends it
            self.report.notes.append(f"looking at the server failed: {e}")
            return False
        if gone:
            self.report.exited_ms = self.ms()
        return gone

    def wait(self, fd: int, flag: int, deadline: float) -> bool:
        poller = select.poll()
        poller.register(fd, flag)
        left = max(0.0, deadline - time.monotonic())
        return bool(poller.poll(left * 1e3))

    def write(self, data: bytes, deadline: float) -> Optional[str]:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.to, view):]
            except (BlockingIOError, InterruptedError):
                if time.monotonic() >= deadline or not self.wait(self.to, select.POLLOUT, deadline):
                    return "the server's stdin stayed full (it does not read)"
            except OSError as e:
                return f"writing to the server's stdin failed: {e}"
        return None

    def listen(self, deadline: float) -> Tuple[str, Optional[str]]:
        r = self.report
        while True:
            try:
                message = self.decoder.next()
            except _Unreadable as e:
                return "unreadable", str(e)
            if message is not None:
                if not isinstance(message, dict):
                    r.dropped += 1
                    continue
                mid, method = message.get("id"), message.get("method")
                if mid == SHUTDOWN_ID and method is None:
                    r.shutdown_answered_ms = self.ms()
                    error = message.get("error")
                    if error is None:
                        return "answered", None
                    return "refused", f"{error.get('code')}: {error.get('message')}"
                if mid is not None and isinstance(method, str):
                    r.refused += 1
                    if self.broken is None:
                        reply = {"jsonrpc": "2.0", "id": mid, "error": {
                            "code": REQUEST_CANCELLED,
                            "message": "the client is closing the connection (`shutdown` sent): not handled"}}
                        self.broken = self.write(_frame(reply), deadline)
                        if self.broken:
                            r.notes.append(f"answering a request of the server's: {self.broken}")
                else:
                    r.dropped += 1
                continue
            now = time.monotonic()
            if now >= deadline:
                return "timed_out", None
            if self.stopped():
                return "timed_out", "cancelled"
            if not self.wait(self.frm, select.POLLIN, min(deadline, now + _LOOK_EVERY)):
                if self.exited():
                    return "exited", None
                continue
            try:
                data = os.read(self.frm, 65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                return "unreadable", f"reading the server's stdout: {e}"
            if not data:
                return "stdout_closed", None
            self.decoder.push(data)

    def speak(self, shutdown_timeout: float, exit_grace: float, end_input: Any) -> None:
        r = self.report
        deadline = self.began + shutdown_timeout
        os.set_blocking(self.to, False)
        os.set_blocking(self.frm, False)
        why = self.write(_frame({"jsonrpc": "2.0", "id": SHUTDOWN_ID, "method": "shutdown"}), deadline)
        if why is not None:
            r.shutdown, r.shutdown_detail = "not_sent", why
        else:
            r.shutdown, r.shutdown_detail = self.listen(deadline)
        r.skipped_bytes, r.garbled = self.decoder.skipped, self.decoder.garbled
        r.partial_bytes = len(self.decoder.buf)
        if r.shutdown == "not_sent":
            r.exit_detail = "shutdown could not be sent"
        elif self.broken is not None:
            r.exit_detail = f"an earlier write failed: {self.broken}"
        elif self.exited():
            r.ended_by, r.exit_detail = "shutdown", "the server had exited"
        elif self.stopped():
            r.exit_detail = "cancelled"
        else:
            why = self.write(_frame({"jsonrpc": "2.0", "method": "exit"}), time.monotonic() + exit_grace)
            r.exit_sent, r.exit_detail = why is None, why
            if why is None:
                r.exit_sent_ms = self.ms()
        end_input()
        if r.exit_sent:
            grace_end = time.monotonic() + exit_grace
            while not self.stopped():
                left = grace_end - time.monotonic()
                try:
                    gone = self.server.wait(max(0.0, min(left, _LOOK_EVERY))) is not None
                except Exception as e:
                    r.notes.append(f"waiting for the exit after `exit` failed: {e}")
                    break
                if gone:
                    r.exited_ms, r.ended_by = self.ms(), "exit"
                    break
                if left <= 0:
                    break


def _fd(stream: Any) -> int:
    return stream if isinstance(stream, int) else int(stream.fileno())


def _shut_write(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _close_stream(stream: Any) -> None:
    if isinstance(stream, int):
        os.close(stream)
    else:
        stream.close()


def _close(server: Server, shutdown_timeout: float, exit_grace: float, stdin: Any, stdout: Any,
           stop: Optional[threading.Event] = None,
           cancel: Optional[_native.Cancel] = None) -> LspCloseReport:
    began = time.monotonic()
    given_stdout = stdout is not None
    stdin = server.stdin if stdin is None else stdin
    stdout = server.stdout if stdout is None else stdout
    end_input: Any = functools.partial(_close_stream, stdin)
    if stdin is None and stdout is None and server.socket is not None:
        # socket="stdio": one socketpair both ways (the server's close closes it); the end of
        # file is its shutdown for writing (our copy closed alone would give none).
        stdin = stdout = server.socket
        end_input = functools.partial(_shut_write, server.socket)
    report = LspCloseReport()
    if server.poll() is not None:
        report.ended_by = "before_shutdown"
        report.shutdown_detail = report.exit_detail = "the server had exited"
    elif stdin is None or stdout is None:
        report.shutdown_detail = ("the server has no piped stdin and stdout (stdin=PIPE, "
                                  "stdout=PIPE) nor a stdio socket to speak over: pass them as "
                                  "stdin=, stdout=")
    else:
        steps = _Steps(server, _fd(stdin), _fd(stdout), stop)
        steps.began = began
        report = steps.report
        steps.speak(float(shutdown_timeout), float(exit_grace), end_input)
    try:
        report.close = server._close(cancel)
    except BaseException as e:
        report.close = getattr(e, "report", None)
        _fold(report, began)
        e.lsp_report = report  # type: ignore[attr-defined]
        raise
    finally:
        # The server's own stdout is closed by its close; one given is ours to close.
        if given_stdout:
            _close_stream(stdout)
    _fold(report, began)
    return report


def _fold(report: LspCloseReport, began: float) -> None:
    """``ended_by`` from the server's close when no step saw the exit."""
    if not report.ended_by and report.close is not None:
        kind = report.close.ended_by.get("kind")
        if kind == "before_close":
            report.ended_by = ("exit" if report.exit_sent
                               else "shutdown" if report.shutdown != "not_sent" else "before_shutdown")
        else:
            report.ended_by = "ladder"
    report.total_ms = (time.monotonic() - began) * 1e3


def close(server: Server, *, shutdown_timeout: float = 2.0, exit_grace: float = 2.0,
          stdin: Any = None, stdout: Any = None) -> LspCloseReport:
    """The LSP close of ``server`` (see the module), then its :meth:`~childguard.Server.close`;
    blocks for up to ``shutdown_timeout + exit_grace`` seconds plus the ladder's total grace.

    Speaks over ``server.stdin``/``server.stdout`` (``stdin=PIPE, stdout=PIPE``, as
    :func:`~childguard.stdio_server` spawns), its ``socket`` (``socket="stdio"``), or the
    ``stdin=``/``stdout=`` given (files or fds you took with ``take_stdin()``/``take_stdout()``:
    now the close's — stdin is closed after ``exit``, stdout once the close returned). Both are
    made non-blocking. Whatever the server does on the protocol is an outcome in the report;
    only the server's close raises (:class:`~childguard.SignalError`, ...), the LSP report then
    in the exception's ``lsp_report``."""
    return _close(server, shutdown_timeout, exit_grace, stdin, stdout)


async def aclose(server: Server, *, shutdown_timeout: float = 2.0, exit_grace: float = 2.0,
                 stdin: Any = None, stdout: Any = None) -> LspCloseReport:
    """:func:`close` without blocking the event loop (on the loop's default executor).
    Cancelling the awaiting task ends the LSP steps within 0.05 s and hands the rest of the
    server's close to childguard's background reaper, as :meth:`~childguard.Server.aclose`."""
    loop = asyncio.get_running_loop()
    stop, cancel = threading.Event(), _native.Cancel()
    run = functools.partial(_close, server, shutdown_timeout, exit_grace, stdin, stdout, stop, cancel)
    future = loop.run_in_executor(None, run)
    try:
        return await asyncio.shield(future)
    except BaseException:
        stop.set()
        cancel.set()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        raise
