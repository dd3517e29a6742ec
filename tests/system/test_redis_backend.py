"""The Redis backend with real processes: a SIGKILLed worker's task comes back after its lease and takes effect
once; a worker stopped past its lease finishes late and the sink suppresses the duplicate. Real redis-server on
loopback, real worker and orchestrator processes, the real injector."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import redis
import redis_harness
from redis.exceptions import ResponseError
from redis_harness import RedisServer, redis_settings

from chaosd.backends import make_pipeline
from chaosd.backends.redis.replies import Heartbeat, Lease, PollReply, Result, StageCounter
from chaosd.backends.redis.runtime import RedisRuntime
from chaosd.cli.main import main
from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.core.errors import ConfigError
from chaosd.experiment.runner import Experiment, run_offline
from chaosd.pipeline.task import Task

pytestmark = pytest.mark.timeout(120)
# One redis-server for the module, emptied before each test (none of them restarts it).
shared_redis, server = redis_harness.shared_redis, redis_harness.server

Plan = Callable[[Experiment], Coroutine[Any, Any, None]]

# One compute stage of 20 ms: 2 workers at 50 tasks/s is ρ 0.5, with every worker mid-task half of the time.
STAGES = [{"name": "work", "kind": "compute", "service": {"distribution": "exponential", "mean": 0.02}}]
RECOVERY = {"baseline_min": 2.0, "baseline_window": 3.0, "confirm": 1.0, "limit": 20.0, "tolerance": 0.5}
QUIET: dict[str, Any] = {"stages": STAGES, "load": {"rate": 50.0}, "recovery": RECOVERY, "throttle": {"enabled": False}}


def experiment(settings: Settings, duration: float, warmup: float, plan: Plan) -> tuple[dict[str, Any], Experiment]:
    """Run one real-time experiment with ``plan`` beside it; the report and the experiment after it."""
    loop = new_event_loop(virtual=False)
    clock = LoopClock(loop)

    async def go() -> tuple[dict[str, Any], Experiment]:
        exp = Experiment(settings, clock, warmup=warmup, virtual=False)
        report = await exp.run(duration, plan=plan)
        return report, exp

    try:
        return loop.run_until_complete(go())
    finally:
        loop.close()


async def until(exp: Experiment, predicate: Callable[[], bool], deadline: float, what: str) -> None:
    """Poll on the experiment's clock until ``predicate`` holds (never a blind sleep)."""
    end = exp.clock.now() + deadline
    while not predicate():
        if exp.clock.now() > end:
            raise AssertionError(f"timed out after {deadline} s waiting for {what}")
        await exp.clock.sleep(0.01)


def pending_of(client: redis.Redis, consumer: str) -> list[str]:
    rows = client.xpending_range("chaosd:tasks", "chaosd-workers", "-", "+", 100, consumername=consumer)
    return [str(r["message_id"]) for r in rows]


def results_by_task(client: redis.Redis) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, fields in client.xrange("chaosd:results"):
        counts[fields["i"]] = counts.get(fields["i"], 0) + 1
    return counts


def test_virtual_time_refuses_the_redis_backend() -> None:
    settings = load_settings(None, {"backend": {"kind": "redis"}})
    with pytest.raises(ConfigError, match=r"backend\.kind"):
        run_offline(settings, duration=1.0, warmup=0.1)


