"""childguard.mcp.stdio_client against real MCP servers, driven by the MCP Python SDK's own
ClientSession (mcp==2.3.0, tests/requirements.txt; ci.sh installs it into the test venv):

- server-everything through `npx --no-install` (npm exec → sh -c → node; tests/node_modules,
  installed by `bash tests/run.sh` or `cd tests && npm ci`): it ends at the EOF, nothing left;
- the SDK's MCPServer fixture through `sh -c`: the same;
- the stubborn fixture (ignores EOF and TERM, a setsid worker holding stdout): ended by the
  MCP ladder's KILL, the worker too;
- a session cancelled in the middle of a call: the close still runs, nothing left.

"Nothing left": every process of the server's tree seen during the session (the launcher
chain, the server, its workers; matched by pid and start time, so a recycled pid is not
mistaken for it) is gone or a zombie (PID 1 here reaps orphans late) after the block, and the
cgroup, when there is one, reports no member left.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from conftest import REPO, missing_peer

TESTS = REPO / "tests"  # the repository's tests/: package.json, node_modules/, fixtures/
FIXTURES = TESTS / "fixtures"


@pytest.fixture(scope="module")
def mcp_sdk() -> Any:
    try:
        import anyio  # noqa: F401
        import mcp
    except ImportError as e:
        missing_peer(f"the MCP Python SDK is missing in {sys.executable} ({e}; ci.sh installs "
                 "tests/requirements.txt)")
    return mcp


@pytest.fixture(scope="module")
def everything() -> Any:
    """server-everything's parameters: `npx --no-install mcp-server-everything` in tests/."""
    from mcp import StdioServerParameters

    if not (TESTS / "node_modules" / ".bin" / "mcp-server-everything").exists():
        missing_peer(f"{TESTS}/node_modules/.bin/mcp-server-everything is missing (npm ci in "
                 "tests/, needs Debian's nodejs and npm)")
    if shutil.which("npx") is None:
        missing_peer("npx is not on PATH (Debian's npm)")
    return StdioServerParameters(command="npx", args=["--no-install", "mcp-server-everything"],
                                 cwd=str(TESTS))


# --- processes --------------------------------------------------------------------------------

