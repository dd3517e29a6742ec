"""Tasks per second through Redis Streams, end to end and drain only, against redis-benchmark's XADD rate and
a Dramatiq peer, all on one redis-server measured in the same run.

One ``redis-server`` on a free loopback port (no persistence) serves the whole run.

Baseline: ``redis-benchmark xadd chaosd-bench * i 1`` (50 clients, no pipelining; the ``-t`` list of Redis 7.0 has
no xadd): one XADD per round trip, the plainest thing a producer can do. It runs before and after the chaosd
and peer rows; the ratios are against the mean of the two, and both are printed.

End to end (the headline): ``run_offline(virtual=False)`` with backend redis, the daemon's own path: 4 producers
offering constant arrivals far above what the pipeline can take into a ``block`` queue of capacity 4,000 (the
producers wait for room, so the rate is what the pipeline sustains), admission by the ADMIT script, 4 ``chaosd
worker`` processes (``batch`` 16, one zero-time stage), the monitor reading the results back into the ledger.
Tasks/s is the report's ``completed_per_s`` (completions the ledger booked per second after the warm-up). Checked:
no task lost or duplicated in the report, the sink deduplicated nothing, one result per task id in Redis.

Peer: Dramatiq (``pip install '.[bench]'``) with its Redis broker on the same server, 4 worker processes (``dramatiq
--processes 4``, default threads) and a zero-work actor whose one effect is an INCR. "concurrent": the bench sends N
messages from 4 threads (``actor.send``, one round trip each, as an application does; 4 as chaosd's 4 producers)
while the workers are serving them; tasks/s from the first send to the N-th effect. "drain": N messages enqueued
first, then the workers started; tasks/s from the first effect to the N-th. Skipped, and said so, when Dramatiq is
missing.

Drain only: W ``chaosd worker`` processes start and beat, then the stream is filled with N tasks through the
admission script (500 a call, several times faster than the drain, so it overlaps only its start) and the workers
drain it (read ``XREADGROUP COUNT batch``, one zero-time stage, settled by the sink script in the same pipeline as
the next read); tasks/s between the first and the last result; round trips per task count every pipeline the
workers sent (heartbeats included) over N.

    python bench/redis_throughput.py            # N = 40000 per drain run, 10 s end to end
    python bench/redis_throughput.py --quick    # N = 10000, 4 s end to end
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import redis

from chaosd.backends.redis.scripts import ADMIT
from chaosd.config.settings import Settings
from chaosd.experiment.runner import run_offline

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ((1, 1), (1, 16), (2, 16), (4, 16))  # (worker processes, XREADGROUP COUNT)
FILL_BATCH = 500
SENDERS = 4  # threads sending to the Dramatiq peer


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
    """N tasks through the admission script, FILL_BATCH per call; tasks admitted per second."""
    admit = client.register_script(ADMIT)
    start = time.perf_counter()
    now = repr(time.time())
    for first in range(0, n, FILL_BATCH):
        args: list[str | int] = ["chaosd-workers", capacity]
        for i in range(first, min(n, first + FILL_BATCH)):
            args.append(f"i {i} r 1 o {now} a {now} m 1 n 0")
        replies = admit(keys=["chaosd:tasks"], args=args)
        assert all(isinstance(r, str) for r in replies), "admission refused a task"
    return n / (time.perf_counter() - start)


def end_to_end(url: str, duration: float, warmup: float) -> dict[str, float]:
    """The daemon's path, producers to ledger (see the module's doc); raises SystemExit when a check fails."""
    client = redis.Redis.from_url(url, decode_responses=True)
    client.flushall()
    settings = Settings.model_validate(
        {
            "seed": 1,
            "backend": {"kind": "redis", "url": url, "batch": 16},
            "workers": {"count": 4},
            "load": {"rate": 1e6, "producers": 4, "arrival": "constant"},
            "queue": {"capacity": 4000, "when_full": "block"},
            "stages": [{"name": "work", "service": {"distribution": "constant", "mean": 0.0}}],
        }
    )
    report = run_offline(settings, duration=duration, warmup=warmup, virtual=False)
    tasks = report["tasks"]
    results = client.xrange("chaosd:results")
    ids = [fields["i"] for _, fields in results]
    stats = client.hgetall("chaosd:stats")
    client.close()
    deduplicated = int(stats.get("deduplicated", 0))
    if tasks["lost_all_cohorts"] or tasks["duplicated"] or deduplicated or len(set(ids)) != len(ids):
        raise SystemExit(
            f"CHECK FAILED: lost {tasks['lost_all_cohorts']}, duplicated {tasks['duplicated']}, deduplicated "
            f"{deduplicated}, {len(ids) - len(set(ids))} task ids with two results"
        )
    trips = sum(int(v) for k, v in stats.items() if k.startswith("round_trips:"))
    return {
        "tasks_per_s": report["throughput"]["completed_per_s"],
        "results": len(ids),
        "worker_trips_per_task": trips / max(1, len(ids)),
    }


def _peer_workers(url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CHAOSD_PEER_URL": url}
    return subprocess.Popen(
        [sys.executable, "-m", "dramatiq", "_dramatiq_peer", "--processes", "4"],
        cwd=ROOT / "bench",
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_done(client: redis.Redis, n: int, timeout: float) -> float:
    """Until the peer's counter reaches n; the time it did."""
    deadline = time.monotonic() + timeout
    while int(client.get("peer:done") or 0) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"the Dramatiq workers did {client.get('peer:done')} of {n} tasks in {timeout:.0f} s")
        time.sleep(0.002)
    return time.perf_counter()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _send(actor: Any, ids: range) -> None:
    for i in ids:
        actor.send(i)


