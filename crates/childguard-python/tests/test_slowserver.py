"""The Rust suite's slowserver cases, through the installed Python package: a stuck read closed
within the ladder's bound, TERM ignored (the report shows KILL), kill() by hand, readiness,
capture, env/cwd, the socket, bad input. Time bounds are generous (the suite runs under load);
timing claims are the bench's (bench/compare.py).

Without socket="stdio", slowserver's stdin is pytest's (at EOF): such tests pass --ignore-eof,
else slowserver exits 0 on that EOF, maybe before it is ready."""

from __future__ import annotations

import errno
import gc
import os
import signal
import subprocess
import threading
import time

import childguard
import pytest
from conftest import gone, pidfd_exited, read_ready


def test_context_manager_closes_and_reaps(slowserver):
    with childguard.spawn([slowserver], socket="stdio") as server:
        pid = read_ready(server.socket)["pid"]
        assert pid == server.pid
        assert server.poll() is None
    report = server.report
    assert report is not None and server.closed
    assert report.pid == pid
    assert report.reaped_ms is not None
    assert gone(pid), "the child is still there (not reaped) after the with block"
    assert server.close() is report, "a second close returns the same report"


def test_stuck_read_is_closed_within_the_first_rung(slowserver):
    # A 10 s read in flight: closing the socket does not wake it; the HUP rung does. HUP's
    # grace is long (3 s) so that a loaded machine cannot push the exit into the TERM rung.
    server = childguard.spawn(
        [slowserver, "--delay-read", "10s"], socket="stdio", ladder="HUP:3s,TERM:2s,KILL:5s"
    )
    read_ready(server.socket)
    server.socket.sendall(b"READ 1\n")
    began = time.monotonic()
    report = server.close()
    took = time.monotonic() - began
    assert report.ended_by == {"kind": "rung", "index": 0, "signal": "HUP"}, report
    assert report.signals == ["HUP"], report
    # Typically ~1 ms; 5 s is slack for a loaded machine, half the read's 10 s.
    assert took < 5.0, report
    assert gone(server.pid)


def test_term_ignored_is_killed_by_the_next_rung(slowserver):
    # skip_ignored=False: TERM is sent although ignored, and its grace spent.
    server = childguard.spawn(
        [slowserver, "--ignore", "HUP,TERM", "--ignore-eof"],
        socket="stdio",
        ladder="TERM:300ms,KILL:5s",
        skip_ignored=False,
    )
    read_ready(server.socket)
    report = server.close()
    assert report.signals == ["TERM", "KILL"], report
    assert report.skipped == [], report
    assert report.ending_signal == "KILL", report
    assert report.returncode == -signal.SIGKILL, report
    assert 300 <= report.total_ms < 5300 + 2000, report
    assert "KILL" in str(report) and repr(report).startswith("<CloseReport "), repr(report)
    data = report.to_dict()
    assert data["ended_by"]["signal"] == "KILL" and data["signals"][0]["signal"] == "TERM"
    assert data["signals"][0]["disposition"] == "ignored", data


def test_an_ignored_rung_is_skipped_by_default(slowserver):
    # The default: TERM, ignored, is skipped at once (its 30 s grace not spent); KILL ends it.
    server = childguard.spawn(
        [slowserver, "--ignore", "HUP,TERM", "--ignore-eof"],
        socket="stdio",
        ladder="TERM:30s,KILL:5s",
    )
    read_ready(server.socket)
    report = server.close()
    assert report.skipped == ["TERM"], report
    assert report.signals == ["KILL"], report
    assert report.ending_signal == "KILL" and not report.default_action, report
    assert report.total_ms < 15000, report
    assert "TERM +" in str(report) and "skipped: ignored by the server" in str(report), report


def test_a_rung_without_a_handler_is_reported_as_the_default_action(slowserver):
    # slowserver without --log has no HUP handler: the kernel's default action ends it.
    server = childguard.spawn([slowserver, "--ignore-eof"], socket="stdio", ladder="HUP:10s,KILL:5s")
    read_ready(server.socket)
    report = server.close()
    assert report.ending_signal == "HUP" and report.default_action, report
    assert "default action, no handler ran" in str(report), report


