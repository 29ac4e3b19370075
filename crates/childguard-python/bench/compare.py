#!/usr/bin/env python3
"""childguard's Python package vs mirakuru and pytest-xprocess, side by side in one run.

    python compare.py [--reps N] [--slow-reps N] [--json] [--markdown]
                      [--slowserver PATH] [--redis PATH] [--timeout S]

Run in a venv holding the childguard wheel, mirakuru and pytest-xprocess (bench.sh makes one).
Prints the rows of `childguard-bench --json` (crates/bench/src/row.rs: scenario, metric,
ours, baseline, baseline_name, ratio = ours / baseline, unit; lower is better), one per line
with --json, else a table; the targets of issue 16's Must show are checked on stderr.

Scenarios (each library measured in the same run, interleaved rep by rep):
- py_redis: redis-server on a fresh TCP port. spawn→ready: from just before the call
  (childguard.spawn with Connect((host, port)) / mirakuru TCPExecutor.start() / xprocess
  ensure() with redis's log line) to its return. Redis's own readiness is measured in the same
  reps by a raw Popen and a connect() retried every 0.1 ms; the detection delay is a
  library's median spawn→ready minus that median. stop: close() / stop() / terminate(), redis
  ending on TERM.
- py_term_ignored: slowserver --ignore HUP,TERM: childguard's ladder TERM:500ms,KILL:1s vs
  mirakuru's stop() (timeout=--timeout, it then KILLs) and xprocess' terminate(timeout=...).
- py_escapee: slowserver --daemonize (double fork + setsid; the daemon ignores HUP and TERM):
  processes of the run still alive after the stop (a unique environment tag, looked up in
  /proc/*/environ, after a 1 s settling wait). childguard with contain=True.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import re
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import types
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import childguard

REPO = Path(__file__).resolve().parents[3]
TAG = "CHILDGUARD_BENCH_TAG"
MUST_DELAY_RATIO = 0.2
MUST_STOP_RATIO = 0.2


def ms(seconds: float) -> float:
    return seconds * 1000.0


def median(xs: List[float]) -> float:
    return statistics.median(xs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def row(scenario: str, metric: str, ours: float, baseline: float, name: str, unit: str) -> Dict:
    ratio = ours / baseline if baseline else None
    return {
        "scenario": scenario,
        "metric": metric,
        "ours": round(ours, 3),
        "baseline": round(baseline, 3),
        "baseline_name": name,
        "ratio": float(f"{ratio:.3e}") if ratio is not None else None,
        "unit": unit,
    }


# --- redis ----------------------------------------------------------------------------------


def redis_argv(redis: str, port: int, d: str, notify: bool = False,
               log: Optional[str] = None) -> List[str]:
    argv = [redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
            "no", "--dir", d]
    argv += ["--logfile", log] if log else []
    return argv + (["--supervised", "systemd"] if notify else [])


READY_LINE = re.compile(rb"(\d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2}\.\d{3}) \* Ready to accept connections")


def redis_ready_at(log: str) -> float:
    """When redis itself was ready: the wall-clock time of its "Ready to accept connections"
    log line (ms resolution, local time), as a time.time() value."""
    with open(log, "rb") as f:
        found = READY_LINE.search(f.read())
    assert found, f"no ready line in {log}"
    stamp = datetime.datetime.strptime(found.group(1).decode(), "%d %b %Y %H:%M:%S.%f")
    return stamp.timestamp()


def delay_ms(log: str, seen_at: float) -> float:
    """How long after redis's own readiness the library returned. The log's stamp is truncated
    to the ms, so this reads up to 1 ms high."""
    return ms(seen_at - redis_ready_at(log))


def wait_port(port: int, deadline: float) -> None:
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"port {port} never accepted")
            time.sleep(0.0001)


Timing = Tuple[float, float, float]  # spawn→ready (s), stop (s), detection delay (ms)


def logfile(d: str) -> str:
    return os.path.join(d, f"redis-{uuid.uuid4().hex}.log")


def raw_redis(redis: str, d: str) -> Timing:
    """No library: a plain Popen and a connect() retried every 0.1 ms; terminate() + wait()."""
    port, log = free_port(), logfile(d)
    began = time.monotonic()
    p = subprocess.Popen(redis_argv(redis, port, d, log=log), stdout=subprocess.DEVNULL)
    wait_port(port, began + 30)
    seen = time.time()
    ready = time.monotonic() - began
    began = time.monotonic()
    p.terminate()
    p.wait()
    return ready, time.monotonic() - began, delay_ms(log, seen)


def childguard_redis(redis: str, d: str, notify: bool) -> Timing:
    port, log = free_port(), logfile(d)
    ready = childguard.Notify() if notify else childguard.Connect(("127.0.0.1", port))
    began = time.monotonic()
    server = childguard.spawn(redis_argv(redis, port, d, notify, log), ready=ready,
                              ladder="TERM:5s,KILL:1s", stdout=subprocess.DEVNULL)
    seen = time.time()
    up = time.monotonic() - began
    socket.create_connection(("127.0.0.1", port), timeout=1).close()  # really ready
    began = time.monotonic()
    report = server.close()
    down = time.monotonic() - began
    assert report.ending_signal == "TERM", report
    return up, down, delay_ms(log, seen)


def mirakuru_redis(redis: str, d: str) -> Timing:
    from mirakuru import TCPExecutor

    port, log = free_port(), logfile(d)
    ex = TCPExecutor(redis_argv(redis, port, d, log=log), host="127.0.0.1", port=port,
                     timeout=30)
    began = time.monotonic()
    ex.start()
    seen = time.time()
    up = time.monotonic() - began
    began = time.monotonic()
    ex.stop()
    return up, time.monotonic() - began, delay_ms(log, seen)


class Quiet:
    def debug(self, msg, *args) -> None:
        pass


def xprocess_session(d: str):
    from py.path import local
    from xprocess import XProcess

    return XProcess(types.SimpleNamespace(), local(d), log=Quiet())


def xprocess_redis(redis: str, d: str, n: int) -> Timing:
    from xprocess import ProcessStarter

    port = free_port()

    class Starter(ProcessStarter):
        pattern = "Ready to accept connections"
        args = redis_argv(redis, port, d)
        timeout = 30

    xp = xprocess_session(d)
    name = f"redis{n}"
    began = time.monotonic()
    xp.ensure(name, Starter)
    seen = time.time()
    up = time.monotonic() - began
    began = time.monotonic()
    info = xp.getinfo(name)
    info.terminate(timeout=30)
    down = time.monotonic() - began
    for r in xp.resources:
        r.release()
    # xprocess reads redis's log on its stdout: the same line, in its own log file.
    return up, down, delay_ms(str(info.logpath), seen)


# --- slowserver -----------------------------------------------------------------------------


def tagged_alive(tag: str) -> List[int]:
    """Pids of live (not zombie) processes whose environment holds TAG=tag."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for environ in glob.glob("/proc/[0-9]*/environ"):
        pid = int(environ.split("/")[2])
        try:
            with open(environ, "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(pid)
    return found


def leftovers_after(tag: str) -> List[int]:
    """Tagged processes still alive after a 1 s settling wait (a dying one gets that long)."""
    deadline = time.monotonic() + 1.0
    while True:
        alive = tagged_alive(tag)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def kill_tagged(tag: str) -> None:
    for pid in tagged_alive(tag):
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        os.close(fd)


def tagged_env(tag: str) -> Dict[str, str]:
    return {**os.environ, TAG: tag}


def slow_stop(lib: str, argv: List[str], tag: str, d: str, timeout: float, n: int,
              contain: bool = False) -> float:
    """Starts slowserver (ready on its READY line), stops it; the stop's seconds."""
    env = tagged_env(tag)
    if lib == "childguard":
        server = childguard.spawn(argv, env=env, ready=childguard.Output("READY pid="),
                                  ladder="TERM:500ms,KILL:1s", contain=contain,
                                  stdin=subprocess.DEVNULL)
        began = time.monotonic()
        server.close()
        return time.monotonic() - began
    if lib == "mirakuru":
        from mirakuru import OutputExecutor

        ex = OutputExecutor(argv, banner="READY pid=", timeout=timeout, envvars={TAG: tag},
                            stdin=subprocess.DEVNULL)
        ex.start()
        began = time.monotonic()
        ex.stop()
        return time.monotonic() - began
    from xprocess import ProcessStarter

    class Starter(ProcessStarter):
        pattern = "READY pid="
        args = argv
        popen_kwargs = {"stdin": subprocess.DEVNULL}

    Starter.env = env
    xp = xprocess_session(d)
    name = f"slow{n}"
    xp.ensure(name, Starter)
    began = time.monotonic()
    xp.getinfo(name).terminate(timeout=timeout)
    took = time.monotonic() - began
    for r in xp.resources:
        r.release()
    return took


# --- main -----------------------------------------------------------------------------------


def find(path: Optional[str], candidates: List[str], what: str) -> str:
    for c in ([path] if path else []) + candidates:
        if c and os.path.isfile(c):
            return c
    sys.exit(f"compare.py: no {what} (tried {candidates}); pass its path")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=20, help="redis reps per library (default 20)")
    ap.add_argument("--slow-reps", type=int, default=3,
                    help="reps of the TERM-ignoring stop (each costs mirakuru/xprocess --timeout)")
    ap.add_argument("--timeout", type=float, default=5.0,
                    help="mirakuru's and xprocess' timeout for the TERM-ignoring server (s)")
    ap.add_argument("--json", action="store_true", help="one JSON row per line")
    ap.add_argument("--markdown", action="store_true", help="a markdown table")
    ap.add_argument("--slowserver")
    ap.add_argument("--redis")
    a = ap.parse_args()
    target = os.environ.get("CARGO_TARGET_DIR", str(REPO / "target"))
    slow = find(a.slowserver, [f"{target}/release/slowserver", f"{target}/debug/slowserver"],
                "slowserver (cargo build --release -p slowserver)")
    redis = find(a.redis, [shutil.which("redis-server") or "", "/usr/bin/redis-server"],
                 "redis-server (apt-get install redis-server)")
    names = {
        "mirakuru": f"mirakuru {version('mirakuru')}",
        "xprocess": f"pytest-xprocess {version('pytest-xprocess')}",
    }
    load = open("/proc/loadavg").read().split()[0]
    print(f"# childguard {childguard.__version__} vs {names['mirakuru']}, {names['xprocess']};"
          f" load {load}; redis reps {a.reps}, slow reps {a.slow_reps}", file=sys.stderr)
    rows = []
    work = tempfile.mkdtemp(prefix="cg-bench-")
    try:
        # py_redis, interleaved rep by rep, after one unmeasured warm-up of each.
        runs: Dict[str, Callable[[int], Timing]] = {
            "raw": lambda n: raw_redis(redis, work),
            "cg": lambda n: childguard_redis(redis, work, notify=False),
            "cg_notify": lambda n: childguard_redis(redis, work, notify=True),
            "mirakuru": lambda n: mirakuru_redis(redis, work),
            "xprocess": lambda n: xprocess_redis(redis, work, n),
        }
        t: Dict[str, List[Timing]] = {k: [] for k in runs}
        for n in range(a.reps + 1):
            for k, run in runs.items():
                timing = run(n)
                if n > 0:
                    t[k].append(timing)
        up = {k: ms(median([x[0] for x in v])) for k, v in t.items()}
        down = {k: ms(median([x[1] for x in v])) for k, v in t.items()}
        late = {k: median([x[2] for x in v]) for k, v in t.items()}
        print("# redis spawn->ready / detection delay after its own 'Ready' log line / stop, "
              "medians (ms): " + ", ".join(f"{k} {up[k]:.2f} / {late[k]:.2f} / {down[k]:.2f}"
                                           for k in t), file=sys.stderr)
        for base in ("mirakuru", "xprocess"):
            how = {"mirakuru": "TCPExecutor, polls connect every 0.1 s",
                   "xprocess": "log pattern, polls the log every 0.1 s"}[base]
            bname = f"{names[base]} ({how}; childguard: Connect)"
            rows.append(row("py_redis", "spawn_to_ready_ms", up["cg"], up[base], bname, "ms"))
            rows.append(row("py_redis", "ready_detection_delay_ms", late["cg"], late[base],
                            bname + "; after redis's own 'Ready to accept connections' log line",
                            "ms"))
            rows.append(row("py_redis", "stop_ms", down["cg"], down[base], bname, "ms"))
        rows.append(row("py_redis", "ready_detection_delay_ms", late["cg_notify"],
                        late["mirakuru"],
                        f"{names['mirakuru']} (TCPExecutor; childguard: Notify, READY=1)", "ms"))
        rows.append(row("py_redis", "ready_detection_delay_ms", late["cg"], late["raw"],
                        "no library: Popen + connect() every 0.1 ms (the floor)", "ms"))

        # py_term_ignored
        argv = [slow, "--ignore", "HUP,TERM", "--ignore-eof"]
        stops: Dict[str, List[float]] = {"childguard": [], "mirakuru": [], "xprocess": []}
        for n in range(a.slow_reps):
            for lib in stops:
                tag = uuid.uuid4().hex
                stops[lib].append(slow_stop(lib, argv, tag, work, a.timeout, n))
                kill_tagged(tag)
        for base in ("mirakuru", "xprocess"):
            rows.append(row("py_term_ignored", "stop_ms", ms(median(stops["childguard"])),
                            ms(median(stops[base])),
                            f"{names[base]} (timeout={a.timeout:g}; childguard: TERM:500ms,KILL:1s)",
                            "ms"))

        # py_escapee
        argv = [slow, "--daemonize", "--ignore-eof"]
        left: Dict[str, List[int]] = {"childguard": [], "mirakuru": [], "xprocess": []}
        for n in range(a.slow_reps):
            for lib in left:
                tag = uuid.uuid4().hex
                slow_stop(lib, argv, tag, work, a.timeout, 100 + n, contain=(lib == "childguard"))
                left[lib].append(len(leftovers_after(tag)))
                kill_tagged(tag)
        for base in ("mirakuru", "xprocess"):
            rows.append(row("py_escapee", "leftovers_after_stop", float(sum(left["childguard"])),
                            float(sum(left[base])),
                            f"{names[base]} ({a.slow_reps} stops of slowserver --daemonize; "
                            "childguard contain=True)", "processes"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    if a.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print("| scenario | metric | ours | baseline | baseline_name | ratio | unit |")
        print("|---|---|---:|---:|---|---:|---|")
        for r in rows:
            ratio = "–" if r["ratio"] is None else r["ratio"]
            print(f"| {r['scenario']} | {r['metric']} | {r['ours']:.3f} | {r['baseline']:.3f} | "
                  f"{r['baseline_name']} | {ratio} | {r['unit']} |")

    def get(scenario: str, metric: str, base: str = "mirakuru") -> Dict:
        return next(r for r in rows if r["scenario"] == scenario and r["metric"] == metric
                    and r["baseline_name"].startswith(names[base]))

    delays = [r for r in rows if r["metric"] == "ready_detection_delay_ms"
              and r["baseline_name"].startswith(names["mirakuru"])]
    checks = [
        ("redis detection delay <= 0.2x mirakuru (Connect and Notify)",
         all(r["ratio"] is not None and r["ratio"] <= MUST_DELAY_RATIO for r in delays)),
        ("redis stop <= 0.2x mirakuru", get("py_redis", "stop_ms")["ratio"] <= MUST_STOP_RATIO),
        ("TERM-ignoring stop bounded by the ladder (< 1.5 s) while mirakuru takes its timeout",
         get("py_term_ignored", "stop_ms")["ours"] < 1500
         and get("py_term_ignored", "stop_ms")["baseline"] >= ms(a.timeout)),
        ("0 escapees left by childguard", get("py_escapee", "leftovers_after_stop")["ours"] == 0),
    ]
    for what, ok in checks:
        print(f"# must show: {what}: {'met' if ok else 'NOT MET'}", file=sys.stderr)


if __name__ == "__main__":
    main()
