"""childguard.lsp: the LSP close from Python (issue 52 item 4), against real language servers
pinned by tests/package.json (pyright, typescript-language-server; installed by tests/run.sh)
and the repository's misbehaving fixtures (tests/fixtures/stuck_lsp.py, odd_lsp.py).

Each server runs in a cgroup of its own; its members are pinned by pidfd before the close and
each is checked gone after it (pidfd readable, /proc/PID/status absent or Z). Times are printed
(``pytest -s``); only generous bounds are asserted.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

import childguard
import childguard.lsp
from conftest import REPO, skip_peers

TESTS = REPO / "tests"
PATIENT = 60.0  # a bound for a loaded machine, not what a step takes


def npm_bin(name: str) -> str:
    path = TESTS / "node_modules" / ".bin" / name
    if not path.exists():
        if skip_peers():
            pytest.skip(f"{path} missing (CHILDGUARD_SKIP_PEERS=1)")
        pytest.fail(f"{path} is missing (npm ci in tests/, needs Debian's nodejs and npm): run "
                    "`bash tests/run.sh` once, or set CHILDGUARD_SKIP_PEERS=1", pytrace=False)
    return str(path)


class Client:
    """The session before the close: framed requests over the server's stdin and stdout."""

    def __init__(self, server: childguard.Server) -> None:
        assert server.stdin is not None and server.stdout is not None
        self.stdin, self.stdout = server.stdin, server.stdout
        self.buf = b""
        self.next_id = 1
        self.notifications: List[Any] = []

    def send(self, message: Dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        self.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def read(self) -> Any:
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.chunk()
        header, _, rest = self.buf.partition(b"\r\n\r\n")
        length = int(header.split(b":")[1])
        while len(rest) < length:
            rest += self.chunk()
        self.buf = rest[length:]
        return json.loads(rest[:length])

    def chunk(self) -> bytes:
        data = self.stdout.read(65536)
        assert data, "the server closed its stdout"
        return data

    def request(self, method: str, params: Any) -> Any:
        rid, self.next_id = self.next_id, self.next_id + 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            message = self.read()
            if message.get("id") == rid and "method" not in message:
                assert "error" not in message, message
                return message.get("result")
            if "id" in message and "method" in message:  # the server's request: null it
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
            elif "method" in message:
                self.notifications.append(message)

    def wait_for(self, method: str) -> None:
        """Reads until a notification ``method`` came (or had come)."""
        while not any(n.get("method") == method for n in self.notifications):
            message = self.read()
            if "id" not in message:
                self.notifications.append(message)

    def initialize(self, root: Path) -> Any:
        uri = root.as_uri()
        result = self.request("initialize", {
            "processId": os.getpid(), "rootUri": uri, "capabilities": {},
            "workspaceFolders": [{"uri": uri, "name": "ws"}]})
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return result


def spawn(argv: List[str], ladder: str = "EOF:2s,TERM:2s,KILL:5s") -> childguard.Server:
    return childguard.spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            contain="best-effort", ladder=ladder, capture="stderr")


def tree(server: childguard.Server) -> List[Tuple[int, int]]:
    """The members of the server's cgroup now, each pinned by a pidfd."""
    with open(f"/proc/{server.pid}/cgroup") as f:
        path = [line[3:].strip() for line in f if line.startswith("0::")][0]
    assert path.rsplit("/", 1)[-1].startswith("childguard-"), (
        f"the server is not in a cgroup of its own ({path}): needs cgroup v2, root")
    mounts = [line.split()[1] for line in open("/proc/self/mounts") if line.split()[2] == "cgroup2"]
    procs = Path(mounts[0] + path) / "cgroup.procs"
    return [(int(p), os.pidfd_open(int(p))) for p in procs.read_text().split()]