def test_the_cli_names_backend_kind_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "redis.toml"
    config.write_text('[backend]\nkind = "redis"\n')
    assert main(["run", "--config", str(config), "--duration", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "backend.kind" in err[0], err


def test_sigkill_mid_task_is_redelivered_once_and_the_supervisor_restarts(server: RedisServer) -> None:
    settings = load_settings(
        None,
        redis_settings(server.url, **QUIET),
    )
    client = redis.Redis.from_url(server.url, decode_responses=True)
    seen: dict[str, Any] = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        rt = p.host
        assert isinstance(rt, RedisRuntime)
        baseline = exp.injector.baseline
        await until(exp, lambda: (b := baseline()) is not None and b.goodput > 40, 15.0, "a busy baseline")
        seen["pid"] = pid = rt.pid("worker-0")
        assert pid is not None

        def stopped_holding() -> bool:
            # Stopped first, so what it holds cannot change before the kill (a task it finished between a read of
            # its pending entries and the kill would not be redelivered); let go again when it held nothing.
            os.kill(pid, signal.SIGSTOP)
            if pending_of(client, "worker-0"):
                return True
            os.kill(pid, signal.SIGCONT)
            return False

        await until(exp, stopped_holding, 5.0, "worker-0 mid-task")
        held = pending_of(client, "worker-0")
        seen["held"] = [client.xrange("chaosd:tasks", e, e)[0][1]["i"] for e in held]
        record = exp.injector.inject("kill_agent", "worker-0", {}, 3.0)
        seen["fault"] = record.id
        assert rt.pid("worker-0") is None  # the process is gone at once
        await until(exp, lambda: rt.pid("worker-0") is not None, 10.0, "the supervisor's restart")
        seen["new_pid"] = rt.pid("worker-0")
        await until(exp, lambda: record.outcome in ("recovered", "failed"), 25.0, "a verdict on the kill")
        await until(exp, lambda: all(t in results_by_task(client) for t in seen["held"]), 5.0, "redelivery")
        await rt.refresh()
        exp.stop.set()

    report, _ = experiment(settings, 60.0, 1.0, plan)
    assert seen["pid"] != seen["new_pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(seen["pid"], 0)
    fault = next(f for f in report["faults"] if f["id"] == seen["fault"])
    assert fault["outcome"] == "recovered", fault
    tasks = report["tasks"]
    assert tasks["lost"] == 0 and tasks["lost_all_cohorts"] == 0
    assert tasks["duplicated"] == 0
    assert tasks["accepted"] == tasks["completed"] + tasks["failed"] + tasks["in_flight"] + tasks["lost"]
    assert report["runtime"]["restarts"] >= 1
    assert report["runtime"]["lease_expired"] >= len(seen["held"]) >= 1
    counts = results_by_task(client)
    for task in seen["held"]:  # the task the killed process held took effect exactly once
        assert counts[task] == 1
        assert client.exists(f"chaosd:effect:1:{task}") or client.keys(f"chaosd:effect:*:{task}")
    assert max(counts.values()) == 1
    client.close()


def test_a_worker_stopped_past_its_lease_is_deduplicated_at_the_sink(server: RedisServer) -> None:
    settings = load_settings(
        None,
        redis_settings(server.url, **QUIET),
    )
    client = redis.Redis.from_url(server.url, decode_responses=True)
    seen: dict[str, Any] = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        rt = p.host
        assert isinstance(rt, RedisRuntime)
        await until(exp, lambda: bool(pending_of(client, "worker-1")), 15.0, "worker-1 mid-task")
        # SIGSTOP (pause_agent on a local worker) past the task lease: its task goes to worker-0. The pause
        # lasts until the copy has taken effect and is then lifted, so no machine load can reorder the two.
        record = exp.injector.inject("pause_agent", "worker-1", {}, 30.0)
        seen["pid"] = rt.pid("worker-1")
        seen["state"] = Path(f"/proc/{seen['pid']}/stat")
        await until(exp, lambda: seen["state"].read_text().split()[2] == "T", 2.0, "the process stopped")
        held = {
            fields["i"]
            for entry in pending_of(client, "worker-1")
            for _, fields in client.xrange("chaosd:tasks", entry, entry)
        }
        assert held, "the stopped worker holds a task"
        await until(
            exp, lambda: all(results_by_task(client).get(i) == 1 for i in held), 15.0, "the redelivered copy's effect"
        )
        exp.injector.inject("resume_agent", "worker-1", {}, 1.0)
        await until(exp, lambda: p.ledger.deduplicated >= 1, 15.0, "the late completion suppressed")
        seen["outcome"] = record.outcome
        await rt.refresh()
        exp.stop.set()

    report, _ = experiment(settings, 40.0, 1.0, plan)
    assert report["runtime"]["deduplicated"] >= 1  # counted ...
    assert report["tasks"]["duplicated"] == 0  # ... and no second effect
    assert report["tasks"]["lost_all_cohorts"] == 0
    assert report["runtime"]["lease_expired"] >= 1
    assert max(results_by_task(client).values()) == 1
    client.close()


def test_a_result_read_before_its_tasks_acceptance_is_its_first_outcome_not_a_duplicate() -> None:
    # A busy daemon loop can read a task's result before the producer resumes with the answer to the task's
    # submission (the worker was quicker). Taken for a second outcome, the result would be suppressed and the task,
    # then accepted, reported lost at the end of the run: it must be booked once the ledger has accepted the task.
    settings = load_settings(None, redis_settings("redis://127.0.0.1:9/0", **QUIET))
    loop = new_event_loop(virtual=False)
    try:
        p = make_pipeline(settings, LoopClock(loop))
        rt = p.host
        assert isinstance(rt, RedisRuntime)
        books = rt.monitor.books
        ledger = p.ledger
        task = Task(7, 0.5, True)
        rt.stream.submitting.add(task.id)  # put() is waiting for the answer to its submission
        result = {"i": "7", "a": "1.0", "s": "1.01", "e": "1.04", "n": "0", "m": "1", "w": p.workers[0].agent.id}
        books.book([Result.from_entry("5-0", result)])
        assert ledger.deduplicated == 0 and ledger.total.completed == 0 and rt.results_read == 0
        ledger.offer(task)  # the answer: accepted, as put() books it
        ledger.accept(task)
        rt.stream.submitting.discard(task.id)
        books.book([])  # the next read
        assert (ledger.total.completed, ledger.deduplicated, rt.results_read) == (1, 0, 1)
        assert not ledger.in_flight and ledger.audit.owing == 0
        assert ledger.unaccounted(p.holders()) == (0, 0, 0)
        assert p.sojourn.count == 1  # its time in the system counts, once
    finally:
        loop.close()


def test_a_monitor_reply_that_failed_in_parts_is_no_news_for_those_parts_not_zeros() -> None:
    # Read while Redis was loading, say: a counter that did not answer must keep what the last pass read.
    err = ResponseError("LOADING Redis is loading the dataset in memory")
    beat = {"instance": "41-ab", "busy": "9", "pid": "41"}
    replies = [
        err,  # the stream, read whole
        err,  # results
        12,  # XLEN
        err,  # XPENDING
        [("1700000000123-0", {"i": "3"})],  # the head entry
        err,  # the groups
        "orchestrator-1/77:5",  # the lease
        {"lease_expired": "2", "redispatched": "3", "dropped:worker-0": "4"},
        {"search:degraded": "6", "search:round_trips": "1"},
        ["far-1"],
        beat,
        {},
        err,  # a control write
    ]
    reply = PollReply.from_replies(replies, snapshot=True, workers=2, batch=50)
    assert reply.held is None and reply.results is None and not reply.drained
    assert (reply.length, reply.pending, reply.head_ms, reply.groups) == (12, None, 1700000000123, None)
    assert reply.lease == Lease("orchestrator-1/77", "orchestrator-1", 5)
    assert reply.stats is not None and (reply.stats.lease_expired, reply.stats.redispatched) == (2, 3)
    assert reply.stats.dropped("worker-0") == 4 and reply.stats.dropped("worker-1") == 0
    assert reply.stage_counters == (StageCounter("search", "degraded", 6),)
    assert reply.members == frozenset({"far-1"})
    assert reply.beats == (Heartbeat(True, "41-ab", "9"), Heartbeat(False, None, ""))
    assert not reply.written


def test_the_worker_subcommand_refuses_the_memory_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "memory.toml"
    config.write_text("")
    assert main(["worker", "--config", str(config)]) == 2
    assert "backend.kind" in capsys.readouterr().err


def test_an_unreachable_redis_is_a_config_error(tmp_path: Path) -> None:
    absent = RedisServer(tmp_path)  # never started: nothing listens on its port
    settings = load_settings(None, redis_settings(absent.url))
    with pytest.raises(ConfigError, match=r"backend\.url"):
        run_offline(settings, duration=1.0, warmup=0.1, virtual=False)
