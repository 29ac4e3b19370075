"""Restarts from Python: a server that crashes once is started again with a socket of its
own; a crash loop raises CrashLoopError naming the exits; exit 0 is not restarted on failure;
bad arguments raise ConfigError."""

from __future__ import annotations

import asyncio
import os

import pytest

import childguard

COUNTED = (
    'n=$(($(cat "$1" 2>/dev/null || echo 0) + 1)); echo $n > "$1"; echo "start $n"; '
    'read w; [ "$w" = crash ] && exit 3; exec sleep 1000'
)


def _greeting(sup: childguard.Supervisor) -> int:
    sock = sup.socket()
    assert sock is not None
    with sock, sock.makefile("rb") as f:
        return int(f.readline().split()[1])


def test_a_crash_is_restarted_with_a_socket_of_its_own(tmp_path):
    counter = tmp_path / "n"
    with childguard.supervise(
        ["sh", "-c", COUNTED, "sh", str(counter)],
        socket="stdio",
        restart="on-failure",
        restart_delay=(0.01, 0.05),
    ) as sup:
        assert _greeting(sup) == 1
        first = sup.pid
        sock = sup.socket()
        assert sock is not None
        with sock:
            sock.sendall(b"crash\n")
        assert sup.wait_for_start(1, 30.0) == 2
        assert _greeting(sup) == 2
        second = sup.pid
        assert first != second and sup.restarts == 1
    report = sup.report
    assert report is not None and report.restarts == 1
    assert report.last is not None and len(report.previous) == 1
    assert "start 1: exit 3" in report.exits[0]
    for pid in (first, second):
        assert pid is not None and not os.path.exists(f"/proc/{pid}")


def test_a_crash_loop_raises_naming_the_exits():
    sup = childguard.supervise(
        ["sh", "-c", "echo bad-start >&2; exit 7"],
        capture="stderr",
        restart="always",
        restart_delay=0,
        restart_limit=(3, 60.0),
    )
    after = 0
    with pytest.raises(childguard.CrashLoopError) as e:
        while True:
            after = sup.wait_for_start(after, 30.0)
    assert "exit 7" in str(e.value) and "bad-start" in str(e.value), str(e.value)
    assert sup.ended
    report = sup.close()
    assert report.gave_up is not None and report.restarts == 2


def test_exit_0_is_not_restarted_on_failure():
    sup = childguard.supervise(["true"], restart="on-failure")
    with pytest.raises(childguard.WaitError):
        sup.wait_for_start(1, 30.0)
    assert sup.close().restarts == 0


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"restart": "sometimes"}, "restart='sometimes'"),
        ({"stdin": "pipe"}, "pipes belong to one start"),
        ({"no_such": 1}, "unknown argument(s) no_such"),
        ({"restart_delay": -1}, "restart_delay=-1"),
    ],
)
def test_bad_arguments_raise_config_error(kwargs, needle):
    with pytest.raises(childguard.ConfigError) as e:
        childguard.supervise(["true"], **kwargs)
    assert needle.replace("'", '"') in str(e.value).replace("'", '"'), str(e.value)


def test_asyncio_awaits_the_restart_and_the_close(tmp_path):
    counter = tmp_path / "n"

    async def main() -> None:
        sup = childguard.supervise(
            ["sh", "-c", COUNTED, "sh", str(counter)],
            socket="stdio",
            restart="on-failure",
            restart_delay=0,
        )
        assert _greeting(sup) == 1
        sock = sup.socket()
        assert sock is not None
        with sock:
            sock.sendall(b"crash\n")
        assert await sup.wait_for_start_async(1, 30.0) == 2
        report = await sup.close_async()
        assert report.restarts == 1 and report.last is not None

    asyncio.run(main())
