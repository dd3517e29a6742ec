"""The faults that act on a stage's own resources, on the Redis backend: ``memory_corrupt`` corrupts the entries
the daemon picked inside the worker processes, whose checksums and scrub restore them, and ``mcp_disconnect``
drops each worker's MCP connection, which reconnects with backoff; the daemon judges both from what the
heartbeats report. A stage's ``pressure`` reads the stream's backlog. Real Redis, real worker processes."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from redis_harness import RedisServer, redis_settings
from test_redis_backend import RECOVERY, experiment, server, shared_redis, until

from chaosd.backends.redis.runtime import RedisRuntime
from chaosd.config.settings import load_settings
from chaosd.experiment.runner import Experiment

pytestmark = pytest.mark.timeout(120)
__all__ = ["server", "shared_redis"]  # the fixtures, used by name

MEMORY = {"name": "mem", "kind": "memory", "service": {"distribution": "exponential", "mean": 0.003}}
RAW = {**MEMORY, "name": "raw", "checksums": False}  # the negative control: nothing catches its corruption
# Reconnect attempts 0.05 s after a drop, then doubling up to 0.5 s apart (the default cap is 2 s): a worker is back
# within half a second of the server coming up.
RECONNECT = {"base": 0.05, "factor": 2.0, "max": 0.5}
MCP = {"name": "ctx", "kind": "mcp", "service": {"distribution": "exponential", "mean": 0.003}, "reconnect": RECONNECT}
WORK = {"name": "work", "kind": "compute", "service": {"distribution": "exponential", "mean": 0.005}}


def beats(client: redis.Redis, field: str) -> dict[str, dict[str, list[Any]]]:
    """Each worker's heartbeat ``field`` (``memory`` or ``mcp``) as the process last wrote it."""
    out = {}
    for worker in ("worker-0", "worker-1"):
        text = client.hget(f"chaosd:hb:{worker}", field)
        if text:
            out[worker] = json.loads(text)
    return out


@pytest.mark.slow  # tens of seconds of real time
def test_memory_corrupt_and_mcp_disconnect_act_in_the_worker_processes(server: RedisServer) -> None:
    overlay = redis_settings(
        server.url,
        stages=[MEMORY, RAW, MCP, WORK],
        load={"rate": 60.0},
        recovery=RECOVERY,
        throttle={"enabled": False},
    )
    settings = load_settings(None, overlay)
    client = redis.Redis.from_url(server.url, decode_responses=True)
    seen: dict[str, Any] = {}

    async def judged(exp: Experiment, record: Any) -> str:
        await until(exp, lambda: record.outcome not in ("active", "recovering"), 30, f"a verdict on {record.action}")
        return str(record.outcome)

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        assert isinstance(p.host, RedisRuntime)
        await until(exp, lambda: (b := exp.injector.baseline()) is not None and b.goodput > 40, 15, "baseline")

        # memory_corrupt, on the stage with checksums and on the one without (the negative control).
        mem = exp.injector.inject("memory_corrupt", "mem", {"entries": 40}, 2.0)
        raw = exp.injector.inject("memory_corrupt", "raw", {"entries": 40}, 2.0)
        picked = set(p.corrupted("mem"))
        raw_picked = set(p.corrupted("raw"))
        assert len(picked) == len(raw_picked) == 40
        before = {w: doc["mem"][2] for w, doc in beats(client, "memory").items()}
        assert len(before) == 2
        seen["mem"] = await judged(exp, mem)
        # Each worker process restored the 40 entries in its own store (its checksums and scrub caught them).
        seen["restored"] = {w: doc["mem"][2] - before[w] for w, doc in beats(client, "memory").items()}
        seen["raw_restored"] = {w: doc["raw"][2] for w, doc in beats(client, "memory").items()}
        seen["mem_left"] = set(p.corrupted("mem"))
        seen["raw_left"] = set(p.corrupted("raw"))
        seen["raw_in_workers"] = {w: set(doc["raw"][1]) for w, doc in beats(client, "memory").items()}
        seen["raw_outcome"] = raw.outcome
        seen["undetected"] = (p.memory["mem"].undetected_reads, p.memory["raw"].undetected_reads)

        # A process started after the order has a fresh store: it does not carry out the order, and the daemon
        # still holds the entries the other process has corrupted.
        token = json.loads(client.get("chaosd:control:stages"))["stages"]["raw"]["corrupt"][0]
        pid = client.hget("chaosd:hb:worker-0", "pid")
        exp.injector.inject("kill_agent", "worker-0", {}, 1.0)

        def restarted() -> bool:
            beat = client.hgetall("chaosd:hb:worker-0")
            return beat.get("pid") not in (None, pid) and json.loads(beat["memory"])["raw"][0] == token

        await until(exp, restarted, 10, "a new worker-0 process that has read the stage document")
        seen["fresh"] = {w: set(doc["raw"][1]) for w, doc in beats(client, "memory").items()}
        await exp.pipeline.host.refresh()
        seen["raw_after_restart"] = set(p.corrupted("raw"))

        # mcp_disconnect for 1 s: each worker's connection drops, tasks fail meanwhile, it reconnects by itself.
        failed = p.stages["ctx"].failures.get("mcp_disconnected", 0)
        t0 = exp.clock.now()
        drop = exp.injector.inject("mcp_disconnect", "ctx", {"outage": 1.0}, 3.0)
        assert not p.mcp_connected("ctx")
        await until(exp, lambda: all(not d["ctx"][1] for d in beats(client, "mcp").values()), 3, "workers cut off")
        await until(exp, lambda: p.mcp_connected("ctx"), 10, "the connection back")
        seen["down_for"] = exp.clock.now() - t0
        seen["mcp_failed"] = p.stages["ctx"].failures.get("mcp_disconnected", 0) - failed
        seen["mcp"] = await judged(exp, drop)
        await until(exp, lambda: not drop.active, 5, "the first drop's TTL")

        # An outage longer than the TTL: the revert at the TTL brings the server up; the workers reconnect then.
        t1 = exp.clock.now()
        long = exp.injector.inject("mcp_disconnect", "ctx", {"outage": 600.0}, 1.5)
        await until(exp, lambda: not long.active, 5, "the TTL")
        seen["down_at_ttl"] = not p.mcp_connected("ctx")
        await until(exp, lambda: p.mcp_connected("ctx"), 10, "the reconnect after the revert")
        seen["reverted_after"] = exp.clock.now() - t1
        seen["long"] = await judged(exp, long)
        exp.stop.set()  # the plan is done: so is the run

    experiment(settings, 60.0, 0.0, plan)

    assert seen["mem"] == "recovered"  # judged from the heartbeats: the workers restored every entry
    assert seen["mem_left"] == set()
    assert seen["restored"] == {"worker-0": 40, "worker-1": 40}
    assert seen["raw_restored"] == {"worker-0": 0, "worker-1": 0}
    # Without checksums nothing catches it: the daemon and the workers still hold the entries corrupted.
    assert len(seen["raw_left"]) == 40 and seen["raw_outcome"] in ("active", "recovering")
    assert all(entries == seen["raw_left"] for entries in seen["raw_in_workers"].values())
    assert seen["fresh"] == {"worker-0": set(), "worker-1": seen["raw_left"]}
    assert seen["raw_after_restart"] == seen["raw_left"]
    # The tasks read the unrepaired entries, and the workers' counts of it reach the daemon's report.
    assert seen["undetected"][0] == 0 and seen["undetected"][1] > 0
    assert seen["mcp"] == "recovered" and seen["long"] == "recovered"
    assert seen["mcp_failed"] > 10  # at 60 tasks/s, about a second of tasks failed at the MCP stage
    assert 1.0 <= seen["down_for"] < 2.5  # the outage, then the backoff's next attempt (max 0.5 s) and a poll
    assert seen["down_at_ttl"]  # the long outage held until the revert
    assert 1.5 <= seen["reverted_after"] < 3.5