def test_kill_by_hand_then_close_resumes_after_it(slowserver):
    server = childguard.spawn([slowserver, "--ignore-eof"], socket="stdio")
    read_ready(server.socket)
    assert server.kill(signal.SIGTERM, grace=10.0) == -signal.SIGTERM
    report = server.close()
    assert report.ended_by == {"kind": "kill", "signal": "TERM"}, report
    assert report.signals == [], "the close sent nothing more after the kill: %s" % report


def test_kill_takes_names_and_returns_none_while_alive(slowserver):
    with childguard.spawn([slowserver, "--ignore", "TERM"], socket="stdio", ladder="KILL:5s") as s:
        read_ready(s.socket)
        assert s.kill("TERM", grace=0.05) is None
        assert s.kill(signal.SIGKILL, grace=10.0) == -signal.SIGKILL
    assert s.report.ended_by["kind"] == "kill"


def test_socket_speaks_to_the_server(slowserver):
    with childguard.spawn([slowserver], socket="stdio") as server:
        sock = server.socket
        read_ready(sock)
        assert server.socket is sock, "one socket object per server"
        sock.sendall(b"PING\n")
        assert sock.makefile("rb").readline() == b"PONG\n"
    assert sock.fileno() == -1, "the close closed our socket object"
    # slowserver exits 0 on the shutdown's EOF, or dies of the HUP rung if that comes first.
    assert server.report.returncode in (0, -signal.SIGHUP), server.report


def test_readiness_notify(slowserver):
    with childguard.spawn(
        [slowserver, "--ignore-eof", "--notify", "--ready-after", "100ms"],
        ready=childguard.Notify(),
        stdout=subprocess.DEVNULL,
    ) as server:
        # spawn() returned only after READY=1, which slowserver sends once it is ready.
        assert server.poll() is None
    assert server.report.notify["status"] == "ready", server.report.notify


def test_notify_access_main_ignores_a_helper_and_a_bad_value_is_a_config_error():
    # The shell's child sends first and is refused under "main"; the shell itself (exec'd
    # python3, the same pid) then counts.
    send = (
        "import os, socket, sys; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
        "s.sendto(sys.argv[1].encode(), os.environ['NOTIFY_SOCKET'])"
    )
    script = (
        f'python3 -c "{send}" "READY=1\nSTATUS=helper"; '
        f'exec python3 -c "{send}; import time; time.sleep(600)" "READY=1\nSTATUS=main"'
    )
    with childguard.spawn(
        ["sh", "-c", script],
        ready=childguard.Notify(),
        notify_access="main",
        ladder="KILL:10s",
    ) as server:
        pid = server.pid
    notify = server.report.notify
    assert notify["status"] == "main", notify
    assert any(f"not the main process {pid}" in why for why in notify["ignored"]), notify
    with pytest.raises(childguard.ConfigError, match='notify_access="nobody"'):
        childguard.spawn(["true"], ready=childguard.Notify(), notify_access="nobody")


def test_readiness_connect_unix(slowserver, tmp_path):
    path = tmp_path / "s.sock"
    with childguard.spawn(
        [slowserver, "--ignore-eof", "--listen", str(path), "--ready-after", "100ms"],
        ready=childguard.Connect(path),
        stdout=subprocess.DEVNULL,
    ):
        import socket

        s = socket.socket(socket.AF_UNIX)
        s.connect(str(path))  # first try: the server listens already
        s.close()


def test_readiness_output_and_the_tail(slowserver):
    with childguard.spawn([slowserver, "--ignore-eof"], ready=childguard.Output("READY pid=")) as server:
        assert f"READY pid={server.pid}" in server.output_tail
    assert f"READY pid={server.pid}" in server.report.output_tail


def test_any_of_is_ready_by_the_condition_that_holds(slowserver, tmp_path):
    # No --notify: READY=1 never comes, the port does.
    path = tmp_path / "s.sock"
    with childguard.spawn(
        [slowserver, "--ignore-eof", "--listen", str(path), "--ready-after", "100ms"],
        ready=childguard.AnyOf(childguard.Notify(), childguard.Connect(path)),
        ready_timeout=60,
        stdout=subprocess.DEVNULL,
    ) as server:
        import socket

        s = socket.socket(socket.AF_UNIX)
        s.connect(str(path))  # first try: the server listens already
        s.close()
        assert server.poll() is None
    notify = server.report.notify
    assert notify is None or notify.get("status") != "ready", notify


