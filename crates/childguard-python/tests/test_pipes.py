"""spawn(stdin=PIPE, stdout=PIPE): real pipes on the server's stdin/stdout (what MCP and LSP
hosts give a stdio server; childguard.mcp uses them). Our ends are Server.stdin/.stdout
(unbuffered binary files) or, taken, plain fds; the close closes a stdin still ours first, so
the server's EOF comes before any signal."""

from __future__ import annotations

import os
import subprocess

import pytest

import childguard


def test_piped_stdin_and_stdout_and_the_eof_at_the_close() -> None:
    server = childguard.spawn(["cat"], stdin=subprocess.PIPE, stdout="pipe",
                              ladder="EOF:10s,TERM:2s,KILL:5s")
    assert server.stdin is server.stdin and server.stdout is server.stdout
    assert server.take_stdin() is None  # already ours, as Server.stdin
    server.stdin.write(b"hello\n")
    assert server.stdout.read(6) == b"hello\n"
    report = server.close()
    # cat ends at its stdin's EOF: nothing signalled.
    # Our end of the pipe is closed by the Python layer just before the native close starts:
    # a fast server may have exited by then ("before_close") or exit during the EOF rung
    # ("eof"). Either way the EOF ended it: no signal, exit 0.
    assert report.ended_by["kind"] in ("eof", "before_close"), report
    assert report.signals == [] and report.returncode == 0, report
    assert server.stdin.closed and server.stdout.closed


def test_taken_fds_are_the_callers() -> None:
    server = childguard.spawn(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              ladder="EOF:10s,TERM:2s,KILL:5s")
    stdin, stdout = server.take_stdin(), server.take_stdout()
    assert stdin is not None and stdout is not None
    assert server.take_stdin() is None and server.stdin is None
    os.write(stdin, b"x\n")
    assert os.read(stdout, 2) == b"x\n"
    os.close(stdin)  # ours to close: the EOF
    report = server.close()
    # cat may have exited at that EOF before the close started ("before_close").
    assert report.ended_by["kind"] in ("eof", "before_close"), report
    assert report.signals == [] and report.returncode == 0, report
    os.close(stdout)


def test_pipe_conflicts_are_refused() -> None:
    with pytest.raises(childguard.ConfigError, match="stdin=\"pipe\""):
        childguard.spawn(["cat"], stdin=subprocess.PIPE, socket="stdio")
    with pytest.raises(childguard.ConfigError, match="stderr="):
        childguard.spawn(["cat"], stderr=subprocess.PIPE)
    with pytest.raises(childguard.ConfigError, match="stderr_lines"):
        childguard.spawn(["cat"], _stderr_lines=True)
