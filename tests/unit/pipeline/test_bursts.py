"""Work done in a burst, with nobody else running in between: the same books as one task at a time, and others still
get their turn."""

from __future__ import annotations

import asyncio
import random

import pytest

from chaosd.config.settings import OrchestratorConfig, load_settings
from chaosd.core.clock import LoopClock, VirtualEventLoop, new_event_loop
from chaosd.events.log import EventLog
from chaosd.pipeline import Pipeline
from chaosd.pipeline import producer as producer_module
from chaosd.pipeline import worker as worker_module
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.dispatch import Dispatcher
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.task import Task


def _dispatcher() -> tuple[Dispatcher, list[Agent]]:
    clock = LoopClock(VirtualEventLoop())
    replicas = [Agent(f"orchestrator-{i}", "orchestrator") for i in range(3)]
    return Dispatcher(OrchestratorConfig(), replicas, IngressQueue(10_000, "reject", clock), clock, EventLog(), 0.0), (
        replicas
    )


def test_served_at_once_leaves_what_an_assignment_and_its_acknowledgement_leave() -> None:
    """Two dispatchers fed the same history, one with assign then ack, the other with served_at_once: the same state
    and log after every step, through checkpoints, re-dispatched tasks and a leader's death."""
    pair, other = _dispatcher(), _dispatcher()
    (a, replicas_a), (b, replicas_b) = pair, other
    rng = random.Random(5)
    tasks = [Task(i, 0.0, True) for i in range(400)]
    in_checkpoint = without_leader = redone = 0
    for step in range(6_000):
        task = rng.choice(tasks)
        worker = f"worker-{rng.randrange(4)}"
        roll = rng.random()
        if roll < 0.3:  # dispatched and left open (a task in service elsewhere, or one whose worker died)
            a.assign(task, worker, float(step))
            b.assign(task, worker, float(step))
        else:
            redone += a.state is not None and task.id in a.state  # served again while an older dispatch is open
            in_checkpoint += task.id in a._checkpoint
            without_leader += a.state is None
            a.assign(task, worker, float(step))
            a.ack(task.id, worker)
            b.served_at_once(task, worker, float(step))
        if step % 700 == 350:
            a._take_checkpoint(float(step))
            b._take_checkpoint(float(step))
        if step == 3_000:
            a.replica_died(replicas_a[0])
            b.replica_died(replicas_b[0])
        if step == 3_200:
            a.tick(a.lease_expires)
            b.tick(b.lease_expires)
        assert a.state == b.state and a.log() == b.log(), step
        assert list(a.log()) == list(b.log()), step  # the log's order too: a restore replays it in order
    assert a.restore() == b.restore()
    # Every case the fused path treats apart was met.
    assert in_checkpoint > 100 and without_leader > 50 and redone > 100, (in_checkpoint, without_leader, redone)


OVERLAY = {
    "seed": 1,
    "load": {"rate": 1e7, "producers": 1, "arrival": "constant"},  # never catches up: every arrival is due
    "workers": {"count": 1},
    "queue": {"capacity": 1000, "when_full": "block"},
    "stages": [{"name": "work", "service": {"distribution": "constant", "mean": 0.0}}],  # no task ever awaits
}


def _longest_stretch(tasks: int) -> tuple[int, Pipeline]:
    """The most tasks completed between two turns of another coroutine of the loop, over ``tasks`` tasks served in
    real time by a producer that is always behind and a worker whose tasks never await."""
    loop = new_event_loop(virtual=False)
    clock = LoopClock(loop)

    async def main() -> tuple[int, Pipeline]:
        p = Pipeline(load_settings(overlay=OVERLAY), clock)
        longest = 0
        async with p.running():
            seen = p.ledger.total.completed
            while p.ledger.total.completed < tasks:
                await asyncio.sleep(0)
                done = p.ledger.total.completed
                longest, seen = max(longest, done - seen), done
        return longest, p

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_a_burst_yields_to_others_and_keeps_the_books() -> None:
    longest, p = _longest_stretch(20_000)
    # The worker serves at most _YIELD_EVERY tasks per turn; the loop may run it twice between two of ours.
    assert 0 < longest <= 2 * worker_module._YIELD_EVERY, longest
    total = p.ledger.total
    assert total.accepted == total.offered and total.rejected == 0  # block: nothing refused
    held = {task.id for task in p.holders()}
    assert set(p.ledger.in_flight) == held  # every task not yet ended is held, and only those
    assert total.accepted == total.completed + len(p.ledger.in_flight)
    assert p.ledger.good == total.completed  # no deadline missed at zero service, nothing degraded
    assert p.busy.busy == 0 and p.workers[0].current is None  # stopped: nobody in service
    assert p.dispatcher.state is not None and set(p.dispatcher.state) <= held
    assert p.dispatcher.log_size <= len(p.dispatcher.state) + len(p.dispatcher._checkpoint)


def test_without_the_yield_a_burst_would_keep_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The negative control: with the yields turned off, another coroutine waits far longer than the bound above."""
    monkeypatch.setattr(worker_module, "_YIELD_EVERY", 10**9)
    monkeypatch.setattr(producer_module, "_YIELD_EVERY", 10**9)
    longest, _ = _longest_stretch(20_000)
    assert longest > 4 * 64, longest
