"""childguard.mcp.stdio_client's defaults match the MCP Python SDK's and the other faces'
(issue 52 item 2): the server's stderr passed on to ``sys.stderr`` line by line (and kept in
the report's tail), a start-up failure's exception naming the server's last stderr lines, the
tree gone with a host killed by SIGKILL (``exit_with_parent=True``), and ``childguard[mcp]``
bringing the SDK version the tests pin.

The failing server is ``npx --offline --no-install childguard-no-such-mcp-server`` in tests/: a
package that exists nowhere, asked of npm without the network, so npm fails the same way every
time (``npm error code ENOTCACHED``) and exits 1 before answering ``initialize``. Online and
without ``--offline``, npm says ``npm error code E404`` instead (docs/stdio-servers.md).

Each host is a Python program of its own (the installed wheel, this venv), run as a user runs
one: its stderr is what a user sees; SIGKILL is sent to it, not to this test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from typing import Dict, List

import pytest

from conftest import REPO, end_host_and_leftovers, missing_peer, sigkill_host

TESTS = REPO / "tests"
NO_SUCH_SERVER = "childguard-no-such-mcp-server"
# npm's own line (npm >= 10 says "npm error code …", older "npm ERR! code …").
NPMS_LINE = re.compile(r"npm (error|ERR!) code ENOTCACHED")


@pytest.fixture(scope="module")
def mcp_sdk() -> None:
    try:
        import anyio  # noqa: F401
        import mcp  # noqa: F401
    except ImportError as e:
        missing_peer(f"the MCP Python SDK is missing in {sys.executable} ({e}; "
                 "`pip install childguard[mcp]`, as ci.sh does)")


@pytest.fixture(scope="module")
def npx() -> str:
    found = shutil.which("npx")
    if found is None:
        missing_peer("npx is not on PATH (Debian's npm)")
    assert found is not None
    return found


def _host(script: str, *args: str) -> "subprocess.Popen[str]":
    """A host program: `script` run by this venv's Python, in tests/, stdout and stderr piped."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        cwd=TESTS, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )


FAILING_HOST = """
    import sys
    import anyio
    from mcp import ClientSession, StdioServerParameters
    import childguard.mcp

    params = StdioServerParameters(command="npx", args=sys.argv[1:])
    client = childguard.mcp.stdio_client(params)  # every default

    async def main():
        async with client as (read, write), ClientSession(read, write) as session:
            await session.initialize()

    try:
        anyio.run(main)
    finally:
        print("REPORT", client.report.ended_by["kind"], client.report.returncode, flush=True)
"""


def test_a_failed_start_shows_npms_error_on_stderr_and_in_the_exception(
        mcp_sdk: None, npx: str) -> None:
    """By default: npm's lines reach the host's stderr as npm writes them (the SDK's
    ``errlog=sys.stderr``), and the exception that ends the host — the SDK's ``Connection
    closed`` — carries a note naming how npx ended and its last stderr lines (Python >= 3.11
    prints it with the traceback)."""
    host = _host(FAILING_HOST, "--offline", "--no-install", NO_SUCH_SERVER)
    stdout, stderr = host.communicate(timeout=60)
    print(f"stdout:\n{stdout}\nstderr:\n{stderr}")
    assert host.returncode == 1, (stdout, stderr)
    # npx ended by itself, exit 1, before the close or at its EOF: no signal of ours.
    assert re.search(r"^REPORT (before_close|eof) 1$", stdout, re.M), stdout
    assert "Connection closed" in stderr, stderr
    lines = stderr.splitlines()
    npm_lines = [i for i, line in enumerate(lines) if NPMS_LINE.search(line)]
    if sys.version_info >= (3, 11):
        # Passed through once as npm wrote it, and once more in the note, indented.
        assert len(npm_lines) == 2, stderr
        note = next(i for i, line in enumerate(lines) if "the MCP server `npx`" in line)
        assert "exited with status 1" in lines[note], lines[note]
        assert npm_lines[0] < note < npm_lines[1], stderr
        assert "    npm" in lines[npm_lines[1]], lines[npm_lines[1]]
    else:
        assert len(npm_lines) == 1, stderr


def test_the_note_and_errlog_none_in_process(mcp_sdk: None, npx: str) -> None:
    """In-process, ``errlog=None`` (the tail only): nothing written anywhere, the report's tail
    and the exception's note still name npm's line."""
    import anyio
    from mcp import ClientSession, StdioServerParameters

    import childguard.mcp

    params = StdioServerParameters(command="npx", cwd=str(TESTS),
                                   args=["--offline", "--no-install", NO_SUCH_SERVER])
    client = childguard.mcp.stdio_client(params, errlog=None)

    async def main() -> None:
        async with client as (read, write), ClientSession(read, write) as session:
            await session.initialize()

    with pytest.raises(BaseException) as caught:
        anyio.run(main)
    report = client.report
    assert report is not None
    assert NPMS_LINE.search(report.output_tail or ""), report.output_tail
    assert report.signals == [], report
    if sys.version_info >= (3, 11):
        notes = getattr(caught.value, "__notes__", [])
        assert any(NPMS_LINE.search(n) for n in notes), (caught.value, notes)


