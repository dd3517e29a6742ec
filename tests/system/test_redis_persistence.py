"""Redis restarted under the pipeline: with ``appendonly yes`` + ``appendfsync always`` no accepted task is lost;
without persistence the ledger names exactly the tasks that were in the stream when Redis died."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import redis
from redis_harness import RedisServer, redis_settings
from test_redis_backend import QUIET, experiment, until

from chaosd.backends.redis.runtime import RedisRuntime
from chaosd.config.settings import load_settings
from chaosd.experiment.runner import Experiment

pytestmark = pytest.mark.timeout(120)

# 80 tasks/s for 1.5 s, then nothing: the stream stops changing once the workers are stopped.
LOAD = {"rate": 80.0, "phases": [{"type": "step", "at": 1.5, "rate": 0.0}]}


def stream_tasks(client: redis.Redis) -> set[int]:
    return {int(fields["i"]) for _, fields in client.xrange("chaosd:tasks")}


def crash_redis(server: RedisServer, tmp_path: Path, *, persistent: bool) -> dict[str, Any]:
    """Stop the workers with tasks in the stream, SIGKILL Redis and the workers, start Redis again."""
    settings = load_settings(None, redis_settings(server.url, **{**QUIET, "load": LOAD}))
    client = redis.Redis.from_url(server.url, decode_responses=True)
    seen: dict[str, Any] = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        rt = p.host
        assert isinstance(rt, RedisRuntime)
        ledger = p.ledger
        await until(exp, lambda: ledger.total.completed >= 20, 10, "some completions")
        pids = [pid for w in p.workers if (pid := rt.pid(w.agent.id)) is not None]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)  # they hold what they read; the stream keeps the rest
        await until(exp, lambda: p.elapsed() > 2.0, 10, "the producers to go quiet")
        await rt.refresh()
        in_stream = stream_tasks(client)
        assert in_stream, "the test needs tasks in the stream when Redis dies"
        assert set(ledger.in_flight) == in_stream  # the books agree with Redis before the crash
        seen["in_stream"] = in_stream
        seen["accepted"] = ledger.total.accepted
        server.kill()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)  # a worker's task in hand dies with it (the supervisor restarts them)
        server.start(persistent=persistent)
        if persistent:
            await until(exp, lambda: not ledger.in_flight, 20, "every accepted task to complete")
        else:

            def reported() -> bool:
                held = {t.id for t in rt.holders()}
                return {tid for tid in ledger.in_flight if tid not in held} == in_stream

            await until(exp, lambda: rt.lease.holder is not None, 10, "a leader after the restart")
            await rt.refresh()
            await until(exp, reported, 10, "the ledger to report the lost tasks")
        await rt.refresh()
        seen["lost"] = p.ledger.unaccounted(rt.holders())
        exp.stop.set()

    report, _ = experiment(settings, 60.0, 0.5, plan)
    seen["report"] = report
    seen["results"] = [fields["i"] for _, fields in client.xrange("chaosd:results")]
    client.close()
    return seen


def test_with_aof_always_no_accepted_task_is_lost(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, persistent=True)
    server.start()
    try:
        seen = crash_redis(server, tmp_path, persistent=True)
    finally:
        server.kill()
    report = seen["report"]
    assert seen["lost"][0] == 0
    assert report["tasks"]["lost_all_cohorts"] == 0 and report["tasks"]["duplicated"] == 0
    assert report["tasks"]["in_flight"] == 0
    # Every task that was in the stream when Redis died took effect once, after the restart.
    done = seen["results"]
    assert len(done) == len(set(done))
    assert seen["in_stream"] <= {int(i) for i in done}


def test_without_persistence_the_ledger_reports_exactly_what_was_lost(tmp_path: Path) -> None:
    server = RedisServer(tmp_path, persistent=False)
    server.start()
    try:
        seen = crash_redis(server, tmp_path, persistent=False)
    finally:
        server.kill()
    report = seen["report"]
    lost = len(seen["in_stream"])
    assert seen["lost"][0] == lost
    assert report["tasks"]["lost_all_cohorts"] == lost  # never hidden: the report says so too
    tasks = report["tasks"]
    assert tasks["accepted"] == tasks["completed"] + tasks["failed"] + tasks["in_flight"] + tasks["lost"]
    assert tasks["lost"] >= 1  # the measured cohort (after the warm-up) among them