def _stat(pid: int) -> Optional[Tuple[str, int, int]]:
    """(state, ppid, start time) from /proc/PID/stat, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _status_state(pid: int) -> Optional[str]:
    """The State letter of /proc/PID/status, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return line.split()[1]
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def tree(root: int) -> Dict[int, int]:
    """`root` and its descendants now: pid → start time."""
    parents: Dict[int, Tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                parents[int(entry)] = (st[1], st[2])
    found: Dict[int, int] = {}
    for pid, (_ppid, start) in parents.items():
        p = pid
        for _ in range(64):
            if p == root:
                found[pid] = start
                break
            if p not in parents:
                break
            p = parents[p][0]
    return found


def alive(pid: int, start: int) -> bool:
    st = _stat(pid)
    if st is None or st[2] != start:
        return False
    return _status_state(pid) not in (None, "Z")


def left_alive(procs: Dict[int, int], within: float = 10.0) -> List[int]:
    """The processes of `procs` still alive after up to `within` s (generous: the close
    returned after the cgroup emptied; this only allows for the kernel's bookkeeping)."""
    deadline = time.monotonic() + within
    while True:
        left = [pid for pid, start in procs.items() if alive(pid, start)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def check_nothing_left(client: Any, procs: Dict[int, int]) -> None:
    report = client.report
    assert report is not None, "no close report"
    assert left_alive(procs) == [], f"left alive after the close: {procs}\n{report}"
    assert not report.outlived_ladder, report
    assert report.escaped == [], report
    if report.cgroup is not None:
        assert report.cgroup["members_left"] == 0, report.cgroup


# --- the tests --------------------------------------------------------------------------------

def test_server_everything_through_npx_ends_at_the_eof(mcp_sdk: Any, everything: Any) -> None:
    import anyio
    from mcp import ClientSession

    import childguard.mcp

    errlog = io.StringIO()
    # EOF:10s: the server's own exit is what is checked, with room for a loaded machine; the
    # default ladder is the stubborn test's.
    client = childguard.mcp.stdio_client(everything, errlog=errlog,
                                         ladder="EOF:10s,TERM:2s,KILL:5s")

    async def session() -> Tuple[Any, Any, Any, Dict[int, int], float]:
        async with client as (read, write):
            async with ClientSession(read, write) as s:
                init = await s.initialize()
                tools = await s.list_tools()
                echoed = await s.call_tool("echo", {"message": "hello from childguard"})
                assert client.pid is not None
                procs = tree(client.pid)
                left_at = time.monotonic()
        return init, tools, echoed, procs, time.monotonic() - left_at

    init, tools, echoed, procs, exit_s = anyio.run(session)
    assert init.server_info.name, init
    assert "echo" in [t.name for t in tools.tools], tools
    assert echoed.content[0].text == "Echo: hello from childguard", echoed
    # npx's chain: npm exec, sh -c, node (at least the launcher and the server).
    assert len(procs) >= 2, procs
    report = client.report
    assert report is not None
    print(f"server-everything via npx: {len(procs)} processes, close {report.total_ms:.0f} ms, "
          f"block exit {exit_s * 1000:.0f} ms\n{report}")
    # The SDK's writer closes our end of stdin just before the native close starts: a server
    # quick to exit may be gone by then ("before_close"). Either way the EOF ended it.
    assert report.ended_by["kind"] in ("eof", "before_close"), report
    assert report.signals == [], report
    check_nothing_left(client, procs)
    # stderr: captured into the tail, and passed on to errlog.
    assert "Starting default (STDIO) server" in (report.output_tail or ""), report.output_tail
    assert "Starting default (STDIO) server" in errlog.getvalue(), errlog.getvalue()


def test_python_sdk_server_through_sh_c_ends_at_the_eof(mcp_sdk: Any) -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters

    import childguard.mcp

    fixture = FIXTURES / "mcp_python_server.py"
    assert fixture.exists(), fixture
    # sys.executable: the test venv's python, which has the `mcp` package.
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(fixture))}"
    params = StdioServerParameters(command="sh", args=["-c", command])
    client = childguard.mcp.stdio_client(params, ladder="EOF:10s,TERM:2s,KILL:5s")

    async def session() -> Tuple[Any, Any, Dict[int, int]]:
        async with client as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                tools = await s.list_tools()
                added = await s.call_tool("add", {"a": 2, "b": 40})
                assert client.pid is not None
                procs = tree(client.pid)
        return tools, added, procs

    tools, added, procs = anyio.run(session)
    assert {"echo", "add"} <= {t.name for t in tools.tools}, tools
    assert added.content[0].text == "42", added
    report = client.report
    assert report is not None
    print(f"python MCPServer via sh -c: {len(procs)} processes, close {report.total_ms:.0f} ms\n{report}")
    # The SDK's writer closes our end of stdin just before the native close starts: a server
    # quick to exit may be gone by then ("before_close"). Either way the EOF ended it.
    assert report.ended_by["kind"] in ("eof", "before_close"), report
    assert report.signals == [], report
    check_nothing_left(client, procs)


