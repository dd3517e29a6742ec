"""Faults that act inside the worker processes through their control hash and the stage document: a slowed
worker serves slower, dropped deliveries and a cut-off worker's tasks come back through lease expiry, a hung
tool degrades; every fault ends at its TTL and is judged recovered. Real Redis, real processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from redis_harness import redis_settings, running_redis
from test_redis_backend import RECOVERY, experiment, until

from chaosd.backends.redis_runtime import RedisPipeline
from chaosd.config import load_settings
from chaosd.runner import Experiment

pytestmark = pytest.mark.timeout(120)

STAGES = [
    {
        "name": "search",
        "kind": "tool",
        "service": {"distribution": "exponential", "mean": 0.004},
        "timeout": 0.03,
        "retries": 1,
        "breaker_threshold": 0,
    },
    {"name": "work", "kind": "compute", "service": {"distribution": "exponential", "mean": 0.01}},
]


def service_times(client: redis.Redis, worker: str, after: str) -> list[float]:
    return [float(f["e"]) - float(f["s"]) for _, f in client.xrange("chaosd:results", min=after) if f["w"] == worker]


def test_control_faults_act_in_the_worker_processes(tmp_path: Path) -> None:
    with running_redis(tmp_path) as server:
        overlay = redis_settings(
            server.url, stages=STAGES, load={"rate": 50.0}, recovery=RECOVERY, throttle={"enabled": False}
        )
        settings = load_settings(None, overlay)
        client = redis.Redis.from_url(server.url, decode_responses=True)
        seen: dict[str, Any] = {}

        async def verdict(exp: Experiment, action: str, target: str, params: dict[str, Any], ttl: float) -> str:
            record = exp.injector.inject(action, target, params, ttl)
            await until(exp, lambda: record.outcome not in ("active", "recovering"), 30, f"a verdict on {action}")
            return record.outcome

        async def plan(exp: Experiment) -> None:
            rt = exp.pipeline
            assert isinstance(rt, RedisPipeline)
            await until(exp, lambda: (b := exp.injector.baseline()) is not None and b.goodput > 40, 15, "baseline")
            mark = client.xrevrange("chaosd:results", count=1)[0][0]
            before = service_times(client, "worker-0", "-")
            record = exp.injector.inject("slow_agent", "worker-0", {"factor": 8}, 2.0)
            await until(exp, lambda: not record.active, 5, "the slowdown's TTL")
            seen["slow"] = (sum(before) / len(before), service_times(client, "worker-0", mark))
            await until(exp, lambda: record.outcome not in ("active", "recovering"), 30, "a verdict on slow_agent")
            seen["slow_agent"] = record.outcome
            seen["drop_messages"] = await verdict(exp, "drop_messages", "worker-1", {"probability": 0.5}, 2.0)
            seen["dropped"] = next(w.dropped for w in rt.workers if w.agent.id == "worker-1")
            seen["network_partition"] = await verdict(exp, "network_partition", "worker-0", {}, 3.0)
            degraded = rt.stages["search"].degraded
            seen["tool_timeout"] = await verdict(exp, "tool_timeout", "search", {}, 2.0)
            seen["degraded"] = rt.stages["search"].degraded - degraded
            await rt.refresh()
            exp.stop.set()

        report, _ = experiment(settings, 100.0, 0.5, plan)
        mean_before, during = seen["slow"]
        assert during and sum(during) / len(during) > 3 * mean_before, seen["slow"]  # slowed inside the process
        assert seen["dropped"] > 0  # deliveries dropped at the consumer ...
        for action in ("slow_agent", "drop_messages", "network_partition", "tool_timeout"):
            assert seen[action] == "recovered", (action, seen, report["faults"])
        assert seen["degraded"] > 0  # the hung tool was given up on inside the workers
        assert report["tasks"]["lost_all_cohorts"] == 0 and report["tasks"]["duplicated"] == 0
        assert report["runtime"]["lease_expired"] >= seen["dropped"]  # ... and brought back by lease expiry
        assert client.hget("chaosd:control:worker-0", "partitioned") == "0"  # every lever reverted
        assert client.hget("chaosd:control:worker-0", "slow") == "1.0"
        client.close()
