"""Admission and settling on Redis in batches: producers do not wait for each answer, one script call admits many
tasks (and answers for each one), one call settles a worker's read. Real redis-server on loopback, real worker
processes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis
import redis_harness
from redis_harness import RedisServer, redis_settings

from chaosd.backends.redis.runtime import RedisRuntime
from chaosd.backends.redis.scripts import ADMIT, COMPLETE
from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment

pytestmark = pytest.mark.timeout(120)
shared_redis, server = redis_harness.shared_redis, redis_harness.server

ZERO = [{"name": "work", "service": {"distribution": "constant", "mean": 0.0}}]
OFF = {"enabled": False}


def _task(i: int) -> str:
    return f"i {i} r 1 o 1.0 a 1.0 m 1 n 0"


def test_one_admission_call_answers_each_task_and_stops_at_the_capacity(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url, decode_responses=True)
    admit = client.register_script(ADMIT)
    answers = admit(keys=["chaosd:tasks"], args=["g", 3, *(_task(i) for i in range(5))])
    assert [isinstance(a, str) for a in answers] == [True, True, True, False, False]
    assert answers[3:] == [0, 0]  # full: refused, not written
    assert client.xlen("chaosd:tasks") == 3
    assert [f["i"] for _, f in client.xrange("chaosd:tasks")] == ["0", "1", "2"]
    assert client.xrange("chaosd:tasks", count=1)[0][1] == {
        "i": "0",
        "r": "1",
        "o": "1.0",
        "a": "1.0",
        "m": "1",
        "n": "0",
    }
    # The bound is on waiting entries: two taken by a worker (pending) make room for two more, not three.
    client.xreadgroup("g", "w", {"chaosd:tasks": ">"}, count=2)
    again = admit(keys=["chaosd:tasks"], args=["g", 3, _task(7), _task(8), _task(6)])
    assert [isinstance(a, str) for a in again] == [True, True, False]
    assert client.xlen("chaosd:tasks") == 5
    # A write Redis refuses (out of memory) is that task's answer alone: -1, and nothing half-written.
    client.config_set("maxmemory", 1)
    try:
        refused = admit(keys=["chaosd:tasks"], args=["g", 100, _task(10), _task(11)])
    finally:
        client.config_set("maxmemory", 0)
    assert refused == [-1, -1]
    assert client.xlen("chaosd:tasks") == 5
    client.close()


def test_one_sink_call_settles_a_read_and_suppresses_the_duplicate_in_it(server: RedisServer) -> None:
    client = redis.Redis.from_url(server.url, decode_responses=True)
    client.xgroup_create("chaosd:tasks", "g", id="0", mkstream=True)
    entries = [client.xadd("chaosd:tasks", {"i": str(i)}) for i in range(3)]
    complete = client.register_script(COMPLETE)
    effects = ["fx:0", "fx:1", "fx:0"]  # the third is a second outcome of task 0
    args = ["g", "1", "60000", "worker 7"]  # an id with a space stays one field
    for entry, effect in zip(entries, effects, strict=True):
        args += [entry, f"i {effect[-1]} o - d 0 s 1.5 e 2.5"]
    applied = complete(keys=["chaosd:tasks", "chaosd:results", "chaosd:stats", *effects], args=args)
    assert applied == 2
    assert client.hget("chaosd:stats", "deduplicated") == "1"
    assert client.xlen("chaosd:tasks") == 0 and client.xpending("chaosd:tasks", "g")["pending"] == 0
    results = [f for _, f in client.xrange("chaosd:results")]
    assert results == [
        {"w": "worker 7", "i": "0", "o": "", "d": "0", "s": "1.5", "e": "2.5"},
        {"w": "worker 7", "i": "1", "o": "", "d": "0", "s": "1.5", "e": "2.5"},
    ]
    # The negative control: with the sink not idempotent the second outcome takes effect too.
    entries = [client.xadd("chaosd:tasks", {"i": "5"}) for _ in range(2)]
    args = ["g", "0", "60000", "w"]
    for entry in entries:
        args += [entry, "i 5 o - d 0 s 1 e 2"]
    assert complete(keys=["chaosd:tasks", "chaosd:results", "chaosd:stats", "fx:5", "fx:5"], args=args) == 2
    client.close()


def _saturated(url: str, when_full: str) -> dict[str, Any]:
    return redis_settings(
        url,
        stages=ZERO,
        workers={"count": 2},
        load={"rate": 1e6, "producers": 2, "arrival": "constant"},
        queue={"capacity": 500, "when_full": when_full},
        throttle={"enabled": False},
    ) | {"backend": {"kind": "redis", "url": url, "poll": 0.05, "batch": 16}}


@pytest.mark.parametrize("when_full", ["block", "reject"])
def test_producers_far_above_capacity_are_admitted_in_batches_and_block_waits_for_room(
    server: RedisServer, when_full: str
) -> None:
    # Producers offering a million tasks/s: with block they wait for room (nothing refused, nobody lost) and the
    # daemon's memory stays bounded; every admission round trip carries many tasks. reject is the control.
    settings = load_settings(None, _saturated(server.url, when_full))
    seen: dict[str, int] = {}

    async def plan(exp: Experiment) -> None:
        rt = exp.pipeline.host
        assert isinstance(rt, RedisRuntime)
        stream = rt.stream
        ledger = exp.pipeline.ledger
        up = exp.clock.now() + 20.0  # the worker processes start (seconds under the parallel suite)
        while ledger.total.completed == 0 and exp.clock.now() < up:
            await exp.clock.sleep(0.01)
        # A second (about 20 polls and tens of admission round trips), longer while the workers have served fewer
        # than 1,500 tasks (a host too busy to keep them at work).
        end, latest = exp.clock.now() + 1.0, exp.clock.now() + 10.0
        while exp.clock.now() < end or (ledger.total.completed < 1500 and exp.clock.now() < latest):
            seen["held"] = max(seen.get("held", 0), len(stream.submitting))
            seen["blocked"] = max(seen.get("blocked", 0), len(stream.blocked))  # a wait for room lasts a poll
            await exp.clock.sleep(0.01)
        seen["trips"] = stream.round_trips
        seen["offered"] = exp.pipeline.ledger.total.offered
        await rt.refresh()
        # Both cohorts: the tasks accepted in the first half second (the warm-up) can be all the workers served on
        # a busy host, which starts them late.
        total = ledger.total
        seen["completed"], seen["rejected"] = total.completed, total.rejected
        seen["queue_full"] = total.rejected_by.get("queue_full", 0)
        exp.stop.set()

    tasks = run_offline_with(settings, plan)["tasks"]
    assert tasks["lost_all_cohorts"] == 0 and tasks["duplicated"] == 0
    assert seen["completed"] > 1000, seen  # the workers were busy throughout
    assert seen["offered"] / seen["trips"] > 20, seen  # batched: tens of tasks per admission round trip
    assert seen["held"] <= 4096 + 2, seen  # the window: offers not answered yet, bounded whatever the rate
    if when_full == "block":
        assert seen["rejected"] == 0, seen
        assert seen["blocked"] >= 1, seen  # the stream was full, and producers waited for room
    else:
        assert seen["queue_full"] > 0, seen
        assert seen["blocked"] == 0, seen


def run_offline_with(settings: Settings, plan: Callable[[Experiment], Coroutine[Any, Any, None]]) -> dict[str, Any]:
    loop = new_event_loop(virtual=False)

    async def go() -> dict[str, Any]:
        return await Experiment(settings, LoopClock(loop), warmup=0.5, virtual=False).run(30.0, plan=plan)

    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


def test_scripts_redis_lost_are_loaded_again_and_no_task_is_refused_or_lost(server: RedisServer) -> None:
    # Scripts are sent by their SHA1 (no SCRIPT EXISTS round trip per batch): after SCRIPT FLUSH Redis answers
    # NOSCRIPT, and the daemon's admission and the workers' sink load them again and send the calls once more.
    settings = load_settings(
        None,
        redis_settings(server.url, stages=ZERO, workers={"count": 2}, load={"rate": 400.0}, throttle=OFF),
    )
    client = redis.Redis.from_url(server.url, decode_responses=True)
    seen: dict[str, int] = {}

    async def plan(exp: Experiment) -> None:
        ledger = exp.pipeline.ledger
        # Deadlines, not expectations: two worker processes start in well under a second on a quiet machine,
        # but in several under the parallel suite.
        end = exp.clock.now() + 12.0
        while ledger.total.completed < 200 and exp.clock.now() < end:
            await exp.clock.sleep(0.02)
        client.script_flush()
        seen["flushed_at"] = ledger.total.completed
        seen["results_at"] = client.xlen("chaosd:results")
        # Both the daemon's ledger and the workers' sink 400 further on: the results stream runs ahead of the
        # ledger by what is in transit at the flush, so each is waited for against its own count.
        end = exp.clock.now() + 12.0
        while exp.clock.now() < end and (
            ledger.total.completed < seen["flushed_at"] + 400
            or client.xlen("chaosd:results") < seen["results_at"] + 400
        ):
            await exp.clock.sleep(0.02)
        seen["completed"] = ledger.total.completed
        seen["rejected"] = ledger.total.rejected
        exp.stop.set()

    tasks = run_offline_with(settings, plan)["tasks"]
    assert seen["completed"] >= seen["flushed_at"] + 400, seen  # served on after the flush
    assert client.xlen("chaosd:results") >= seen["results_at"] + 400  # the workers' sink too
    assert seen["rejected"] == 0, seen  # no task refused as unavailable
    assert tasks["lost_all_cohorts"] == 0 and tasks["duplicated"] == 0
    client.close()


def test_a_report_read_while_the_monitor_reads_the_stream_loses_no_task(server: RedisServer) -> None:
    # The monitor's snapshot pass reads the stream while the producers go on: what was accepted before the pass is
    # still held while its reply is out. A report asked for meanwhile (the score event, /metrics, the final one)
    # counts none of those as lost. Each check starts a pass and reads the books at the pass's first wait.
    settings = load_settings(None, _saturated(server.url, "reject"))
    seen: dict[str, int] = {"checks": 0, "lost": 0, "in_flight": 0}

    async def plan(exp: Experiment) -> None:
        rt = exp.pipeline.host
        assert isinstance(rt, RedisRuntime)
        ledger = exp.pipeline.ledger
        up = exp.clock.now() + 20.0
        while ledger.total.completed == 0 and exp.clock.now() < up:
            await exp.clock.sleep(0.01)
        for _ in range(30):
            refresh = asyncio.create_task(rt.refresh())
            await asyncio.sleep(0)  # the pass has sent its commands and waits for the reply
            lost, _, _ = exp.accounted(fresh=True)
            seen["lost"] = max(seen["lost"], lost)
            seen["in_flight"] = max(seen["in_flight"], len(ledger.in_flight))
            seen["checks"] += 1
            await refresh
            await exp.clock.sleep(0.02)
        exp.stop.set()

    tasks = run_offline_with(settings, plan)["tasks"]
    assert seen["checks"] == 30 and seen["in_flight"] > 0, seen  # tasks were in flight while the passes were out
    assert seen["lost"] == 0, seen
    assert tasks["lost_all_cohorts"] == 0, tasks
