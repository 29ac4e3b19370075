"""sd_notify beyond readiness (issue 23 item 4), through the installed package: the watchdog
(``watchdog=``: kept alive, missed and closed with the ladder, the report naming it) and
``Server.reload`` (done when READY=1 follows RELOADING=1; a clear error on timeout). Against
slowserver; bounds are generous (the suite runs under load)."""

from __future__ import annotations

import time

import childguard
import pytest


def test_a_watchdog_missed_closes_the_server_and_the_report_says_so(slowserver):
    server = childguard.spawn(
        [slowserver, "--notify", "--watchdog-every", "20ms", "--watchdog-for", "200ms",
         "--ignore-eof"],
        ready=childguard.Notify(),
        watchdog=0.3,
        ladder="TERM:5s,KILL:1s",
    )
    assert server.wait(20.0) is not None, "the watchdog did not close the server"
    missed = server.watchdog_missed()
    assert missed is not None and missed >= 0.3, missed
    report = server.close()
    assert "watchdog missed at +" in str(report), str(report)
    assert report.notify is not None
    assert report.notify["watchdog"][0].startswith("watchdog missed at +"), report.notify


def test_a_fed_watchdog_leaves_the_server_alone(slowserver):
    with childguard.spawn(
        [slowserver, "--notify", "--watchdog-every", "20ms", "--ignore-eof"],
        ready=childguard.Notify(),
        watchdog=2.0,
    ) as server:
        assert server.wait(3.0) is None
        assert server.watchdog_missed() is None


def test_reload_returns_after_ready_and_times_out_without_it(slowserver):
    with childguard.spawn(
        [slowserver, "--notify", "--reload", "100ms", "--ignore-eof"],
        ready=childguard.Notify(),
    ) as server:
        began = time.monotonic()
        took = server.reload("HUP", 20.0)
        assert 0.1 <= took <= time.monotonic() - began, took
        assert server.poll() is None
    with childguard.spawn(
        [slowserver, "--notify", "--reload", "never", "--ignore-eof"],
        ready=childguard.Notify(),
    ) as server:
        with pytest.raises(childguard.ReadyError, match="no READY=1 after RELOADING=1"):
            server.reload("HUP", 0.3)