def pressure_run(server: RedisServer, rate: float, attempts: int) -> tuple[float, int]:
    """One worker of 50 tasks/s behind a 40-entry stream, pressure from half full; (failed share, attempts), read
    as soon as it has made ``attempts`` attempts."""
    stage = {
        "name": "work",
        "kind": "compute",
        "service": {"distribution": "exponential", "mean": 0.02},
        "pressure": {"enabled": True, "threshold": 0.5, "max_probability": 0.6},
    }
    overlay = redis_settings(
        server.url,
        stages=[stage],
        load={"rate": rate, "producers": 1},
        workers={"count": 1},
        queue={"capacity": 40},
        recovery=RECOVERY,
        throttle={"enabled": False},
    )
    result: dict[str, int] = {}

    async def plan(exp: Experiment) -> None:
        s = exp.pipeline.stages["work"]

        def tried() -> int:
            return s.successes + s.failures.get("error", 0)

        await until(exp, lambda: tried() >= attempts, 30, f"{attempts} attempts")
        result["failed"] = s.failures.get("error", 0)
        result["attempts"] = s.successes + result["failed"]
        exp.stop.set()

    experiment(load_settings(None, overlay), 60.0, 0.0, plan)
    return result["failed"] / max(1, result["attempts"]), result["attempts"]


@pytest.mark.slow  # two runs of a few seconds
def test_pressure_fires_on_a_filling_stream_and_not_on_a_draining_one(shared_redis: RedisServer) -> None:
    # Offered 150/s against 50/s: the stream fills to its capacity and stays there, so the stage fails at its
    # full max_probability. At 10/s the stream drains as it fills: no failure at all.
    # About 240 attempts put the share's standard deviation at 0.03; 25 with none failed is the control.
    filling, n_filling = pressure_run(shared_redis.emptied(), 150.0, 240)
    draining, n_draining = pressure_run(shared_redis.emptied(), 10.0, 25)
    assert n_filling > 100 and n_draining > 20
    assert 0.45 < filling < 0.7, filling
    assert draining == 0.0, draining