def test_all_of_waits_for_every_condition(slowserver):
    with childguard.spawn(
        [slowserver, "--ignore-eof", "--notify", "--ready-after", "100ms"],
        ready=childguard.AllOf(childguard.Notify(), childguard.Output("READY pid=")),
        ready_timeout=60,
    ) as server:
        assert f"READY pid={server.pid}" in server.output_tail
    assert server.report.notify["status"] == "ready", server.report.notify


def test_all_of_times_out_naming_what_never_came(slowserver):
    with pytest.raises(childguard.ReadyError) as caught:
        childguard.spawn(
            [slowserver, "--ignore-eof"],
            ready=childguard.AllOf(childguard.Output("READY pid="), childguard.Notify()),
            ready_timeout=1.0,
            ladder="TERM:5s,KILL:2s",
        )
    text = str(caught.value)
    assert "READY=1" in text, text
    assert caught.value.report is not None and gone(caught.value.report.pid)


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: childguard.AnyOf(), "needs at least one condition"),
        (lambda: childguard.AllOf(childguard.AnyOf(childguard.Notify())), "lists do not nest"),
        (lambda: childguard.AnyOf("READY"), "expected Notify()"),
    ],
)
def test_bad_lists_are_config_errors(make, needle):
    with pytest.raises(childguard.ConfigError) as caught:
        make()
    assert needle in str(caught.value), str(caught.value)


def test_two_outputs_in_a_list_are_refused_by_the_library(slowserver):
    with pytest.raises(childguard.ConfigError) as caught:
        childguard.spawn(
            [slowserver, "--ignore-eof"],
            ready=childguard.AnyOf(childguard.Output("a"), childguard.Output("b")),
        )
    assert "at most one Ready::Output" in str(caught.value), str(caught.value)


def test_ready_timeout_closes_the_server_and_reports(slowserver):
    with pytest.raises(childguard.ReadyError) as caught:
        childguard.spawn(
            [slowserver, "--ignore-eof", "--notify", "--ready-after", "60s"],
            ready=childguard.Notify(),
            ready_timeout=0.3,
            ladder="TERM:5s,KILL:2s",
            stdout=subprocess.DEVNULL,
        )
    e = caught.value
    assert e.kind == "ready" and "slowserver" in str(e), str(e)
    assert e.report is not None and e.report.reaped_ms is not None, e.report
    assert gone(e.report.pid)


def test_exit_before_ready_fails_at_once_with_status_and_tail(slowserver):
    with pytest.raises(childguard.ReadyError) as caught:
        childguard.spawn(
            [slowserver, "--exit-immediately", "3"],
            ready=childguard.Notify(),
            ready_timeout=60,
            capture="both",
        )
    assert "exited during start-up with exit status: 3" in str(caught.value), str(caught.value)


