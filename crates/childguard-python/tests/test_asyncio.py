"""asyncio: spawn_async and aclose run on the loop's executor, the loop keeps running."""

from __future__ import annotations

import asyncio
import glob
import os
import subprocess
import time
import uuid

import pytest

import childguard
from conftest import gone, proc_state, read_ready


def test_aclose_does_not_block_the_event_loop(slowserver):
    async def main():
        server = await childguard.spawn_async(
            [slowserver, "--ignore", "TERM", "--ignore-eof"], socket="stdio", ladder="NOSKIP,TERM:5s,KILL:5s"
        )
        read_ready(server.socket)
        closing = asyncio.ensure_future(server.aclose())
        # The close sits in TERM's 5 s grace (TERM is ignored, and NOSKIP sends it all the same);
        # the loop still runs this.
        await asyncio.sleep(0.2)
        assert not closing.done(), "aclose() finished before the loop got back: it blocked it"
        report = await closing
        assert report.signals == ["TERM", "KILL"], report
        assert gone(server.pid)

    asyncio.run(main())


def test_async_with(slowserver):
    async def main():
        async with await childguard.spawn_async([slowserver], socket="stdio") as server:
            read_ready(server.socket)
        return server

    server = asyncio.run(main())
    assert server.report is not None and gone(server.pid)


def test_a_cancelled_aclose_hands_the_close_to_the_reaper_which_finishes_it(slowserver):
    """Cancelling aclose() (as Ctrl-C under asyncio.run does) stops the executor thread's wait
    (so asyncio.run, which joins that executor, is not held for the ladder); the rest of the
    ladder goes to childguard's reaper: TERM is ignored, so the reaper's KILL, 1 s after it,
    ends the server. There is no report; a later close() says why."""
    async def main():
        server = await childguard.spawn_async(
            [slowserver, "--ignore", "TERM", "--ignore-eof"], socket="stdio", ladder="NOSKIP,TERM:1s,KILL:5s"
        )
        read_ready(server.socket)
        pidfd = os.pidfd_open(server.pid)
        closing = asyncio.ensure_future(server.aclose())
        await asyncio.sleep(0.1)
        closing.cancel()
        try:
            await closing
        except asyncio.CancelledError:
            pass
        return server, pidfd

    server, pidfd = asyncio.run(main())
    try:
        assert server.report is None, server.report
        with pytest.raises(childguard.ClosedError, match="interrupted"):
            server.close()
        import select
        assert select.select([pidfd], [], [], 30)[0], "the reaper did not finish the close"
        for _ in range(600):  # reaped by the reaper (PID 1 may be late for orphans: not ours)
            if gone(server.pid):
                break
            time.sleep(0.05)
        assert gone(server.pid)
    finally:
        os.close(pidfd)


def test_a_cancelled_spawn_async_closes_the_server_it_still_returns(slowserver):
    tag = uuid.uuid4().hex

    async def main():
        spawning = asyncio.ensure_future(
            childguard.spawn_async(
                [slowserver, "--ignore-eof", "--notify", "--ready-after", "3s"],
                ready=childguard.Notify(),
                env={**os.environ, "CHILDGUARD_TEST_TAG": tag},
                stdout=subprocess.DEVNULL,
            )
        )
        # Cancel while it is starting: once its exec'd server shows (not after a fixed sleep,
        # which a loaded machine can outlast before the exec or past the readiness), up to
        # 20 s; it is ready 3 s after its start, so the cancel comes well before that.
        for _ in range(400):
            if tagged(tag):
                break
            await asyncio.sleep(0.05)
        assert tagged(tag), "the server never started"
        if not spawning.cancel():
            spawning.result().close()
            raise AssertionError("spawn_async finished before the cancel: nothing was tested")
        for _ in range(600):  # ready after 3 s, then closed: up to 30 s, generously
            if not tagged(tag):
                return
            await asyncio.sleep(0.05)

    asyncio.run(main())
    assert not tagged(tag), "the server of a cancelled spawn_async was left running"


def tagged(tag: str):
    """Live processes whose environment carries CHILDGUARD_TEST_TAG=tag."""
    needle = f"CHILDGUARD_TEST_TAG={tag}".encode()
    found = []
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(environ, "rb") as f:
                if needle in f.read().split(b"\0"):
                    pid = int(environ.split("/")[2])
                    if proc_state(pid) not in (None, "Z"):
                        found.append(pid)
        except OSError:
            pass
    return found
