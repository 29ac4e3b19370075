"""A Server shared by threads, Ctrl-C during its waits, os.fork(), and the interpreter's exit.

- No call waits for another thread's wait: the handle's lock is never held across one, and it
  is taken with the GIL released (old: ``repr(server)`` during another thread's ``wait(5)``
  took the rest of those 5 s, every Python thread stopped with it).
- Every wait (``wait``, ``close``, ``spawn`` with ``ready=``) passes ``PyErr_CheckSignals`` to
  the library's one wait primitive, called every 20 ms and on EINTR: SIGINT raises
  KeyboardInterrupt within 0.1 s (old: only when the wait ended), and an interrupted
  ``spawn(ready=…)`` closes its server at once (old: only when ``ready_timeout`` passed).
- Servers still open at exit are closed by an atexit drain (old: a thread the exit killed).
- A fork's copy of a Server refuses with InheritedError (old: locked for ever when another
  thread held the lock at the fork).

"Thread X is in the wait" is read from the kernel (/proc/self/task/TID/wchan: blocked in a
poll), never assumed after a sleep.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

import childguard
from conftest import proc_state, read_ready


def wchan(tid: int) -> str:
    try:
        with open(f"/proc/self/task/{tid}/wchan") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait_until_polling(tid: int, what: str, timeout: float = 30.0) -> None:
    """Returns once thread `tid` is blocked in a poll (the native wait's pidfd poll)."""
    deadline = time.monotonic() + timeout
    while "poll" not in wchan(tid):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: thread {tid} never blocked in a poll (wchan {wchan(tid)!r})")
        time.sleep(0.002)


# The bound: Ctrl-C raises KeyboardInterrupt within this of the SIGINT.
INTERRUPT_BOUND = 0.1


def pidfd_exited(pidfd: int, timeout: float) -> bool:
    return bool(select.select([pidfd], [], [], timeout)[0])


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (PID 1 here reaps orphans late)."""
    return proc_state(pid) not in (None, "Z")


def assert_ends(pidfd: int, pid: int, within: float, what: str) -> None:
    """The process of `pidfd` exits within `within` seconds (else fails with `what`), and is
    then reaped by its parent: gone from /proc, or a zombie of PID 1's, within 30 s more."""
    assert pidfd_exited(pidfd, within), what
    deadline = time.monotonic() + 30
    while proc_state(pid) not in (None, "Z") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not alive(pid)


def release(pidfd: int) -> None:
    """A test's cleanup: SIGKILL the process of `pidfd` if it is still there; close `pidfd`."""
    if not pidfd_exited(pidfd, 0):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    os.close(pidfd)


def spawn_slow(slowserver: str, *args: str, ladder: str = "KILL:10s") -> childguard.Server:
    server = childguard.spawn([slowserver, "--ignore-eof", *args], socket="stdio", ladder=ladder)
    assert server.socket is not None
    read_ready(server.socket)
    return server


class Waiter(threading.Thread):
    """`server.wait(timeout)` on a thread: its result or exception, and how long it took."""

    def __init__(self, server: childguard.Server, timeout: float) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.timeout = timeout
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.ended: Optional[float] = None

    def run(self) -> None:
        try:
            self.result = self.server.wait(self.timeout)
        except BaseException as e:  # noqa: B036 - recorded for the test
            self.error = e
        self.ended = time.monotonic()


def test_calls_during_another_threads_wait_return_at_once(slowserver: str) -> None:
    server = spawn_slow(slowserver)
    waiter = Waiter(server, 5)
    waiter.start()
    assert waiter.native_id is not None
    wait_until_polling(waiter.native_id, "wait(5)")
    took: Dict[str, float] = {}
    calls: Dict[str, Callable[[], object]] = {
        "repr": lambda: repr(server),
        "closed": lambda: server.closed,
        "socket_fd": lambda: server._native.socket_fd(),
        "pid": lambda: server.pid,
        "poll": server.poll,
        "output_tail": lambda: server.output_tail,
    }
    for name, call in calls.items():
        start = time.monotonic()
        call()
        took[name] = time.monotonic() - start
    print("during another thread's wait(5):", {k: f"{v * 1000:.2f} ms" for k, v in took.items()})
    for name, seconds in took.items():
        assert seconds < 1.0, f"{name} blocked {seconds:.2f} s on the other thread's wait"
    assert waiter.is_alive(), "the wait(5) ended before the calls were made"
    server.close()
    waiter.join(30)


def test_close_from_another_thread_ends_a_wait(slowserver: str) -> None:
    # TERM ignored (and sent: NOSKIP): the close climbs for 2 s; the other thread's wait ends long before.
    server = spawn_slow(slowserver, "--ignore", "TERM", ladder="NOSKIP,TERM:2s,KILL:10s")
    waiter = Waiter(server, 30)
    waiter.start()
    assert waiter.native_id is not None
    wait_until_polling(waiter.native_id, "wait(30)")
    start = time.monotonic()
    report = server.close()
    closed = time.monotonic() - start
    waiter.join(30)
    assert waiter.ended is not None, "the wait did not end within 30 s of the close"
    ended = waiter.ended - start
    print(f"close() took {closed * 1000:.1f} ms; the other thread's wait(30) ended "
          f"{ended * 1000:.1f} ms after the close began ({report})")
    assert ended < 1.0, f"the wait ended {ended:.2f} s after the close began"
    assert 2.0 <= closed < 30.0 and report.ending_signal == "KILL", report
    assert isinstance(waiter.error, childguard.ClosedError), (waiter.error, waiter.result)
    assert "closed by another thread during the wait" in str(waiter.error)


def test_sigint_interrupts_a_wait_and_the_server_keeps_running(slowserver: str) -> None:
    server = spawn_slow(slowserver)
    sent: List[float] = []

    def interrupt() -> None:
        main = threading.main_thread().native_id
        assert main is not None
        wait_until_polling(main, "wait(10)")
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=interrupt, daemon=True)
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        server.wait(10)
    raised = time.monotonic()
    timer.join(30)
    assert sent, "SIGINT was never sent"
    print(f"KeyboardInterrupt {(raised - sent[0]) * 1000:.1f} ms after SIGINT "
          f"(wait(10) ran {(raised - start) * 1000:.0f} ms)")
    assert raised - sent[0] < INTERRUPT_BOUND
    assert server.poll() is None and alive(server.pid or 0), "the server did not keep running"
    server.close()


