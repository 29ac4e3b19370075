"""Shared helpers of the Python tests: where the peers are, slowserver's READY line.

These tests run against the *installed* wheel (ci.sh builds it with maturin and installs it
into a fresh venv), never against the source tree: python/ is not on sys.path here.

A missing peer fails the test and says what to install, unless CHILDGUARD_SKIP_PEERS=1.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest


REPO = Path(__file__).resolve().parents[3]
INSTALL = "apt-get install -y postgresql redis-server (or run tests/run.sh)"


def skip_peers() -> bool:
    return os.environ.get("CHILDGUARD_SKIP_PEERS") == "1"


def missing_peer(what: str) -> None:
    """A peer the test needs is missing: fail saying how to install it (a skip only with
    CHILDGUARD_SKIP_PEERS=1)."""
    if skip_peers():
        pytest.skip(f"{what} (CHILDGUARD_SKIP_PEERS=1)")
    pytest.fail(f"{what}: run `bash tests/run.sh` once (it installs them), or set "
                "CHILDGUARD_SKIP_PEERS=1", pytrace=False)


def proc_start(pid: int) -> int:
    """The start time of `pid` (field 22 of /proc/PID/stat): with the pid, it names one
    process even after the pid is reused."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def proc_alive(pid: int, start: int) -> bool:
    """Whether the process `pid` that started at `start` is alive: there, the same start
    time, and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return int(fields[19]) == start and fields[0] != "Z"


def sigkill_host(host: subprocess.Popen[str], procs: Dict[int, int],
                 within: float = 2.0) -> Tuple[List[int], float]:
    """SIGKILLs `host`, reaps it, then looks every 20 ms for up to `within` s at the processes
    of `procs` (pid -> start time): those still alive when they are all gone or the time is
    up, and how long after the kill that was."""
    host.send_signal(signal.SIGKILL)
    host.wait(timeout=10)
    killed = time.monotonic()
    left = list(procs)
    while time.monotonic() - killed < within:
        left = [pid for pid, start in procs.items() if proc_alive(pid, start)]
        if not left:
            break
        time.sleep(0.02)
    return left, time.monotonic() - killed


def end_host_and_leftovers(host: subprocess.Popen[str], procs: Dict[int, int]) -> None:
    """After a test, whatever happened: the host killed and reaped, and every process of
    `procs` still alive SIGKILLed."""
    if host.poll() is None:
        host.kill()
        host.wait()
    for pid, start in procs.items():
        if proc_alive(pid, start):
            os.kill(pid, signal.SIGKILL)


def need(name: str, candidates: List[str], install: str) -> str:
    """The first existing candidate; else a failure saying what to install (a skip only with
    CHILDGUARD_SKIP_PEERS=1)."""
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    message = f"needs {name}: install with `{install}` (or set CHILDGUARD_SKIP_PEERS=1)"
    if skip_peers():
        pytest.skip(f"{name} not installed (CHILDGUARD_SKIP_PEERS=1)")
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def slowserver() -> str:
    """The fixture server crates/slowserver (built by `cargo build -p slowserver`)."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    candidates = [
        os.environ.get("CHILDGUARD_SLOWSERVER", ""),
        str(target / "debug" / "slowserver"),
        str(target / "release" / "slowserver"),
    ]
    found = [c for c in candidates if c and os.path.isfile(c)]
    if not found:
        pytest.fail(
            f"no slowserver binary in {candidates}: build it with `cargo build -p slowserver` "
            "(or set CHILDGUARD_SLOWSERVER)",
            pytrace=False,
        )
    return found[0]


@pytest.fixture(scope="session")
def redis_server() -> str:
    return need(
        "redis-server",
        [shutil.which("redis-server") or "", "/usr/bin/redis-server", "/usr/local/bin/redis-server"],
        INSTALL,
    )


def pg_tool(tool: str) -> str:
    """The newest /usr/lib/postgresql/<major>/bin/<tool> (Debian keeps them off PATH)."""
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"), reverse=True)
    return need(f"postgres' {tool}", candidates, INSTALL)


def read_ready(sock: socket.socket) -> Dict[str, int]:
    """slowserver's `READY pid=N grandchild=M` line, read byte by byte from the socket."""
    line = b""
    sock.settimeout(30)
    while not line.endswith(b"\n"):
        byte = sock.recv(1)
        assert byte, f"EOF before slowserver's READY line (got {line!r})"
        line += byte
    found = dict((k, int(v)) for k, v in re.findall(rb"(\w+)=(\d+)", line))
    assert b"READY" in line, line
    return {k.decode(): v for k, v in found.items()}


def gone(pid: int) -> bool:
    """Whether no process `pid` exists (a zombie still counts as existing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def pidfd_exited(pidfd: int, timeout: float) -> bool:
    """Whether the process behind `pidfd` has exited within `timeout` seconds. A pidfd names
    one process, so a recycled pid cannot be mistaken for it."""
    import select

    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def proc_state(pid: int) -> Optional[str]:
    """The State letter of /proc/PID/stat, or None once the process is gone. A process reaped
    while we read its file makes the read fail with ESRCH (ProcessLookupError), not ENOENT:
    gone as well."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None
