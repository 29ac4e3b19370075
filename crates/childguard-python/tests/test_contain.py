"""Containment: a setsid() escapee (slowserver --daemonize: double fork + setsid, ignores HUP and
TERM) does not survive close() with contain=True; without it, the report names the escapee."""

from __future__ import annotations

import os
import signal

import childguard
from conftest import pidfd_exited, read_ready


def test_setsid_escapee_does_not_survive_a_contained_close(slowserver):
    with childguard.spawn(
        [slowserver, "--daemonize"], socket="stdio", contain=True, ladder="TERM:2s,KILL:5s"
    ) as server:
        daemon = read_ready(server.socket)["grandchild"]
        assert daemon > 0
        pidfd = os.pidfd_open(daemon)
    try:
        report = server.report
        assert report.cgroup is not None, report
        assert report.cgroup["members_left"] == 0 and report.cgroup["removed"], report.cgroup
        # The cgroup empties (cgroup_exit) just before the exit is signalled to pidfds
        # (exit_notify): wait for it, generously.
        assert pidfd_exited(pidfd, 10.0), "the setsid daemon survived the contained close"
    finally:
        os.close(pidfd)


def test_without_containment_the_report_names_the_setsid_worker(slowserver):
    # A worker that called setsid() while its parent runs: killpg cannot reach it, the report
    # says so (a daemon re-parented to init before the close is not even seen: use contain).
    server = childguard.spawn(
        [slowserver, "--workers", "1", "--setsid"], socket="stdio", process_group=True,
        ladder="TERM:1s,KILL:2s",
    )
    worker = read_ready(server.socket)["workers"]
    pidfd = os.pidfd_open(worker)
    try:
        report = server.close()
        assert worker in report.escaped, report
        assert not pidfd_exited(pidfd, 0.0), "expected the worker to outlive a group-only close"
    finally:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        assert pidfd_exited(pidfd, 30.0)
        os.close(pidfd)


def test_a_contained_close_ends_setsid_workers_too(slowserver):
    with childguard.spawn(
        [slowserver, "--workers", "1", "--setsid"], socket="stdio", contain=True,
        ladder="TERM:2s,KILL:5s",
    ) as server:
        worker = read_ready(server.socket)["workers"]
        pidfd = os.pidfd_open(worker)
    try:
        assert server.report.escaped == [], server.report
        assert pidfd_exited(pidfd, 10.0), "the setsid worker survived the contained close"
    finally:
        os.close(pidfd)