def test_sigint_during_close_leaves_the_rest_to_the_reaper(slowserver: str) -> None:
    server = spawn_slow(slowserver, "--ignore", "TERM", ladder="NOSKIP,TERM:3s,KILL:10s")
    pid = server.pid
    assert pid is not None
    pidfd = os.pidfd_open(pid)
    sent: List[float] = []

    def interrupt() -> None:
        main = threading.main_thread().native_id
        assert main is not None
        wait_until_polling(main, "close()")
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=interrupt, daemon=True)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            server.close()
        raised = time.monotonic()
        timer.join(30)
        assert sent, "SIGINT was never sent"
        print(f"KeyboardInterrupt {(raised - sent[0]) * 1000:.1f} ms after SIGINT during close()")
        assert raised - sent[0] < INTERRUPT_BOUND
        assert server.closed
        with pytest.raises(childguard.ClosedError, match="interrupted"):
            server.close()
        # TERM is ignored: the reaper's KILL, 3 s after TERM, ends it; the reaper reaps it.
        assert_ends(pidfd, pid, 30, "the server outlived the interrupted close")
    finally:
        release(pidfd)


def test_sigint_during_aclose_leaves_the_rest_to_the_reaper(slowserver: str) -> None:
    """Ctrl-C under ``asyncio.run`` during ``await server.aclose()``: asyncio cancels the main
    task, then joins its executor, where the close runs — which stops waiting once aclose's
    cancel is set, so KeyboardInterrupt comes within 0.1 s (old: after the whole ladder, 3 s
    here), and the reaper finishes the close (its KILL at 3 s)."""
    import asyncio

    server = spawn_slow(slowserver, "--ignore", "TERM", ladder="NOSKIP,TERM:3s,KILL:10s")
    pid = server.pid
    assert pid is not None
    pidfd = os.pidfd_open(pid)
    sent: List[float] = []
    problems: List[str] = []

    def interrupt() -> None:
        # The close runs on the loop's executor ("asyncio_N"): wait until it is in its poll.
        deadline = time.monotonic() + 30
        while not any(t.name.startswith("asyncio_") and t.native_id is not None
                      and "poll" in wchan(t.native_id) for t in threading.enumerate()):
            if time.monotonic() > deadline:
                problems.append("the executor thread never blocked in the close's poll")
                break
            time.sleep(0.002)
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    async def main() -> None:
        timer = threading.Thread(target=interrupt, daemon=True)
        timer.start()
        await server.aclose()

    try:
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(main())
        raised = time.monotonic()
        assert not problems, problems
        assert sent, "SIGINT was never sent"
        print(f"KeyboardInterrupt {(raised - sent[0]) * 1000:.1f} ms after SIGINT during aclose()")
        assert raised - sent[0] < INTERRUPT_BOUND
        assert server.closed
        with pytest.raises(childguard.ClosedError, match="interrupted"):
            server.close()
        assert_ends(pidfd, pid, 30, "the server outlived the interrupted aclose")
    finally:
        release(pidfd)


