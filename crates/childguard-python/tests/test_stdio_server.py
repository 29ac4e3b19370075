"""childguard.stdio_server: spawn() with the stdio-server defaults every face shares (issue 52
item 2) — pipes on stdin and stdout, stderr passed on to ours and kept in the tail, the MCP
close, the tree contained, gone with a host killed by SIGKILL.

The passthrough writes to fd 2 from the library's thread, and exit_with_parent is about the
host's death: both are checked on a host program of their own (this venv's Python), as a user
runs one.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict

import pytest

import childguard
from conftest import REPO, end_host_and_leftovers, proc_start, sigkill_host

TESTS = REPO / "tests"
ECHO = "echo 'a server log line' >&2; exec cat"

HOST = """
    import sys, time
    import childguard

    mode = sys.argv[1]
    if mode == "stubborn":
        server = childguard.stdio_server([sys.executable, sys.argv[2], "--pidfile", sys.argv[3]])
        print("READY", server.pid, flush=True)
        time.sleep(600)
    server = childguard.stdio_server(["sh", "-c", sys.argv[2]], passthrough=mode == "echo")
    server.stdin.write(b"ping\\n")
    print("ECHO", server.stdout.readline().decode().strip(), flush=True)
    report = server.close()
    print("ENDED", report.ended_by["kind"], flush=True)
"""


def _host(*args: str) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOST), *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_the_defaults_echo_and_end_at_the_eof_with_the_tail() -> None:
    server = childguard.stdio_server(["sh", "-c", ECHO], passthrough=False)
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(b"ping\n")
    assert server.stdout.readline() == b"ping\n"
    report = server.close()
    print(report)
    # The Python close closes stdin before the native close looks: cat, quick to exit on its
    # EOF, may be gone by then ("before_close"). Either way its EOF ended it, no signal.
    assert report.ended_by["kind"] in ("eof", "before_close"), report
    assert report.signals == [], report
    assert "a server log line" in (report.output_tail or ""), report.output_tail


@pytest.mark.parametrize("mode", ["echo", "echo-quiet"])
def test_stderr_is_passed_on_to_ours_unless_told_not_to(mode: str) -> None:
    host = _host(mode, ECHO)
    stdout, stderr = host.communicate(timeout=60)
    print(f"stdout:\n{stdout}\nstderr:\n{stderr}")
    assert host.returncode == 0, (stdout, stderr)
    assert "ECHO ping" in stdout, stdout
    assert "ENDED eof" in stdout or "ENDED before_close" in stdout, stdout
    passed = [line for line in stderr.splitlines()
              if line.startswith("[sh ") and line.endswith("] a server log line")]
    assert len(passed) == (1 if mode == "echo" else 0), stderr


def test_a_sigkilled_host_leaves_nothing_within_2s(tmp_path: Path) -> None:
    """The stubborn fixture (ignores EOF, TERM, HUP; a ``setsid`` worker) under a host that is
    SIGKILLed: server and worker gone within 2 s (exit_with_parent: the kernel's SIGKILL, the
    guardian's ``cgroup.kill``)."""
    pidfile = f"{tmp_path}/pids"
    host = _host("stubborn", str(TESTS / "fixtures" / "stubborn_mcp.py"), pidfile)
    procs: Dict[int, int] = {}
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        assert line.startswith("READY "), (line, host.stderr.read() if host.stderr else "")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with open(pidfile) as f:
                    pids = [int(p) for p in f.read().split()]
                break
            except (FileNotFoundError, ValueError):
                time.sleep(0.02)
        else:
            pytest.fail(f"the stubborn fixture never wrote {pidfile}")
        procs = {pid: proc_start(pid) for pid in pids}
        left, took = sigkill_host(host, procs)
        print(f"host SIGKILLed: server and worker {sorted(procs)} left {left} after "
              f"{took:.3f} s")
        assert left == [], f"alive 2 s after the host's SIGKILL: {left}"
    finally:
        end_host_and_leftovers(host, procs)


def test_bad_input_is_an_error_before_the_spawn() -> None:
    with pytest.raises(childguard.ConfigError, match="passthrough=True needs capture="):
        childguard.stdio_server(["cat"], capture=None)
    with pytest.raises(TypeError, match="no_such_option"):
        childguard.stdio_server(["cat"], no_such_option=1)
    with pytest.raises(childguard.SpawnError, match="cg-no-such-server"):
        childguard.stdio_server(["/nonexistent/cg-no-such-server"])
    assert childguard.parse_ladder(childguard.MCP_LADDER) == "EOF:2s,TERM:2s,KILL:5s"
