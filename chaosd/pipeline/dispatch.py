"""Leadership and dispatch: K orchestrator replicas, one holding the dispatch lease.

The leader records every assignment (task → worker, lease deadline) in its memory and in a durable
log (a checkpoint plus the operations since). When it dies, dispatch stops; once its lease has
expired the first live standby takes it, rebuilds the state from checkpoint + log, and re-dispatches
everything assigned but never acknowledged. Task leases that expire (a dead or cut-off worker) are
re-dispatched too: delivery is at-least-once, and the sink's idempotence makes the effect exactly once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Protocol

from chaosd.config.settings import OrchestratorConfig
from chaosd.core.clock import Clock, every
from chaosd.events.log import EventLog
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.task import Task

__all__ = ["Assignment", "Dispatcher"]


# One dispatch: the task, the worker it went to, and when its lease ends. A plain tuple: one is made per task
# served, and making a tuple costs a fraction of a class instance's constructor.
Assignment = tuple[Task, str, float]
State = dict[int, Assignment]


class Holder(Protocol):
    """A worker that may hold its current task's assignment itself (see :attr:`Dispatcher.holders`)."""

    agent: Agent
    current: Task | None
    held_at: float | None  # when the assignment it holds was made; None: it holds none


class Dispatcher:
    """The dispatch lease, the leader's state and its durable log; ``tick`` is the leader's heartbeat."""

    def __init__(
        self,
        cfg: OrchestratorConfig,
        replicas: list[Agent],
        queue: IngressQueue,
        clock: Clock,
        events: EventLog,
        t0: float,
    ) -> None:
        self.cfg = cfg
        self.replicas = replicas
        self._queue = queue
        self._clock = clock
        self._events = events
        self._t0 = t0
        self.leader: Agent | None = replicas[0]
        self.lease_expires = clock.now() + cfg.lease_ttl
        self.state: State | None = {}
        self._checkpoint: State = {}
        self._checkpoint_at = clock.now()
        # The durable log since the checkpoint, compacted as a changelog: each task's last operation, its
        # Assignment or None once acknowledged (or its lease expired). Replayed in order, a log leaves each task
        # as its last operation says, so this restores the same state; and a task dispatched and acknowledged
        # between two checkpoints leaves no entry, so the log is as large as the dispatch state, not as the
        # tasks served since the checkpoint (hundreds of thousands at real-time speed, all kept alive).
        # While a leader holds the state, that log is exactly the state's difference from the checkpoint: it is
        # worked out when read (log, and the leader's death), not written once per task. ``_since`` holds it
        # from the leader's death to the next election, when assignments are logged with no state to hold them.
        self._since: dict[int, Assignment | None] = {}
        self.elections = 0
        self.redispatched = 0
        self.lease_expired = 0
        self._deposed: Agent | None = None  # the replica that lost the lease: last in line for it
        self.on_tick: list[Callable[[float], None]] = []
        # Workers that hold the assignment of the task they serve themselves, while the leader lives and had no
        # entry for that task: (task, worker, held_at + task_lease), as ``assign`` would have made it, with no
        # entry made per task. Whatever reads the state first takes the assignments held into it (_gather):
        # a lease sweep those that ran out, a checkpoint, the log and the leader's death all of them.
        self.holders: list[Holder] = []

    # --- the hot path: workers -------------------------------------------------------------------

    def assign(self, task: Task, worker: str, now: float) -> None:
        entry = (task, worker, now + self.cfg.task_lease)
        state = self.state
        if state is not None:
            state[task.id] = entry  # and so in the log, the state's difference from the checkpoint
        else:
            # Logged even with no leader: the old leader handed this task over just before it died, and
            # the next leader must find it in the log or nobody would answer for it.
            self._since[task.id] = entry

    def ack(self, task_id: int, worker: str) -> None:
        state = self.state
        if state is None:
            return  # the leader is gone: the acknowledgement is lost, the task will be re-dispatched
        entry = state.get(task_id)
        if entry is not None and entry[1] == worker:
            del state[task_id]

    def served_at_once(self, task: Task, worker: str, now: float) -> None:
        """``assign`` then ``ack`` with nothing run between (a task served without its worker awaiting): what the
        two leave behind, without the entry one makes and the other undoes."""
        state = self.state
        if state is None:
            self.assign(task, worker, now)  # the acknowledgement would be lost: the assignment stays logged
            return
        state.pop(task.id, None)  # a re-dispatched task's earlier entry: the assignment replaced it, the ack ended it

    def hand_back(self, holder: Holder, task: Task) -> None:
        """``holder`` no longer holds the assignment of ``task`` (if it held one): the state (or, with no leader, the
        log) answers for it from now, as if ``assign`` had been called when it was made."""
        if holder.held_at is not None:
            self.assign(task, holder.agent.id, holder.held_at)
            holder.held_at = None

    def _gather(self, by: float = math.inf) -> None:
        """Take into the state the assignments workers hold whose lease ends by ``by`` (all of them by default)."""
        lease = self.cfg.task_lease
        for worker in self.holders:
            if worker.held_at is not None and worker.held_at + lease <= by and worker.current is not None:
                self.hand_back(worker, worker.current)

    def log(self) -> dict[int, Assignment | None]:
        """The durable log since the checkpoint: each task's last operation, its Assignment or None (it needs
        dispatching no more). While a leader holds the state, the state's difference from the checkpoint: the
        checkpoint's tasks that left it first, then the assignments made since, in the order the state holds them."""
        state = self.state
        if state is None:
            return dict(self._since)
        self._gather()
        checkpoint = self._checkpoint
        log: dict[int, Assignment | None] = {task_id: None for task_id in checkpoint if task_id not in state}
        log.update((task_id, entry) for task_id, entry in state.items() if checkpoint.get(task_id) is not entry)
        return log

    @property
    def log_size(self) -> int:
        """Entries in the durable log since the checkpoint."""
        return len(self.log())

    # --- leadership ------------------------------------------------------------------------------

    @property
    def leader_id(self) -> str | None:
        return self.leader.id if self.leader is not None and self.leader.alive else None

    def replica_died(self, replica: Agent) -> None:
        if replica is self.leader:
            # Its memory is gone; what it wrote to the log is not. Its lease runs out unrenewed, and a
            # resurrected replica comes back as a standby. Nobody dispatches until a new leader.
            self.leader = None
            self._deposed = replica
            self._since = self.log()  # with the assignments workers held: they are the dead leader's too
            self.state = None
            self._queue.pause_dispatch()
            self._events.record(self._now(), "leader", state="lost", replica=replica.id)

    def tick(self, now: float) -> None:
        leader = self.leader
        if leader is not None and leader.alive:
            self.lease_expires = now + self.cfg.lease_ttl
            self._expire_task_leases(now)
            if now - self._checkpoint_at >= self.cfg.checkpoint_interval:
                self._take_checkpoint(now)
        elif now >= self.lease_expires:
            self._elect(now)
        for callback in self.on_tick:
            callback(now)

    def _elect(self, now: float) -> None:
        ready = [r for r in self.replicas if r.alive and r.gate.is_set()]
        standbys = [r for r in ready if r is not self._deposed]
        if not ready:
            return  # every replica is down: no dispatch until the supervisor brings one back
        candidate = (standbys or ready)[0]
        restored = self.restore()
        self.leader = candidate
        self.state = restored
        self.lease_expires = now + self.cfg.lease_ttl
        self.elections += 1
        unacked = sorted(restored.values(), key=lambda a: a[0].id)
        for task, _, _ in reversed(unacked):
            self._queue.requeue(task)
        self.redispatched += len(unacked)
        self._take_checkpoint(now)
        self._queue.resume_dispatch()
        self._events.record(now - self._t0, "leader", state="elected", replica=candidate.id, redispatched=len(unacked))

    def restore(self) -> State:
        """The dispatch state rebuilt from the latest checkpoint plus the log since."""
        state = dict(self._checkpoint)
        for task_id, op in self.log().items():
            if op is None:
                state.pop(task_id, None)
            else:
                state[task_id] = op
        return state

    def _take_checkpoint(self, now: float) -> None:
        if self.state is not None:
            self._gather()
            self._checkpoint = dict(self.state)
            self._since = {}  # the log from the leader's death, replayed into the state: an election's checkpoint
            self._checkpoint_at = now

    def _expire_task_leases(self, now: float) -> None:
        self._gather(now)
        state = self.state
        if not state:
            return
        expired = [task for task, _, deadline in state.values() if deadline <= now]
        for task in sorted(expired, key=lambda t: t.id, reverse=True):
            del state[task.id]
            self._queue.requeue(task)
        if expired:
            self.lease_expired += len(expired)
            self.redispatched += len(expired)

    def held(self) -> Iterator[Task]:
        """Tasks the dispatch state answers for (from the log while there is no leader)."""
        self._gather()
        state = self.state if self.state is not None else self.restore()
        for task, _, _ in state.values():
            yield task

    def _now(self) -> float:
        return self._clock.now() - self._t0

    async def run(self) -> None:
        """The replicas' heartbeat (renew the lease, sweep task leases, checkpoint, elect), as callbacks on the
        clock (``every``) for as long as this coroutine runs: a beat at ``t`` comes before coroutines' work at ``t``."""
        interval = self.cfg.renew_interval
        now = self._clock.now
        await every(self._clock, lambda k: self._t0 + k * interval, lambda _: self.tick(now()))