def test_stubborn_server_and_its_setsid_worker_end_by_the_ladder(mcp_sdk: Any, tmp_path: Path) -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters

    import childguard.mcp

    pidfile = tmp_path / "pids"
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(FIXTURES / "stubborn_mcp.py"), "--pidfile", str(pidfile)],
    )
    client = childguard.mcp.stdio_client(params)  # the default: EOF:2s,TERM:2s,KILL:5s

    async def session() -> Tuple[str, Dict[int, int]]:
        async with client as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                echoed = await s.call_tool("echo", {"text": "still here"})
                assert client.pid is not None
                procs = tree(client.pid)
        return echoed.content[0].text, procs

    text, procs = anyio.run(session)
    assert text == "still here"
    server_pid, worker_pid = map(int, pidfile.read_text().split())
    assert server_pid == client.pid and worker_pid in procs, (server_pid, worker_pid, procs)
    report = client.report
    assert report is not None
    print(f"stubborn: close {report.total_ms:.0f} ms\n{report}")
    assert report.cgroup is not None, (
        "the server was not contained in a cgroup (contain='best-effort' fell back to a process "
        f"group), so its setsid worker is out of reach: this test needs cgroup v2\n{report}")
    # The EOF was ignored (2 s spent), then TERM: ignored too (SIG_IGN), so skipped without
    # its grace (skip_ignored, the default); the ladder's KILL, to the cgroup, ended it.
    assert report.skipped == ["TERM"], report
    assert report.signals == ["KILL"], report
    assert report.ending_signal == "KILL", report
    check_nothing_left(client, procs)
    # The setsid worker (left the server's group and session) is gone too.
    deadline = time.monotonic() + 10
    while _status_state(worker_pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _status_state(worker_pid) in (None, "Z"), f"worker {worker_pid} alive"


def test_cancelled_mid_call_still_closes(mcp_sdk: Any, everything: Any) -> None:
    import anyio
    from mcp import ClientSession

    import childguard.mcp

    client = childguard.mcp.stdio_client(everything)
    seen: Dict[str, Any] = {}

    async def main() -> bool:
        with anyio.CancelScope() as scope:
            async with client as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    assert client.pid is not None

                    async def progress(done: float, total: Optional[float], message: Optional[str]) -> None:
                        # The server is in the middle of the call: cancel the whole session.
                        seen.setdefault("procs", tree(client.pid or 0))
                        scope.cancel()

                    await s.call_tool("trigger-long-running-operation",
                                      {"duration": 600, "steps": 600},
                                      progress_callback=progress)
                    seen["returned"] = True
        return scope.cancelled_caught

    cancelled = anyio.run(main)
    assert cancelled and "returned" not in seen, seen
    procs = seen["procs"]
    assert client.pid in procs, procs
    report = client.report
    assert report is not None, "the close did not run on cancellation"
    print(f"cancelled mid-call: close {report.total_ms:.0f} ms\n{report}")
    check_nothing_left(client, procs)


def test_without_a_cgroup_every_rung_goes_to_the_group(mcp_sdk: Any) -> None:
    # contain=False: the SDK's arrangement, a process group. `sh` stays the parent (a second
    # command after the first) and the python under it ignores the EOF: the TERM must reach
    # both, through the group.
    import anyio
    from mcp import StdioServerParameters

    import childguard.mcp

    sleeper = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(600)'"
    params = StdioServerParameters(command="sh", args=["-c", f"{sleeper}; echo done"])
    client = childguard.mcp.stdio_client(params, contain=False, ladder="EOF:1s,TERM:5s,KILL:5s")

    async def main() -> Dict[int, int]:
        async with client as (_read, _write):
            assert client.pid is not None
            with anyio.fail_after(60):
                while len(tree(client.pid)) < 2:  # sh and its python
                    await anyio.sleep(0.02)
            return tree(client.pid)

    procs = anyio.run(main)
    report = client.report
    assert report is not None
    assert report.cgroup is None, report
    assert report.signals == ["TERM"] and report.ending_signal == "TERM", report
    assert "TERM (group)" in str(report), report
    check_nothing_left(client, procs)


def test_a_writer_blocked_on_a_full_pipe_does_not_hold_up_the_close(mcp_sdk: Any) -> None:
    # A server that never reads its stdin: a 4 MiB message fills the pipe (64 KiB) and the
    # writer task waits for room when the block is left. The close wakes it, closes stdin
    # (no write after that), and the ladder ends the server; nothing left.
    import anyio
    import mcp_types
    from mcp import StdioServerParameters
    from mcp.shared.message import SessionMessage

    import childguard.mcp

    params = StdioServerParameters(command=sys.executable,
                                   args=["-c", "import time; time.sleep(600)"])
    client = childguard.mcp.stdio_client(params, ladder="EOF:1s,TERM:2s,KILL:5s")
    big = mcp_types.JSONRPCNotification(jsonrpc="2.0", method="notifications/message",
                                        params={"data": "x" * (4 << 20)})

    async def main() -> Dict[int, int]:
        async with client as (read, write):
            assert client.pid is not None
            procs = tree(client.pid)
            # Taken by the writer task (the stream holds nothing): it is now in its write.
            await write.send(SessionMessage(big))
        return procs

    procs = anyio.run(main)
    report = client.report
    assert report is not None
    print(f"blocked writer: close {report.total_ms:.0f} ms\n{report}")
    # python's default SIGTERM action ends it: TERM after the EOF's second.
    assert report.signals == ["TERM"] and report.ending_signal == "TERM", report
    check_nothing_left(client, procs)


def test_a_bad_line_reaches_the_session_as_an_exception_and_the_stream_ends_at_exit(mcp_sdk: Any) -> None:
    # As the SDK's stdio_client: a line that is not JSON-RPC is handed to the reader as an
    # exception value (the session goes on), a good one as a SessionMessage; the server's
    # exit ends the read stream; the close then reports the exit that came before it.
    import anyio
    from mcp import StdioServerParameters
    from mcp.shared.message import SessionMessage

    import childguard.mcp

    script = ("import json, sys\n"
              "print('not json at all')\n"
              "print(json.dumps({'jsonrpc': '2.0', 'method': 'notifications/progress',"
              " 'params': {'progressToken': 1, 'progress': 1}}))\n"
              "sys.stdout.flush()\n"
              "sys.exit(3)\n")
    params = StdioServerParameters(command=sys.executable, args=["-c", script])
    client = childguard.mcp.stdio_client(params)

    async def main() -> List[Any]:
        got: List[Any] = []
        async with client as (read, _write):
            with anyio.fail_after(60):
                async for item in read:  # ends at the server's EOF
                    got.append(item)
        return got

    got = anyio.run(main)
    assert len(got) == 2, got
    assert isinstance(got[0], Exception) and not isinstance(got[0], SessionMessage), got
    assert isinstance(got[1], SessionMessage), got
    assert got[1].message.method == "notifications/progress", got[1]
    report = client.report
    assert report is not None
    # The stream's end (its stdout closed) and its exit are two moments: the close may begin
    # before the kernel has made it a zombie ("eof": it exited during the EOF rung) or after.
    assert report.ended_by["kind"] in ("before_close", "eof") and report.returncode == 3, report
    assert report.signals == [], report


def test_stdio_client_refuses_bad_input(mcp_sdk: Any) -> None:
    import anyio

    import childguard
    import childguard.mcp

    class NoCommand:
        args: List[str] = []

    async def enter(client: Any) -> None:
        async with client:
            pass

    with pytest.raises(ValueError, match="needs a `command`"):
        anyio.run(enter, childguard.mcp.stdio_client(NoCommand()))
    from mcp import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-c", "pass"])
    bad_encoding = StdioServerParameters(command=sys.executable, encoding="no-such-codec")
    with pytest.raises(ValueError, match="no-such-codec"):
        anyio.run(enter, childguard.mcp.stdio_client(bad_encoding))
    with pytest.raises(childguard.ConfigError, match="FOO"):
        anyio.run(enter, childguard.mcp.stdio_client(params, ladder="EOF:1s,FOO:2s"))
    missing = StdioServerParameters(command="/nonexistent/mcp-server")
    with pytest.raises(childguard.SpawnError, match="mcp-server"):
        anyio.run(enter, childguard.mcp.stdio_client(missing))
    assert childguard.mcp.MCP_LADDER == "EOF:2s,TERM:2s,KILL:5s"
    assert childguard.parse_ladder(childguard.mcp.MCP_LADDER)
