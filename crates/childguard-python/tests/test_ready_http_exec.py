"""childguard.Http and childguard.Exec (issue 23 item 3) against a real HTTP server on a Unix
socket (tests/src/http_server.py of the repository) bad input. (pg_isready: test_databases.py.)"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import childguard
from conftest import REPO

SERVER = str(REPO / "tests" / "src" / "http_server.py")


def url_of(sock: Path, path: str = "/") -> str:
    return "http+unix://" + str(sock).replace("/", "%2F") + path


def server(sock: Path, status: str, after: str = "0") -> list:
    return [sys.executable, "-u", SERVER, f"unix:{sock}", status, after]


def get(sock: Path) -> str:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(str(sock))
    s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    s.close()
    return data.split(b"\r\n", 1)[0].decode()


def test_http_on_a_unix_socket_is_ready_when_it_answers(tmp_path: Path) -> None:
    sock = tmp_path / "s.sock"
    start = time.monotonic()
    with childguard.spawn(server(sock, "200", "0.3"), ready=childguard.Http(url_of(sock, "/health")),
                          ready_timeout=30, ladder="KILL:1s", stdout=subprocess.DEVNULL) as srv:
        assert time.monotonic() - start >= 0.3
        assert " 200 " in get(sock)  # first try: it answers already
        assert srv.poll() is None


def test_http_503_is_not_ready_and_the_error_quotes_it(tmp_path: Path) -> None:
    sock = tmp_path / "s.sock"
    with pytest.raises(childguard.ReadyError) as caught:
        childguard.spawn(server(sock, "503"), ready=childguard.Http(url_of(sock)),
                         ready_timeout=4, ladder="KILL:1s", stdout=subprocess.DEVNULL)
    text = str(caught.value)
    assert "HTTP/1.0 503 Chosen" in text and "last attempt" in text, text
    sock.unlink()
    with childguard.spawn(server(sock, "503"), ready=childguard.Http(url_of(sock), status=503),
                          ladder="KILL:1s", stdout=subprocess.DEVNULL):
        assert " 503 " in get(sock)


def test_exec_probe_and_combinations(tmp_path: Path) -> None:
    sock = tmp_path / "s.sock"
    ready = childguard.AllOf(childguard.Exec(["test", "-S", str(sock)]),
                             childguard.Http(url_of(sock)), childguard.Output("listening"))
    with childguard.spawn(server(sock, "200", "0.2"), ready=ready, ladder="KILL:1s"):
        assert " 200 " in get(sock)


def test_exec_that_never_passes_has_its_output_in_the_error(slowserver: str) -> None:
    probe = childguard.Exec(["sh", "-c", "echo py-probe-said-5; exit 6"])
    with pytest.raises(childguard.ReadyError) as caught:
        childguard.spawn([slowserver, "--ignore-eof"], ready=probe, ready_timeout=4,
                         ladder="KILL:1s", stdin=subprocess.DEVNULL)
    text = str(caught.value)
    assert "exit status: 6" in text and "py-probe-said-5" in text, text


@pytest.mark.parametrize("make, needle", [
    (lambda: childguard.Http(""), "non-empty str"),
    (lambda: childguard.Http("http://x/", status=42), "100-999"),
    (lambda: childguard.Exec([]), "needs a program"),
    (lambda: childguard.Exec("pg_isready -h /tmp"), "a list of arguments"),
    (lambda: childguard.spawn(["true"], ready=childguard.Http("https://127.0.0.1/")), "no TLS"),
    (lambda: childguard.spawn(["true"], ready=childguard.Http("http://127.0.0.1:http/")),
     "http://127.0.0.1:http/"),
])
def test_bad_http_and_exec_input_is_a_config_error(make, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(childguard.ConfigError) as caught:
        make()
    assert needle in str(caught.value), str(caught.value)
