"""``env=`` means what it means to ``subprocess``: the server's environment is that mapping
plus only the variables its mode adds (``LISTEN_*`` with socket activation, ``NOTIFY_SOCKET``
with ``Notify()``), in every socket mode — and without ``env=`` it is ours plus those.

The spawning side runs in a fresh interpreter whose environment holds ``CG_SECRET`` (nothing
here calls ``os.environ``'s setters in this process, whose childguard threads may read the
environment). The server is Python too; it reports ``/proc/self/environ``, the block it was
exec'd with (not what the interpreter may add to ``os.environ`` at start-up), into a file
before it accepts on fd 3 or sends ``READY=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest


SERVER = r"""
import os, socket, sys, time
out = sys.argv[1]
with open('/proc/self/environ', 'rb') as f:
    data = f.read()
with open(out + '.tmp', 'wb') as f:
    f.write(data)
os.rename(out + '.tmp', out)
if os.environ.get('LISTEN_FDS') == '1' and os.environ.get('LISTEN_PID') == str(os.getpid()):
    conn, _ = socket.socket(fileno=3).accept()
if '--notify' in sys.argv:
    n = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    n.sendto(b'READY=1', os.environ['NOTIFY_SOCKET'])
while True:
    time.sleep(3600)
"""

SPAWNER = r"""
import json, os, sys, time
import childguard
server_code, out, mode, notify, clear = sys.argv[1:6]
kwargs = {}
if mode != 'none':
    kwargs['socket'] = mode
if notify == '1':
    kwargs['ready'] = childguard.Notify()
env = {'PATH': '/usr/bin:/bin', 'CG_GIVEN': 'given'} if clear == '1' else None
argv = [sys.executable, '-c', server_code, out] + (['--notify'] if notify == '1' else [])
ours = {k.hex(): v.hex() for k, v in os.environb.items()}
server = childguard.spawn(argv, env=env, ladder='TERM:10s,KILL:10s', **kwargs)
deadline = time.monotonic() + 60
while not os.path.exists(out) and time.monotonic() < deadline:
    time.sleep(0.001)
pid = server.pid
report = server.close()
print(json.dumps({'pid': pid, 'ours': ours, 'reaped': report.reaped_ms is not None}))
"""


def parse(data: bytes) -> Dict[bytes, bytes]:
    env = {}
    for entry in data.split(b"\0"):
        if entry:
            key, _, value = entry.partition(b"=")
            env[key] = value
    return env


@pytest.mark.parametrize("mode", ["none", "stdio", "activation"])
@pytest.mark.parametrize("notify", [False, True])
@pytest.mark.parametrize("clear", [True, False])
def test_server_gets_the_callers_environment_plus_its_modes(
    tmp_path: Path, mode: str, notify: bool, clear: bool
) -> None:
    out = tmp_path / "env"
    run = subprocess.run(
        [sys.executable, "-c", SPAWNER, SERVER, str(out), mode, "1" if notify else "0",
         "1" if clear else "0"],
        env={**os.environ, "CG_SECRET": "hunter2"},
        cwd=tmp_path,  # never the source tree: the installed wheel is imported
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr.decode(errors="replace")
    result = json.loads(run.stdout)
    assert result["reaped"], result
    got = parse(out.read_bytes())
    ours = {bytes.fromhex(k): bytes.fromhex(v) for k, v in result["ours"].items()}
    assert ours.get(b"CG_SECRET") == b"hunter2", "precondition: the spawner has the secret"
    if clear:
        assert b"CG_SECRET" not in got, f"the secret reached the server: {sorted(got)}"
        expected = {b"PATH": b"/usr/bin:/bin", b"CG_GIVEN": b"given"}
    else:
        expected = dict(ours)
    if mode == "activation":
        expected = {k: v for k, v in expected.items() if not k.startswith(b"LISTEN_")}
        expected[b"LISTEN_FDS"] = b"1"
        expected[b"LISTEN_FDNAMES"] = b"unknown"
        expected[b"LISTEN_PID"] = str(result["pid"]).encode()
    if notify:
        path = got.get(b"NOTIFY_SOCKET", b"")
        assert path.startswith(b"/"), f"NOTIFY_SOCKET {path!r}"
        expected[b"NOTIFY_SOCKET"] = path
    assert sorted(got) == sorted(expected), "variables: the server's (left), expected (right)"
    assert got == expected
