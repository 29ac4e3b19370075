"""Real databases, as the Rust suite runs them (tests/tests/databases.rs): redis on a Unix
socket only, and postgres as the unprivileged postgres user in a temporary data directory,
Unix socket only. Readiness means the first PING / query right after spawn() succeeds."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import childguard
import pytest
from conftest import INSTALL, gone, need, pg_tool


def redis_argv(redis: str, d: Path, supervised: bool):
    argv = [redis, "--port", "0", "--unixsocket", str(d / "redis.sock"), "--save", "",
            "--appendonly", "no", "--dir", str(d)]
    return argv + (["--supervised", "systemd"] if supervised else [])


def ping(path: Path) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(b"PING\r\n")
        return s.recv(7)


def test_redis_notify_ping_succeeds_first_try_and_term_reports_stopping(redis_server, tmp_path):
    with childguard.spawn(
        redis_argv(redis_server, tmp_path, supervised=True),
        ready=childguard.Notify(),
        capture="both",
        ladder="TERM:10s,KILL:2s",
    ) as redis:
        assert ping(tmp_path / "redis.sock") == b"+PONG\r\n"
    report = redis.report
    assert report.ended_by == {"kind": "rung", "index": 0, "signal": "TERM"}, report
    assert report.returncode == 0, report
    assert report.notify["stopping_ms"] is not None, report.notify
    assert report.notify["status"], report.notify


def test_redis_connect_ready_on_its_unix_socket(redis_server, tmp_path):
    with childguard.spawn(
        redis_argv(redis_server, tmp_path, supervised=False),
        ready=childguard.Connect(tmp_path / "redis.sock"),
        capture="both",
        ladder="TERM:10s,KILL:2s",
    ):
        assert ping(tmp_path / "redis.sock") == b"+PONG\r\n"


def test_redis_output_ready_on_its_log_line(redis_server, tmp_path):
    with childguard.spawn(
        redis_argv(redis_server, tmp_path, supervised=False),
        ready=childguard.Output("ready to accept connections"),
        ladder="TERM:10s,KILL:2s",
    ) as redis:
        assert ping(tmp_path / "redis.sock") == b"+PONG\r\n"
    assert "ready to accept connections" in redis.report.output_tail.lower()


@pytest.fixture
def pg_cluster():
    """A fresh cluster owned by the postgres user (postgres refuses to run as root), in a
    directory under /tmp it can reach (pytest's tmp_path is under a root-only 0700 dir)."""
    initdb = pg_tool("initdb")
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail(f"no postgres user: install with `{INSTALL}`", pytrace=False)
    root = Path(tempfile.mkdtemp(prefix="childguard-py-pg-"))
    (root / "run").mkdir()
    for d in (root, root / "run"):
        os.chown(d, user.pw_uid, user.pw_gid)
    out = subprocess.run(
        [initdb, "-D", "data", "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"],
        cwd=root, user=user.pw_uid, group=user.pw_gid, env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True,
    )
    assert out.returncode == 0, f"initdb failed: {out.stderr}"
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_postgres_notify_first_query_succeeds(pg_cluster):
    postgres = pg_tool("postgres")
    psql = need("psql", [shutil.which("psql") or "", "/usr/bin/psql"], INSTALL)
    with childguard.spawn(
        [postgres, "-D", "data", "-c", "listen_addresses=", "-c",
         f"unix_socket_directories={pg_cluster / 'run'}", "-c", "fsync=off"],
        cwd=pg_cluster,
        user="postgres",
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
        ready=childguard.Notify(),
        ready_timeout=60,
        capture="stderr",
        contain=True,
        ladder="@postgres",  # the library's preset: INT (fast shutdown), QUIT, KILL
    ) as pg:
        out = subprocess.run(
            [psql, "-h", str(pg_cluster / "run"), "-U", "postgres", "-d", "postgres",
             "-tAc", "select 40 + 2"],
            env={**os.environ, "PGCONNECT_TIMEOUT": "5"}, capture_output=True, text=True,
            stdin=subprocess.DEVNULL,
        )
        assert out.returncode == 0, f"the first query failed: {out.stderr}\nlog: {pg.output_tail}"
        assert out.stdout.strip() == "42"
    report = pg.report
    # INT is postgres' fast shutdown: it ends on the first rung, with exit 0.
    assert report.ended_by == {"kind": "rung", "index": 0, "signal": "INT"}, report
    assert report.returncode == 0, report
    assert report.notify["stopping_ms"] is not None, report.notify
    assert report.cgroup["members_left"] == 0, report.cgroup
    assert "database system is shut down" in report.output_tail, report.output_tail
    assert gone(report.pid)


def test_postgres_ready_by_pg_isready_first_query_succeeds(pg_cluster):
    """childguard.Exec: ready once `pg_isready` exits 0 (issue 23 item 3)."""
    postgres = pg_tool("postgres")
    isready = pg_tool("pg_isready")
    psql = need("psql", [shutil.which("psql") or "", "/usr/bin/psql"], INSTALL)
    run = pg_cluster / "run"
    with childguard.spawn(
        [postgres, "-D", "data", "-c", "listen_addresses=", "-c",
         f"unix_socket_directories={run}", "-c", "fsync=off"],
        cwd=pg_cluster,
        user="postgres",
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
        ready=childguard.Exec([isready, "-h", run, "-U", "postgres"]),
        ready_timeout=60,
        capture="stderr",
        ladder="@postgres",
    ) as pg:
        out = subprocess.run(
            [psql, "-h", str(run), "-U", "postgres", "-d", "postgres", "-tAc", "select 40 + 2"],
            env={**os.environ, "PGCONNECT_TIMEOUT": "5"}, capture_output=True, text=True,
            stdin=subprocess.DEVNULL,
        )
        assert out.returncode == 0, f"the first query failed: {out.stderr}\nlog: {pg.output_tail}"
        assert out.stdout.strip() == "42"
    assert pg.report.returncode == 0, pg.report

