"""asyncio: spawn_async and aclose run on the loop's executor, the loop keeps running."""

from __future__ import annotations

import asyncio

import childguard
from conftest import gone, read_ready


def test_aclose_does_not_block_the_event_loop(slowserver):
    async def main():
        server = await childguard.spawn_async(
            [slowserver, "--ignore", "TERM", "--ignore-eof"], socket="stdio", ladder="TERM:5s,KILL:5s"
        )
        read_ready(server.socket)
        closing = asyncio.ensure_future(server.aclose())
        # The close sits in TERM's 5 s grace (TERM is ignored); the loop still runs this.
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
