"""Faults that act inside the worker processes through their control hash and the stage document: a slowed
worker serves slower, dropped deliveries and a cut-off worker's tasks come back through lease expiry, a hung
tool degrades; a worker started by hand (not by the daemon) is listed once it beats, is paused through its
control hash and exits when killed. Every fault ends at its TTL and is judged recovered. Real Redis, real
processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from redis_harness import redis_settings, running_redis
from test_redis_backend import RECOVERY, experiment, until

from chaosd.backends.redis.process import EXIT_KILLED
from chaosd.backends.redis.runtime import RedisRuntime
from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
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
FAR = "worker-far"  # started by the test, as on another host: the daemon neither starts nor supervises it


def service_times(client: redis.Redis, worker: str, after: str) -> list[float]:
    return [float(f["e"]) - float(f["s"]) for _, f in client.xrange("chaosd:results", min=after) if f["w"] == worker]


def served_by(client: redis.Redis, worker: str) -> int:
    return sum(1 for _, f in client.xrange("chaosd:results") if f["w"] == worker)


class RemoteWorker:
    """``chaosd worker --id worker-far`` run by the test, which plays its supervisor (systemd, compose)."""

    def __init__(self, settings_json: Path, log: Path) -> None:
        self.command = [sys.executable, "-m", "chaosd", "worker", "--settings-json", str(settings_json), "--id", FAR]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdout=log, stderr=log)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.mark.slow  # tens of seconds of real time
def test_control_faults_act_in_the_worker_processes(tmp_path: Path) -> None:
    with running_redis(tmp_path) as server:
        overlay = redis_settings(
            server.url,
            stages=STAGES,
            load={"rate": 50.0},
            recovery=RECOVERY,
            throttle={"enabled": False},
            workers={"count": 1},  # worker-0, the daemon's; worker-far is the test's
        )
        settings = load_settings(None, overlay)
        settings_json = tmp_path / "far.json"
        settings_json.write_text(json.dumps(overlay))
        far = RemoteWorker(settings_json, tmp_path / "far.log")
        client = redis.Redis.from_url(server.url, decode_responses=True)
        seen: dict[str, Any] = {}

        async def judged(exp: Experiment, record: Any) -> str:
            await until(
                exp, lambda: record.outcome not in ("active", "recovering"), 30, f"a verdict on {record.action}"
            )
            return str(record.outcome)

        async def verdict(exp: Experiment, action: str, target: str, params: dict[str, Any], ttl: float) -> str:
            return await judged(exp, exp.injector.inject(action, target, params, ttl))

        async def plan(exp: Experiment) -> None:
            p = exp.pipeline
            rt = p.host
            assert isinstance(rt, RedisRuntime)
            far.start()
            await until(exp, lambda: FAR in p.agents and p.agents[FAR].alive, 15, "the remote worker listed")
            assert p.agents[FAR].kind == "worker" and not rt.is_local(FAR)
            await until(exp, lambda: (b := exp.injector.baseline()) is not None and b.goodput > 40, 15, "baseline")
            mark = client.xrevrange("chaosd:results", count=1)[0][0]
            before = service_times(client, "worker-0", "-")
            record = exp.injector.inject("slow_agent", "worker-0", {"factor": 8}, 1.0)
            await until(exp, lambda: not record.active, 5, "the slowdown's TTL")
            seen["slow"] = (sum(before) / len(before), service_times(client, "worker-0", mark))
            seen["slow_agent"] = await judged(exp, record)
            seen["drop_messages"] = await verdict(exp, "drop_messages", FAR, {"probability": 0.5}, 1.0)
            seen["dropped"] = p.dropped([FAR])
            seen["network_partition"] = await verdict(exp, "network_partition", "worker-0", {}, 1.5)
            degraded = p.stages["search"].degraded
            seen["tool_timeout"] = await verdict(exp, "tool_timeout", "search", {}, 1.0)
            seen["degraded"] = p.stages["search"].degraded - degraded
            # A pause reaches a remote worker as its control hash: it stops taking tasks until the TTL ends.
            record = exp.injector.inject("pause_agent", FAR, {}, 1.5)
            await until(exp, lambda: client.hget(f"chaosd:control:{FAR}", "paused") == "1", 1, "the pause written")
            await exp.clock.sleep(0.3)  # what it held when the pause arrived is done
            served = served_by(client, FAR)
            await exp.clock.sleep(0.8)  # still paused (TTL 1.5 s)
            seen["served_while_paused"] = served_by(client, FAR) - served
            seen["pause_agent"] = await judged(exp, record)
            # A kill asks the remote process to exit; its own supervisor (the test) starts it again.
            assert far.proc is not None
            record = exp.injector.inject("kill_agent", FAR, {}, 3.0)
            assert not p.agents[FAR].alive
            await until(exp, lambda: far.proc is not None and far.proc.poll() is not None, 2, "the remote exit")
            seen["exit"] = far.proc.returncode
            far.start()
            seen["kill_agent"] = await judged(exp, record)
            seen["restarts"] = p.agents[FAR].restart_count
            await rt.refresh()
            exp.stop.set()

        try:
            report, _ = experiment(settings, 120.0, 0.5, plan)
        finally:
            far.stop()
        mean_before, during = seen["slow"]
        assert during and sum(during) / len(during) > 3 * mean_before, seen["slow"]  # slowed inside the process
        assert seen["dropped"] > 0  # deliveries dropped at the remote consumer ...
        for action in ("slow_agent", "drop_messages", "network_partition", "tool_timeout", "pause_agent", "kill_agent"):
            assert seen[action] == "recovered", (action, seen, report["faults"])
        assert seen["degraded"] > 0  # the hung tool was given up on inside the workers
        assert seen["served_while_paused"] == 0
        assert seen["exit"] == EXIT_KILLED and seen["restarts"] == 1
        assert report["tasks"]["lost_all_cohorts"] == 0 and report["tasks"]["duplicated"] == 0
        assert report["runtime"]["lease_expired"] >= seen["dropped"]  # ... and brought back by lease expiry
        assert client.hget("chaosd:control:worker-0", "partitioned") == "0"  # every lever reverted
        assert client.hget("chaosd:control:worker-0", "slow") == "1.0"
        assert client.hget(f"chaosd:control:{FAR}", "paused") == "0"
        client.close()


def test_memory_and_mcp_faults_are_orders_in_the_stage_document() -> None:
    """The daemon's memory store and MCP connection are its copies: a fault changes them and puts an order in the
    stage document, with a token of its own, for each worker process to carry out once (test_redis_faults_more
    runs them on real processes)."""
    settings = load_settings(None, redis_settings("redis://127.0.0.1:1/0"))  # the default DAG: memory and mcp
    loop = new_event_loop(virtual=False)
    try:
        exp = Experiment(settings, LoopClock(loop), warmup=0.0, virtual=False)  # built, never started
        rt = exp.pipeline.host
        assert isinstance(rt, RedisRuntime)
        memory = next(name for name, s in exp.pipeline.stages.items() if s.kind == "memory")
        mcp = next(name for name, s in exp.pipeline.stages.items() if s.kind == "mcp")
        assert "corrupt" not in rt.controls.stages_doc() and "mcp_drop" not in rt.controls.stages_doc()
        first = exp.injector.inject("memory_corrupt", memory, {"entries": 3})
        exp.injector.inject("mcp_disconnect", mcp, {"outage": 2.0})
        doc = json.loads(rt.controls.stages_doc())["stages"]
        token, entries = doc[memory]["corrupt"]
        assert entries == sorted(exp.pipeline.corrupted(memory)) and len(entries) == 3
        assert doc[mcp]["mcp_drop"][1:] == [2.0, False] and not exp.pipeline.mcp_connected(mcp)
        exp.injector.revert(first.id)  # corruption outlives the fault: a second one's order names all five
        exp.injector.inject("memory_corrupt", memory, {"entries": 2})
        again = json.loads(rt.controls.stages_doc())["stages"][memory]["corrupt"]
        assert again[0] != token and len(again[1]) == 5
    finally:
        loop.close()