@pytest.mark.parametrize("ready", ["output", "connect", "http", "exec"])
def test_sigint_during_spawn_ready_closes_the_server_at_once(tmp_path: Path, ready: str) -> None:
    """Interrupted during the readiness wait: KeyboardInterrupt within 0.1 s, and the server
    is closed by its ladder at once in the background (TERM ends it), long before the 120 s
    ``ready_timeout`` (old: it ran until that passed)."""
    pidfile = tmp_path / "pid"
    sent: List[float] = []
    pids: List[int] = []
    pidfds: List[int] = []

    def interrupt() -> None:
        deadline = time.monotonic() + 30
        while not pidfile.exists() or not pidfile.read_text().endswith("\n"):
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.002)
        pid = int(pidfile.read_text())
        # Pinned before the SIGINT: the interrupted spawn's server is closed and reaped at
        # once, and its pid then free for another process.
        pidfds.append(os.pidfd_open(pid))
        pids.append(pid)
        # The spawn is past the fork (the server wrote its pid). A SIGINT before the wait's
        # first check is seen by that check: no race on where the main thread is.
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=interrupt, daemon=True)
    timer.start()
    script = f'echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile} && exec sleep 1000'
    never = str(tmp_path / "never.sock")
    condition = {
        "output": lambda: childguard.Output("never"),
        "connect": lambda: childguard.Connect(never),
        "http": lambda: childguard.Http("http+unix://" + never.replace("/", "%2F") + "/"),
        "exec": lambda: childguard.Exec(["test", "-S", never]),
    }[ready]()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        childguard.spawn(["sh", "-c", script], ready=condition,
                         ready_timeout=120, ladder="TERM:2s,KILL:5s")
    raised = time.monotonic()
    timer.join(30)
    assert sent and pids, "SIGINT was never sent"
    print(f"KeyboardInterrupt {(raised - sent[0]) * 1000:.1f} ms after SIGINT during "
          f"spawn(ready={ready}, ready_timeout=120)")
    assert raised - sent[0] < INTERRUPT_BOUND
    pid, pidfd = pids[0], pidfds[0]
    try:
        # Closed in the background at once: the TERM rung ends it, the reaper reaps it.
        assert_ends(pidfd, pid, 30, "the server outlived the interrupted spawn")
        print(f"server gone {(time.monotonic() - start):.2f} s after the spawn began")
    finally:
        release(pidfd)


def test_servers_open_at_exit_are_closed_by_the_atexit_drain(slowserver: str) -> None:
    # Ignores HUP, TERM and EOF: only the ladder's KILL, 1 s after TERM (sent: NOSKIP), ends it.
    script = textwrap.dedent(f"""
        import subprocess, childguard
        server = childguard.spawn([{slowserver!r}, "--ignore", "HUP,TERM", "--ignore-eof"],
                                  socket="stdio", ladder="NOSKIP,TERM:1s,KILL:5s",
                                  stderr=subprocess.DEVNULL)
        server.socket.settimeout(30)
        assert b"READY" in server.socket.recv(100)
        print(server.pid, flush=True)
        # exits without closing it
    """)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    took = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    state = proc_state(pid)
    print(f"the interpreter exited after {took:.2f} s; server {pid}: state {state!r}")
    try:
        assert state in (None, "Z"), f"server {pid} outlived the interpreter (state {state})"
        assert took < 1 + 5 + 2 + 20  # the ladder, the drain's margin, python's start-up
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_forked_copy_refuses_with_a_clear_error(slowserver: str) -> None:
    server = spawn_slow(slowserver)
    # Another thread holds the handle's lock if any call holds it across a wait: a fork's copy
    # of a held lock is never released.
    waiter = Waiter(server, 30)
    waiter.start()
    assert waiter.native_id is not None
    wait_until_polling(waiter.native_id, "wait(30)")
    read_end, write_end = os.pipe()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, 3.12+
        child = os.fork()
    if child == 0:
        os.close(read_end)
        try:
            lines = [repr(server)]
            for name, call in [("poll", server.poll), ("wait", lambda: server.wait(1)),
                               ("close", server.close)]:
                try:
                    call()
                    lines.append(f"{name}: no error")
                except childguard.InheritedError as e:
                    lines.append(f"{name}: InheritedError: {e}")
                except BaseException as e:  # noqa: B036
                    lines.append(f"{name}: {type(e).__name__}: {e}")
            os.write(write_end, "\n".join(lines).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        ready = select.select([read_end], [], [], 30)[0]
        out = b""
        if ready:
            while True:
                chunk = os.read(read_end, 65536)
                if not chunk:
                    break
                out += chunk
    finally:
        os.close(read_end)
        if not ready:
            os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
    assert ready, "the forked child hung on its copy of the Server"
    lines = out.decode().splitlines()
    print("\n".join(lines))
    assert "inherited from process" in lines[0]
    for name, line in zip(["poll", "wait", "close"], lines[1:]):
        assert line.startswith(f"{name}: InheritedError: "), line
        assert "inherited through os.fork()" in line and f"process {os.getpid()}" in line
    # The parent's server is untouched.
    assert server.poll() is None and alive(server.pid or 0)
    server.close()
    waiter.join(30)