def assert_nothing_left(members: List[Tuple[int, int]], report: Any) -> None:
    import select
    for pid, fd in members:
        try:
            exited = bool(select.select([fd], [], [], 0)[0])
            try:
                with open(f"/proc/{pid}/status") as f:
                    state = [line for line in f if line.startswith("State:")][0].split()[1]
            except FileNotFoundError:
                state = None
            assert exited and state in (None, "Z"), f"process {pid} alive ({state}): {report}"
        finally:
            os.close(fd)


def assert_clean(report: childguard.lsp.LspCloseReport) -> None:
    assert report.shutdown == "answered", report
    assert report.exit_sent, report
    assert report.ended_by == "exit", report
    assert report.clean, report
    assert report.close is not None and report.close.signals == [] and report.close.returncode == 0
    assert report.total_ms < PATIENT * 1e3, report


def pyright_serving(tmp_path: Path) -> childguard.Server:
    server = spawn([npm_bin("pyright-langserver"), "--stdio"])
    client = Client(server)
    client.initialize(tmp_path)
    source = "def greet(name: str) -> str:\n    return 'hi ' + name\n"
    uri = (tmp_path / "a.py").as_uri()
    client.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": source}}})
    symbols = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    assert "greet" in json.dumps(symbols)
    # Idle, as an editor's server is when it is closed: its analysis of the file published.
    client.wait_for("textDocument/publishDiagnostics")
    return server


@pytest.mark.skipif(sys.platform != "linux", reason="cgroups, pidfds")
def test_pyright_closed_by_shutdown_and_exit_nothing_sent_nothing_left(tmp_path: Path) -> None:
    server = pyright_serving(tmp_path)
    members = tree(server)
    report = childguard.lsp.close(server, shutdown_timeout=PATIENT, exit_grace=PATIENT)
    print(f"pyright, the LSP close took {report.total_ms:.1f} ms: {report}")
    assert_clean(report)
    assert_nothing_left(members, report)


@pytest.mark.skipif(sys.platform != "linux", reason="cgroups, pidfds")
def test_pyright_closed_by_aclose(tmp_path: Path) -> None:
    server = pyright_serving(tmp_path)
    members = tree(server)
    report = asyncio.run(childguard.lsp.aclose(server, shutdown_timeout=PATIENT, exit_grace=PATIENT))
    print(f"pyright, aclose: {report}")
    assert_clean(report)
    assert_nothing_left(members, report)


@pytest.mark.skipif(sys.platform != "linux", reason="cgroups, pidfds")
def test_typescript_language_server_and_its_tsservers_closed(tmp_path: Path) -> None:
    server = spawn([npm_bin("typescript-language-server"), "--stdio"], "EOF:60s,TERM:2s,KILL:5s")
    client = Client(server)
    client.initialize(tmp_path)
    (tmp_path / "a.ts").write_text("export const x: number = 1;\n")
    uri = (tmp_path / "a.ts").as_uri()
    client.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "typescript", "version": 1,
        "text": "export const x: number = 1;\n"}}})
    hover = client.request("textDocument/hover", {"textDocument": {"uri": uri},
                                                  "position": {"line": 0, "character": 13}})
    assert "number" in json.dumps(hover)
    members = tree(server)
    assert len(members) >= 2, members
    report = childguard.lsp.close(server, shutdown_timeout=PATIENT, exit_grace=PATIENT)
    print(f"typescript-language-server: {report}")
    assert_clean(report)
    assert_nothing_left(members, report)


@pytest.mark.skipif(sys.platform != "linux", reason="cgroups, pidfds")
def test_a_server_that_ignores_exit_is_ended_by_the_ladder(tmp_path: Path) -> None:
    fixture = str(TESTS / "fixtures" / "stuck_lsp.py")
    server = spawn([sys.executable, fixture, "--term", "ignore"], "TERM:300ms,KILL:5s")
    init = Client(server).initialize(tmp_path)
    members = tree(server)
    assert init["fixture"]["worker"] in [p for p, _ in members]
    report = childguard.lsp.close(server, shutdown_timeout=0.3, exit_grace=0.3)
    print(f"stuck: {report}")
    assert report.shutdown == "timed_out" and report.exit_sent, report
    assert report.ended_by == "ladder" and not report.clean, report
    assert report.close is not None
    assert report.close.ended_by == {"kind": "rung", "index": 1, "signal": "KILL"}, report
    assert report.close.skipped == ["TERM"], report
    assert report.exit_sent_ms is not None and report.exit_sent_ms >= 300, report
    assert report.total_ms >= report.exit_sent_ms + 300, report
    assert_nothing_left(members, report)


