"""The dispatch log: a checkpoint plus a compacted changelog, no larger than the state, that rebuilds it exactly."""

from __future__ import annotations

import random

from chaosd.config.settings import OrchestratorConfig
from chaosd.core.clock import LoopClock, VirtualEventLoop
from chaosd.events.log import EventLog
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.dispatch import Dispatcher, State
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.task import Task


def _dispatcher() -> tuple[Dispatcher, list[Agent]]:
    loop = VirtualEventLoop()
    clock = LoopClock(loop)
    replicas = [Agent(f"orchestrator-{i}", "orchestrator") for i in range(3)]
    queue = IngressQueue(1_000_000, "reject", clock)
    return Dispatcher(OrchestratorConfig(), replicas, queue, clock, EventLog(), 0.0), replicas


def _held(state: State) -> dict[int, tuple[int, str]]:
    return {task_id: (task.id, worker) for task_id, (task, worker, _) in state.items()}


def test_the_log_stays_as_small_as_the_dispatch_state_and_rebuilds_it_exactly() -> None:
    d, replicas = _dispatcher()
    rng = random.Random(3)
    open_tasks: dict[int, str] = {}
    most = 0
    for i in range(20_000):
        task = Task(i, 0.0, True)
        worker = f"worker-{rng.randrange(8)}"
        d.assign(task, worker, 0.0)
        open_tasks[i] = worker
        if i % 5_000 == 2_500:  # a checkpoint midway: later acknowledgements of older tasks are logged
            d._take_checkpoint(0.0)
        while len(open_tasks) > 50 and rng.random() < 0.95:  # acknowledged out of order; about 50 stay open
            done = rng.choice(list(open_tasks)[:16])
            d.ack(done, open_tasks.pop(done))
        most = max(most, d.log_size)
    assert d.state is not None and len(d.state) >= 50
    # At most one entry per task dispatched since the checkpoint and one per task of the checkpoint, about 50 each;
    # an append-only log would hold every assignment and acknowledgement since the checkpoint (thousands).
    assert most <= 200, most

    before = _held(d.state)
    d.replica_died(replicas[0])  # the leader's memory is gone: only the checkpoint and the log remain
    assert d.state is None
    assert _held(d.restore()) == before and before


def test_an_assignment_logged_with_no_leader_is_redispatched_by_the_next() -> None:
    d, replicas = _dispatcher()
    d.assign(Task(1, 0.0, True), "worker-0", 0.0)
    d.replica_died(replicas[0])
    d.assign(Task(2, 0.0, True), "worker-1", 0.0)  # handed over by the old leader just before it died
    d.ack(1, "worker-0")  # lost: nobody holds the state to acknowledge it in
    assert sorted(_held(d.restore())) == [1, 2]
    d.tick(d.lease_expires)  # the lease ran out: the next replica is elected and re-dispatches both
    assert d.leader is replicas[1] and d.redispatched == 2
    assert d.log_size == 0  # the new leader starts from a checkpoint of what it rebuilt
