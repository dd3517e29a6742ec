"""A worker process stopped from outside (SIGSTOP by its pid, not the daemon's pause_agent) cannot beat: it is shown
stalled within a few heartbeat periods, its claimed tasks are reclaimed after the task lease, and it is running
again once SIGCONT lets it beat. Real redis-server on loopback, real worker
and orchestrator processes."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import redis_harness
from redis_harness import RedisServer, redis_settings
from test_redis_backend import QUIET, experiment, until

from chaosd.backends.redis.runtime import RedisRuntime
from chaosd.config.settings import load_settings
from chaosd.experiment.runner import Experiment

pytestmark = pytest.mark.timeout(120)
shared_redis, server = redis_harness.shared_redis, redis_harness.server

DEADLINE_S = 3.0  # the heartbeat key's TTL (0.5 s) and the grace (0.5 s), with room for a loaded machine
LEASE = 1.0  # orchestrator.task_lease in these tests
SHOWN_S = 0.6  # two heartbeat periods of silence (0.2 s), a monitor pass and room for a loaded machine


def test_a_worker_process_stopped_from_outside_is_shown_dead_until_it_beats_again(server: RedisServer) -> None:
    settings = load_settings(None, redis_settings(server.url, **QUIET))
    seen: dict[str, Any] = {"other": set()}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        rt = p.host
        assert isinstance(rt, RedisRuntime)
        stopped, other = p.agents["worker-1"], p.agents["worker-0"]
        baseline = exp.injector.baseline
        await until(exp, lambda: (b := baseline()) is not None and b.goodput > 40, 15.0, "a busy baseline")
        seen["before"] = stopped.state
        pid = seen["pid"] = rt.pid("worker-1")
        assert pid is not None
        for _ in range(20):  # stopped mid-task: its claimed task is what the lease must bring back
            await until(exp, lambda: rt.held_tasks(["worker-1"]) > 0, DEADLINE_S, "worker-1 mid-task")
            os.kill(pid, signal.SIGSTOP)
            await rt.refresh()
            if seen.setdefault("held", rt.held_tasks(["worker-1"])) > 0:
                break
            os.kill(pid, signal.SIGCONT)  # it had finished meanwhile: again
            del seen["held"]
        try:
            t0 = exp.clock.now()

            def judged() -> bool:
                seen["other"].add(other.state)  # the negative control: the worker nobody stopped
                return stopped.state != "running"

            await until(exp, judged, DEADLINE_S, "the stopped worker shown not running")
            seen["shown_after_s"] = exp.clock.now() - t0
            seen["while_stopped"] = stopped.state
            t1 = exp.clock.now()
            await until(exp, lambda: (seen["other"].add(other.state), t1 + 1.0 < exp.clock.now())[1], 2.0, "a second")
            seen["still_stopped"] = stopped.state
            # What it had claimed goes back to the stream once the task lease (2 s) has run out, and is served.
            await until(exp, lambda: rt.held_tasks(["worker-1"]) == 0, LEASE + DEADLINE_S, "its tasks reclaimed")
            seen["reclaimed_after_s"] = exp.clock.now() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        t0 = exp.clock.now()
        await until(exp, lambda: stopped.state == "running", DEADLINE_S, "the resumed worker running again")
        seen["back_after_s"] = exp.clock.now() - t0
        seen["pid_after"] = rt.pid("worker-1")
        seen["restarts"] = stopped.restart_count
        seen["events"] = [
            (e.data.get("state"), e.data.get("heartbeat"))
            for e in p.events.history.events("agent")
            if e.data.get("agent") == "worker-1"
        ]
        exp.stop.set()

    experiment(settings, 60.0, 1.0, plan)
    assert seen["before"] == "running"
    assert seen["while_stopped"] == seen["still_stopped"] == "stalled"
    assert seen["shown_after_s"] < SHOWN_S
    print(
        f"shown stalled {seen['shown_after_s']:.2f} s after SIGSTOP, {seen['held']} tasks held reclaimed after "
        f"{seen['reclaimed_after_s']:.2f} s, running {seen['back_after_s']:.2f} s after SIGCONT"
    )
    assert seen["held"] > 0 and LEASE - 0.3 <= seen["reclaimed_after_s"] <= LEASE + DEADLINE_S
    assert seen["other"] == {"running"}  # never judged: it kept beating
    assert seen["pid_after"] == seen["pid"] and seen["restarts"] == 0  # the same process, not restarted
    assert ("stalled", "lost") in seen["events"] and seen["events"][-1][0] == "alive"
    assert ("dead", "lost") not in seen["events"]


def test_a_stalled_worker_that_is_then_killed_is_restarted_as_any_dead_worker(server: RedisServer) -> None:
    settings = load_settings(None, redis_settings(server.url, **QUIET))
    seen: dict[str, Any] = {}

    async def plan(exp: Experiment) -> None:
        p = exp.pipeline
        rt = p.host
        assert isinstance(rt, RedisRuntime)
        stopped = p.agents["worker-1"]
        baseline = exp.injector.baseline
        await until(exp, lambda: (b := baseline()) is not None and b.goodput > 40, 15.0, "a busy baseline")
        pid = seen["pid"] = rt.pid("worker-1")
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        await until(exp, lambda: stopped.state == "stalled", DEADLINE_S, "the stopped worker shown stalled")
        os.kill(pid, signal.SIGKILL)
        await until(exp, lambda: rt.pid("worker-1") not in (None, pid), 10.0, "the supervisor's restart")
        await until(exp, lambda: stopped.state == "running", DEADLINE_S, "the new process running")
        seen["new_pid"] = rt.pid("worker-1")
        seen["restarts"] = stopped.restart_count
        exp.stop.set()

    experiment(settings, 60.0, 1.0, plan)
    assert seen["new_pid"] != seen["pid"] and seen["restarts"] == 1