@pytest.mark.skipif(sys.platform != "linux", reason="cgroups, pidfds")
@pytest.mark.parametrize("mode, outcome", [
    ("asks", "answered"), ("close-stdout", "stdout_closed"), ("huge-length", "unreadable")])
def test_servers_that_misbehave_on_their_output(tmp_path: Path, mode: str, outcome: str) -> None:
    fixture = str(TESTS / "fixtures" / "odd_lsp.py")
    server = spawn([sys.executable, fixture, mode], "TERM:200ms,KILL:5s")
    Client(server).initialize(tmp_path)
    members = tree(server)
    report = childguard.lsp.close(server, shutdown_timeout=PATIENT, exit_grace=0.2)
    print(f"{mode}: {report}")
    assert report.shutdown == outcome, report
    assert report.total_ms < PATIENT * 1e3, report
    if mode == "asks":
        assert (report.refused, report.dropped, report.skipped_bytes) == (1, 1, 23), report
        assert report.clean, report
    else:
        assert report.ended_by == "ladder", report
        assert report.close is not None and report.close.signals == ["KILL"], report
    if mode == "huge-length":
        assert "99999999999" in (report.shutdown_detail or ""), report
    assert_nothing_left(members, report)


@pytest.mark.skipif(sys.platform != "linux", reason="cgroups, pidfds")
def test_stdio_server_on_a_socketpair(tmp_path: Path) -> None:
    """childguard.stdio_server(socket="stdio"): the close speaks over the socket, and the end of
    file is its shutdown for writing."""
    fixture = str(TESTS / "fixtures" / "odd_lsp.py")
    server = childguard.stdio_server([sys.executable, fixture, "asks"], socket="stdio",
                                     passthrough=False)
    assert server.stdin is None and server.socket is not None
    sock = server.socket.dup()
    client = Client.__new__(Client)
    client.stdin, client.stdout = sock.makefile("wb", buffering=0), sock.makefile("rb", buffering=0)
    client.buf, client.next_id, client.notifications = b"", 1, []
    client.initialize(tmp_path)
    client.stdin.close()
    client.stdout.close()
    sock.close()
    members = tree(server)
    report = childguard.lsp.close(server, shutdown_timeout=PATIENT, exit_grace=PATIENT)
    print(f"socketpair: {report}")
    assert report.shutdown == "answered" and report.refused == 1, report
    assert report.ended_by == "exit" and report.clean, report
    assert_nothing_left(members, report)


@pytest.mark.skipif(sys.platform != "linux", reason="cgroups, pidfds")
def test_aclose_cancelled_still_ends_the_tree(tmp_path: Path) -> None:
    """The task awaiting aclose() cancelled mid-`shutdown`: the steps stop, the server's close
    goes to childguard's background reaper (its ladder), and the tree still ends."""
    import select
    fixture = str(TESTS / "fixtures" / "stuck_lsp.py")
    server = spawn([sys.executable, fixture, "--term", "ignore"], "TERM:300ms,KILL:5s")
    Client(server).initialize(tmp_path)
    members = tree(server)

    async def cancelled() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(childguard.lsp.aclose(server, shutdown_timeout=30.0), 0.2)

    asyncio.run(cancelled())
    for pid, fd in members:
        assert select.select([fd], [], [], PATIENT)[0], f"process {pid} still alive"
    assert_nothing_left(members, "cancelled aclose")