def dramatiq_peer(url: str, n: int) -> dict[str, float] | None:
    """Dramatiq's tasks/s, concurrent (sent while served) and drain (sent first); None when it is not installed."""
    try:
        import dramatiq  # noqa: F401, PLC0415  # the optional peer: the bench runs without it
    except ImportError:
        return None
    sys.path.insert(0, str(ROOT / "bench"))
    os.environ["CHAOSD_PEER_URL"] = url
    import _dramatiq_peer as peer  # noqa: PLC0415  # configures the broker for this URL

    client = redis.Redis.from_url(url)
    client.flushall()
    procs = _peer_workers(url)
    try:
        peer.zero.send(-1)  # the workers are up once this one is done
        _wait_done(client, 1, 60)
        client.set("peer:done", 0)
        began = time.perf_counter()
        with ThreadPoolExecutor(SENDERS) as senders:  # as chaosd's 4 producers: 4 round trips in flight
            for k in range(SENDERS):
                senders.submit(_send, peer.zero, range(k, n, SENDERS))
        send_rate = n / (time.perf_counter() - began)
        concurrent = n / (_wait_done(client, n, 300) - began)
    finally:
        _stop(procs)
    client.flushall()
    start = time.perf_counter()
    for i in range(n):
        peer.zero.send(i)
    enqueue = n / (time.perf_counter() - start)
    client.set("peer:done", 0)
    procs = _peer_workers(url)
    try:
        first = _wait_done(client, 1, 60)  # from the first effect on: the processes' start-up is not the drain
        done = _wait_done(client, n, 300)
    finally:
        _stop(procs)
    effects = int(client.get("peer:done") or 0)
    client.close()
    if effects != n:
        raise SystemExit(f"CHECK FAILED: the Dramatiq workers had {effects} effects for {n} tasks")
    return {
        "concurrent": concurrent,
        "send_rate": send_rate,
        "drain": (n - 1) / max(done - first, 1e-3),
        "enqueue": enqueue,
    }


def drain(url: str, tmp: Path, n: int, workers: int, batch: int) -> dict[str, float]:
    client = redis.Redis.from_url(url, decode_responses=True)
    client.flushall()
    client.xgroup_create("chaosd:tasks", "chaosd-workers", id="0", mkstream=True)
    path = tmp / f"settings-{workers}-{batch}.json"
    path.write_text(json.dumps(settings(url, batch, workers)))
    ids = [f"worker-{i}" for i in range(workers)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "chaosd", "worker", "--settings-json", str(path), "--id", agent],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        for agent in ids
    ]
    try:
        deadline = time.monotonic() + 300
        while not all(client.exists(f"chaosd:hb:{agent}") for agent in ids):  # no worker drains alone
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not start")
            time.sleep(0.01)
        admitted = fill(client, n, 10_000_000)
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
    parser.add_argument("--quick", action="store_true", help="10000 tasks per drain run, 4 s end to end")
    parser.add_argument("-n", type=int, default=None, help="tasks per run")
    args = parser.parse_args()
    n = args.n or (10_000 if args.quick else 40_000)
    duration, warmup = (4.0, 1.0) if args.quick else (10.0, 2.0)
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
            base_n = max(n * 5, 50_000)
            before = xadd_baseline(port, base_n)
            e2e = end_to_end(url, duration, warmup)
            drains = {(w, b): drain(url, Path(tmp), n, w, b) for w, b in CONFIGS}
            peer = dramatiq_peer(url, n)
            after = xadd_baseline(port, base_n)
        finally:
            server.terminate()
            server.wait(timeout=10)
    baseline = (before + after) / 2
    print(
        f"redis-benchmark xadd: {baseline:,.0f} XADD/s (50 clients, one command per round trip; "
        f"{before:,.0f} before, {after:,.0f} after)"
    )
    rate = e2e["tasks_per_s"]
    print(
        f"end to end, daemon + 4 workers (batch 16): {rate:,.0f} tasks/s ({rate / baseline:.3f} × XADD) · "
        f"{e2e['results']:,} results, none lost or duplicated · "
        f"{e2e['worker_trips_per_task']:.3f} worker round trips/task"
    )
    drained = drains[4, 16]["tasks_per_s"]
    if peer is None:
        print("Dramatiq peer: skipped (not installed: pip install '.[bench]')")
    else:
        print(
            f"Dramatiq, 4 processes, concurrent: {peer['concurrent']:,.0f} tasks/s (sent at {peer['send_rate']:,.0f}/s)"
            f" · chaosd end to end {rate / peer['concurrent']:.2f}× it"
        )
        print(
            f"Dramatiq, 4 processes, drain: {peer['drain']:,.0f} tasks/s (enqueued at {peer['enqueue']:,.0f}/s) · "
            f"chaosd's 4 × 16 drain {drained / peer['drain']:.2f}× it"
        )
    print(f"drain only, {n:,} tasks per run; one zero-time stage; one effect per task, no duplicate")
    for (workers, batch), r in drains.items():
        print(
            f"workers={workers} batch={batch:>2}: {r['tasks_per_s']:>8,.0f} tasks/s "
            f"({r['tasks_per_s'] / baseline:.3f} × XADD) · {r['round_trips_per_task']:.3f} round trips/task "
            f"· admission {r['admitted_per_s']:,.0f} tasks/s"
        )


if __name__ == "__main__":
    main()
