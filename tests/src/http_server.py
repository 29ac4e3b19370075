# A small HTTP/1.0 server for the readiness tests (tests/tests/ready_http.rs), on a Unix socket
# or a TCP port, whose answer the test chooses:
#
#   python3 -c "$(cat http_server.py)" unix:/path/s.sock|tcp:PORT MODE [AFTER]
#
# MODE: a status (200, 204, 503) for every GET; `garbage` (a line that is not HTTP);
# `silent` (accept, never answer); `silent-exit:N` (accept, then exit N after 0.3 s).
# AFTER: seconds to sleep before listening (the server "starts slowly").
# It prints `listening` once it listens, and one line per request it answered.
import os
import socket
import sys
import time

where, mode = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:
    time.sleep(float(sys.argv[3]))
if where.startswith("unix:"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(where[len("unix:"):])
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(where[len("tcp:"):])))
s.listen(64)
print("listening", flush=True)
held = []
while True:
    c, _ = s.accept()
    if mode == "silent":
        held.append(c)
        continue
    if mode.startswith("silent-exit:"):
        time.sleep(0.3)
        os._exit(int(mode.split(":")[1]))
    request = b""
    while b"\r\n\r\n" not in request:
        chunk = c.recv(4096)
        if not chunk:
            break
        request += chunk
    first = request.split(b"\r\n", 1)[0].decode(errors="replace")
    if mode == "garbage":
        c.sendall(b"SSH-2.0-not-http\r\n")
    else:
        body = b"ok\n"
        c.sendall(b"HTTP/1.0 %d Chosen\r\nContent-Length: %d\r\n\r\n%s" % (int(mode), len(body), body))
    print("answered", first, flush=True)
    c.close()
