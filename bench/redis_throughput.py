"""Tasks per second through Redis Streams with 1, 2 and 4 worker processes, against redis-benchmark's XADD rate.

One ``redis-server`` on a free loopback port (no persistence) serves the whole run.

Baseline, measured in the same run: ``redis-benchmark xadd chaosd-bench * i 1`` (50 clients, no pipelining;
the ``-t`` list of Redis 7.0 has no xadd): one XADD per round trip, the plainest thing a producer can do.

chaosd: the stream is filled with N tasks through the admission script (pipelined, 500 per round trip; its
rate is reported too), then W ``chaosd worker`` processes drain it. Each task is read (``XREADGROUP COUNT
batch``), walked through one zero-time stage, and settled by the sink script (SET NX, XACK, XDEL, result),
sent in the same pipeline as the next read. Throughput is tasks per second between the first and the last
result; round trips per task count every pipeline the workers sent (heartbeats included) over N.

    python bench/redis_throughput.py            # N = 20000 per run
    python bench/redis_throughput.py --quick    # N = 5000
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from chaosd.backends.redis_scripts import ADMIT

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ((1, 1), (1, 16), (2, 16), (4, 16))  # (worker processes, XREADGROUP COUNT)
FILL_BATCH = 500


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def xadd_baseline(port: int, n: int) -> float:
    out = subprocess.run(
        [
            "redis-benchmark",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-q",
            "-n",
            str(n),
            "xadd",
            "chaosd-bench",
            "*",
            "i",
            "1",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    found = re.findall(r"xadd[^:]*:\s*([\d.]+) requests per second", out.replace("\r", "\n"), re.IGNORECASE)
    if not found:
        raise SystemExit(f"cannot read redis-benchmark's output: {out!r}")
    return float(found[-1])


def settings(url: str, batch: int, workers: int) -> dict[str, Any]:
    return {
        "backend": {"kind": "redis", "url": url, "batch": batch},
        "workers": {"count": workers},
        "queue": {"capacity": 10_000_000},
        "stages": [{"name": "work", "service": {"distribution": "constant", "mean": 0.0}}],
    }


def fill(client: redis.Redis, n: int, capacity: int) -> float:
    """N tasks through the admission script, pipelined; tasks admitted per second."""
    admit = client.register_script(ADMIT)
    start = time.perf_counter()
    now = repr(time.time())
    for first in range(0, n, FILL_BATCH):
        pipe = client.pipeline(transaction=False)
        for i in range(first, min(n, first + FILL_BATCH)):
            fields = ["i", str(i), "r", "1", "o", now, "a", now, "m", "1", "n", "0"]
            admit(keys=["chaosd:tasks"], args=["chaosd-workers", capacity, *fields], client=pipe)
        replies = pipe.execute()
        assert all(isinstance(r, str) for r in replies), "admission refused a task"
    return n / (time.perf_counter() - start)


def drain(url: str, tmp: Path, n: int, workers: int, batch: int) -> dict[str, float]:
    client = redis.Redis.from_url(url, decode_responses=True)
    client.flushall()
    client.xgroup_create("chaosd:tasks", "chaosd-workers", id="0", mkstream=True)
    path = tmp / f"settings-{workers}-{batch}.json"
    path.write_text(json.dumps(settings(url, batch, workers)))
    admitted = fill(client, n, 10_000_000)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "chaosd", "worker", "--settings-json", str(path), "--id", f"worker-{i}"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        for i in range(workers)
    ]
    try:
        deadline = time.monotonic() + 300
        while client.xlen("chaosd:results") == 0:
            if time.monotonic() > deadline:
                raise SystemExit("no worker produced a result")
            time.sleep(0.005)
        while client.xlen("chaosd:results") < n:
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not finish")
            time.sleep(0.01)
        first = client.xrange("chaosd:results", count=1)[0][0]
        last = client.xrevrange("chaosd:results", count=1)[0][0]
        span = (int(last.split("-")[0]) - int(first.split("-")[0])) / 1000 or 1e-3
        time.sleep(0.3)  # one more heartbeat each: their round-trip counters
        stats = client.hgetall("chaosd:stats")
        trips = sum(int(v) for k, v in stats.items() if k.startswith("round_trips:"))
        duplicates = int(stats.get("deduplicated", 0))
        effects = client.xlen("chaosd:results")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)
        client.close()
    if effects != n or duplicates:
        raise SystemExit(f"CHECK FAILED: {effects} effects for {n} tasks, {duplicates} duplicates")
    return {"tasks_per_s": (n - 1) / span, "round_trips_per_task": trips / n, "admitted_per_s": admitted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5000 tasks per run instead of 20000")
    parser.add_argument("-n", type=int, default=None, help="tasks per run")
    args = parser.parse_args()
    n = args.n or (5000 if args.quick else 20_000)
    binary = shutil.which("redis-server")
    if binary is None or shutil.which("redis-benchmark") is None:
        raise SystemExit("needs redis-server and redis-benchmark (apt-get install redis-server)")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL,
        )
        try:
            url = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(url)
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            client.close()
            baseline = xadd_baseline(port, max(n * 5, 50_000))
            print(f"redis-benchmark xadd: {baseline:,.0f} XADD/s (50 clients, one command per round trip)")
            print(f"tasks per run: {n:,}; one zero-time stage; results checked: one effect per task, no duplicate")
            for workers, batch in CONFIGS:
                r = drain(url, Path(tmp), n, workers, batch)
                print(
                    f"workers={workers} batch={batch:>2}: {r['tasks_per_s']:>8,.0f} tasks/s "
                    f"({r['tasks_per_s'] / baseline:.3f} × XADD) · {r['round_trips_per_task']:.3f} round trips/task "
                    f"· admission {r['admitted_per_s']:,.0f} tasks/s"
                )
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