SESSION_HOST = """
    import sys, time
    import anyio
    from mcp import ClientSession, StdioServerParameters
    import childguard.mcp

    # argv: `new` (every default: exit_with_parent=True) or `old` (the old default, by hand),
    # then the server's command.
    params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:])
    kwargs = {"exit_with_parent": False} if sys.argv[1] == "old" else {}
    client = childguard.mcp.stdio_client(params, **kwargs)

    async def main():
        async with client as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            print("READY", client.pid, flush=True)
            await anyio.sleep(600)

    anyio.run(main)
"""


def _descendants(root: int) -> Dict[int, int]:
    """`root` and its descendants now (pid → start time), through /proc."""
    parents: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = [int(fields[1]), int(fields[19])]
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


@pytest.mark.parametrize("server", ["stubborn", "everything"])
def test_the_host_sigkilled_leaves_nothing_within_2s_by_default(
        mcp_sdk: None, npx: str, server: str) -> None:
    """A host using every default, SIGKILLed mid-session: the server's whole tree is gone
    within 2 s — the kernel's SIGKILL to the spawned process, childguard's guardian's
    ``cgroup.kill`` for the rest.

    - ``stubborn``: the stubborn fixture (ignores stdin's EOF, TERM, HUP; a ``setsid`` worker
      holding its stdout). Only our kill ends it: with ``exit_with_parent=False`` (the old
      default; ``old`` below, run by hand) server and worker were still running after 2 s.
    - ``everything``: server-everything through npx (npm exec → sh → node); it would also go
      by itself at the EOF its stdin gets when the host dies (0.37 s here), the SDKs' users'
      case."""
    if server == "stubborn":
        command = [sys.executable, str(TESTS / "fixtures" / "stubborn_mcp.py")]
    else:
        if not (TESTS / "node_modules" / ".bin" / "mcp-server-everything").exists():
            missing_peer(f"{TESTS}/node_modules/.bin/mcp-server-everything is missing (npm ci in "
                     "tests/, needs Debian's nodejs and npm)")
        command = ["npx", "--no-install", "mcp-server-everything"]
    host = _host(SESSION_HOST, "new", *command)
    procs: Dict[int, int] = {}
    try:
        assert host.stdout is not None
        line = host.stdout.readline()
        assert line.startswith("READY "), (line, host.stderr.read() if host.stderr else "")
        procs = _descendants(int(line.split()[1]))
        assert len(procs) >= 2, f"two processes at least: {procs}"
        left, took = sigkill_host(host, procs)
        print(f"{server}: host SIGKILLed: {len(procs)} processes {sorted(procs)}, left {left} "
              f"after {took:.3f} s")
        assert left == [], f"alive 2 s after the host's SIGKILL: {left} of {procs}"
    finally:
        end_host_and_leftovers(host, procs)


def test_the_mcp_extra_pins_the_sdk_the_tests_run_against() -> None:
    """``pip install childguard[mcp]`` (ci.sh installs the wheel that way) asks for the same
    ``mcp`` as tests/requirements.txt: the adapter is tested with the version it brings."""
    from importlib.metadata import requires

    wanted = [r for r in (requires("childguard") or [])
              if ";" in r and re.search(r"""extra\s*==\s*['"]mcp['"]""", r.split(";", 1)[1])]
    pins = [line.strip() for line in (TESTS / "requirements.txt").read_text().splitlines()
            if line.startswith("mcp")]
    assert len(pins) == 1, pins
    assert [r.split(";")[0].replace(" ", "") for r in wanted] == pins, (wanted, pins)
    import mcp  # installed through the extra  # noqa: F401
    from importlib.metadata import version

    assert f"mcp=={version('mcp')}" == pins[0], (version("mcp"), pins)


def test_default_errlog_is_the_sdks(mcp_sdk: None) -> None:
    """The signature's defaults are the SDK's where the SDK has the setting (``errlog``) and the
    other faces' where it has not (``exit_with_parent``)."""
    import inspect

    from mcp.client.stdio import stdio_client as sdk_stdio_client

    import childguard.mcp

    ours = inspect.signature(childguard.mcp.stdio_client).parameters
    sdks = inspect.signature(sdk_stdio_client).parameters
    assert ours["errlog"].default is sdks["errlog"].default
    assert ours["exit_with_parent"].default is True
    assert inspect.signature(childguard.mcp.StdioClient).parameters["exit_with_parent"].default