def test_env_replaces_and_cwd_is_used(tmp_path):
    with childguard.spawn(
        ["/bin/sh", "-c", 'echo "FOO=$FOO HOME=${HOME-unset}"; pwd; exec sleep 60'],
        env={"FOO": "bar", "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        ready=childguard.Output(str(tmp_path)),
        ladder="TERM:5s,KILL:1s",
    ) as server:
        tail = server.output_tail
    assert "FOO=bar HOME=unset" in tail, tail
    assert server.cwd == tmp_path
    assert server.report.ending_signal == "TERM", server.report


def test_process_group_reaches_the_grandchild(slowserver):
    with childguard.spawn(
        [slowserver, "--fork-grandchild"], socket="stdio", process_group=True, ladder="TERM:5s,KILL:2s"
    ) as server:
        grandchild = read_ready(server.socket)["grandchild"]
        assert grandchild > 0
        pidfd = os.pidfd_open(grandchild)
    try:
        assert pidfd_exited(pidfd, 10.0), "the group's grandchild survived the close"
    finally:
        os.close(pidfd)
    assert server.report.to_dict()["signals"][0]["to_group"] is True


def test_bad_ladder_names_the_rung():
    with pytest.raises(childguard.ConfigError) as caught:
        childguard.spawn(["true"], ladder="TERM:1s,FOO:2s,KILL")
    text = str(caught.value)
    assert '"FOO:2s"' in text and "unknown signal" in text, text
    assert isinstance(caught.value, ValueError)
    with pytest.raises(childguard.ConfigError, match="TERM:forever"):
        childguard.parse_ladder("TERM:forever")
    assert childguard.parse_ladder("TERM:5s,KILL:1s").startswith("TERM:5s")
    # The library's presets are ladder text too; an unknown one lists the known ones.
    assert childguard.parse_ladder("@postgres").startswith("INT:")
    with pytest.raises(childguard.ConfigError, match="@postgres"):
        childguard.parse_ladder("@no-such-server")


def test_missing_program_is_a_spawn_error_naming_it():
    with pytest.raises(childguard.SpawnError) as caught:
        childguard.spawn(["/nonexistent/childguard-no-such-program", "--flag"])
    e = caught.value
    assert e.errno == errno.ENOENT and e.kind == "spawn"
    assert "/nonexistent/childguard-no-such-program" in str(e), str(e)
    assert isinstance(e, childguard.Error)


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"ready_timeout": -1}, "ready_timeout=-1"),
        ({"socket": "tcp"}, 'socket="tcp"'),
        ({"capture": "all"}, 'capture="all"'),
        ({"contain": "maybe"}, 'contain="maybe"'),
        ({"stdout": 7}, "stdout=7"),
        ({"ready": "notify"}, "ready='notify'"),
        ({"user": "no-such-user-childguard"}, "no-such-user-childguard"),
    ],
)
def test_bad_arguments_are_config_errors_naming_them(kwargs, named):
    with pytest.raises(childguard.ConfigError) as caught:
        childguard.spawn(["true"], **kwargs)
    assert named in str(caught.value), str(caught.value)


def test_empty_argv_and_bad_signal(slowserver):
    with pytest.raises(childguard.ConfigError, match="argv is empty"):
        childguard.spawn([])
    with childguard.spawn([slowserver], socket="stdio") as server:
        with pytest.raises(childguard.ConfigError, match="signal 4242"):
            server.kill(4242)
        with pytest.raises(childguard.ConfigError, match="NOPE"):
            server.kill("NOPE")
    with pytest.raises(childguard.ClosedError):
        server.kill(signal.SIGTERM)


def test_close_releases_the_gil(slowserver):
    # While close() waits out TERM's 2 s grace, another Python thread must run.
    server = childguard.spawn(
        [slowserver, "--ignore", "TERM", "--ignore-eof"], socket="stdio", ladder="NOSKIP,TERM:2s,KILL:5s"
    )
    read_ready(server.socket)
    stamps = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            stamps.append(time.monotonic())
            time.sleep(0.01)

    ticker = threading.Thread(target=tick)
    ticker.start()
    began = time.monotonic()
    report = server.close()
    ended = time.monotonic()
    stop.set()
    ticker.join()
    assert report.ending_signal == "KILL", report
    assert ended - began >= 2.0, report
    # Stamps from well inside the close (TERM's 2 s grace), not from the moments just before
    # the native call and just after it, when the Python code around it lets the ticker run.
    during = [t for t in stamps if began + 0.5 < t < ended - 0.5]
    assert during, "no other thread ran during close(): the GIL was held"


def test_a_collected_server_is_closed_without_blocking(slowserver):
    server = childguard.spawn(
        [slowserver, "--ignore", "TERM", "--ignore-eof"], socket="stdio", ladder="NOSKIP,TERM:3s,KILL:5s"
    )
    pid = server.pid
    pidfd = os.pidfd_open(pid)
    try:
        began = time.monotonic()
        del server
        gc.collect()
        # The drop hands the close to a thread: it returns before TERM's 3 s grace is over.
        assert time.monotonic() - began < 2.5
        assert pidfd_exited(pidfd, 30.0), "the collected server was never closed"
    finally:
        os.close(pidfd)
