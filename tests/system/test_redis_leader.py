"""The leader lease on Redis: SIGKILL of the replica process holding it hands it to another replica within
lease TTL + renew interval with a higher fencing token; a leader that lost the lease while stopped is refused."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest
import redis
import redis_harness
from redis.asyncio import Redis
from redis_harness import RedisServer, redis_settings
from test_redis_backend import QUIET, experiment, until

from chaosd.backends.redis.leader import Replica
from chaosd.backends.redis.runtime import RedisRuntime
from chaosd.config.settings import load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment

pytestmark = pytest.mark.timeout(120)
# One redis-server for the module, emptied before each test (none of them restarts it).
shared_redis, server = redis_harness.shared_redis, redis_harness.server

TTL, RENEW = 0.5, 0.1
SLACK = 0.3  # scheduling on a loaded two-core machine: the bound is TTL + RENEW, the slack is for the OS


def lease(client: redis.Redis) -> tuple[str, int] | None:
    value = client.get("chaosd:lease")
    if value is None:
        return None
    identity, _, token = str(value).rpartition(":")
    return identity, int(token)


def test_sigkill_of_the_leader_process_elects_another_replica_with_a_higher_token(server: RedisServer) -> None:
    settings = load_settings(None, redis_settings(server.url, **QUIET))
    client = redis.Redis.from_url(server.url, decode_responses=True)
    seen: dict[str, Any] = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        rt = p.host
        assert isinstance(rt, RedisRuntime)
        await until(exp, lambda: (b := exp.injector.baseline()) is not None and b.goodput > 40, 15, "baseline")
        before = lease(client)
        assert before is not None
        seen["before"] = before
        agent = before[0].partition("/")[0]
        seen["pid"] = rt.pid(agent)
        assert seen["pid"] == int(before[0].partition("/")[2])  # the lease names the process
        record = exp.injector.inject("kill_leader", "leader", {}, 5.0)
        killed_at = exp.clock.now()
        with pytest.raises(ProcessLookupError):
            os.kill(seen["pid"], 0)
        await until(exp, lambda: (now := lease(client)) is not None and now[0] != before[0], 5, "a new leader")
        seen["takeover_s"] = exp.clock.now() - killed_at
        seen["after"] = lease(client)
        await until(exp, lambda: record.outcome in ("recovered", "failed"), 25, "a verdict on the kill")
        await until(exp, lambda: rt.pid(agent) is not None, 10, "the killed replica restarted")
        seen["restarted"] = rt.pid(agent)
        await rt.refresh()
        exp.stop.set()

    report, _ = experiment(settings, 60.0, 1.0, plan)
    assert seen["takeover_s"] <= TTL + RENEW + SLACK, seen
    assert seen["after"][1] > seen["before"][1]  # a higher fencing token
    assert seen["restarted"] != seen["pid"]
    fault = next(f for f in report["faults"] if f["action"] == "kill_leader")
    assert fault["outcome"] == "recovered", fault
    assert report["runtime"]["elections"] >= 1
    assert report["tasks"]["lost_all_cohorts"] == 0 and report["tasks"]["duplicated"] == 0
    client.close()


def test_a_leader_stopped_past_its_lease_is_refused_when_it_wakes(server: RedisServer) -> None:
    settings = load_settings(None, redis_settings(server.url, **QUIET))
    client = redis.Redis.from_url(server.url, decode_responses=True)
    seen: dict[str, Any] = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        rt = p.host
        assert isinstance(rt, RedisRuntime)
        await until(exp, lambda: lease(client) is not None, 10, "a leader")
        stale = lease(client)
        assert stale is not None
        pid = int(stale[0].partition("/")[2])
        refused = int(client.hget("chaosd:stats", "refused_writes") or 0)
        os.kill(pid, signal.SIGSTOP)  # outside the runtime's books: only the lease can tell
        try:
            await until(exp, lambda: (now := lease(client)) is not None and now[0] != stale[0], 5, "a takeover")
        finally:
            os.kill(pid, signal.SIGCONT)
        fresh = lease(client)
        assert fresh is not None and fresh[1] > stale[1]
        await until(exp, lambda: int(client.hget("chaosd:stats", "refused_writes") or 0) > refused, 5, "the refusal")
        await until(exp, lambda: client.hget("chaosd:checkpoint", "token") == str(fresh[1]), 5, "a checkpoint")
        seen.update(stale=stale, fresh=fresh, now=lease(client))
        exp.stop.set()

    experiment(settings, 40.0, 0.5, plan)
    assert seen["now"][0] == seen["fresh"][0]  # the woken leader did not take the lease back
    client.close()


def test_fenced_writes_compare_the_token(server: RedisServer) -> None:
    """Two replicas in one process, the lease expired under the first: its writes are refused and counted."""
    settings = load_settings(None, redis_settings(server.url, orchestrator={"lease_ttl": 0.2, "renew_interval": 0.05}))
    loop = new_event_loop(virtual=False)

    async def go() -> None:
        clock = LoopClock(asyncio.get_running_loop())
        client = Redis.from_url(server.url, decode_responses=True)
        try:
            await client.xgroup_create("chaosd:tasks", "chaosd-workers", id="0", mkstream=True)
            a = Replica(settings, "orchestrator-0", client, clock)
            b = Replica(settings, "orchestrator-1", client, clock)
            a.identity, b.identity = "orchestrator-0/1", "orchestrator-1/2"
            await a.beat()
            await b.beat()
            assert a.token > 0 and b.token == 0  # one lease, one holder
            await client.delete("chaosd:lease")  # as if a's lease ran out while it was stopped
            await b.beat()
            assert b.token > a.token
            stale_token = a.token
            assert not await a.write_checkpoint()
            assert a.token == 0 and a.refused == 1
            a.token = stale_token
            await a.beat()  # renew refused; the lease is b's, so a stays a standby
            assert a.token == 0
            assert int(await client.hget("chaosd:stats", "refused_writes") or 0) == 2
            assert await client.hget("chaosd:checkpoint", "token") == str(b.token)
        finally:
            await client.aclose()

    try:
        loop.run_until_complete(go())
    finally:
        loop.close()
