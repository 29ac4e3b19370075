"""The pytest plugin, loaded the way a user gets it: through the wheel's pytest11 entry point
(the inner run has no conftest and no pytest_plugins line)."""

from __future__ import annotations


def test_server_fixture_declares_a_server_in_a_few_lines(pytester, slowserver):
    pytester.makepyfile(
        test_inner=f"""
        import os, childguard
        from childguard.pytest import server_fixture

        server = server_fixture(
            lambda d: [{slowserver!r}, "--ignore-eof", "--listen", str(d / "s.sock")],
            ready=lambda d: childguard.Connect(d / "s.sock"),
            ladder="TERM:5s,KILL:1s",
        )

        PIDS = []

        def test_uses_it(server):
            assert server.poll() is None and os.path.exists(server.cwd / "s.sock")
            PIDS.append(server.pid)

        def test_spawn_fixture(childguard_spawn):
            s = childguard_spawn([{slowserver!r}, "--ignore-eof"], socket="stdio")
            PIDS.append(s.pid)

        def test_both_were_closed():
            for pid in PIDS:
                assert not os.path.exists(f"/proc/{{pid}}"), pid
        """
    )
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*childguard: *slowserver*TERM*reaped*"])


def test_check_fails_a_teardown_that_leaves_an_escapee(pytester, slowserver):
    pytester.makepyfile(
        test_inner=f"""
        import os, signal

        def test_leaks(childguard_spawn):
            s = childguard_spawn([{slowserver!r}, "--workers", "1", "--setsid"],
                                 socket="stdio", process_group=True, ladder="TERM:1s,KILL:1s")
            line = s.socket.makefile("rb").readline()
            daemon = int(line.split(b"workers=")[1].split()[0])
            open("daemon.pid", "w").write(str(daemon))
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    try:
        result.assert_outcomes(passed=1, errors=1)
        result.stdout.fnmatch_lines(["*escaped its process group and still alive*"])
    finally:
        import os
        import signal

        pid_file = pytester.path / "daemon.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text())
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                pass
            else:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                os.close(fd)
