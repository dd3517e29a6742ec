"""The daemon's books on Redis: each result the sink applied, read back, becomes an outcome in the ledger."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chaosd.backends.redis.queue import RedisQueue
from chaosd.backends.redis.replies import Result
from chaosd.core.histogram import LogHistogram
from chaosd.pipeline.agents import Agent
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import BusyMeter

__all__ = ["Books", "RemoteBusy"]

_UNSERVED = frozenset({"expired", "abandoned"})  # failures a worker process reports without serving the task


class RemoteBusy(BusyMeter):
    """Busy workers (from heartbeats) and the service time they reported (utilisation's numerator)."""

    def area_at(self, t: float) -> float:
        return self.area

    def restart(self, t0: float) -> None:
        """Count from ``t0`` again (the processes are ready: the time they took to start is nobody's service)."""
        self.busy = 0
        self.area = 0.0
        self.since = t0


class Books:
    """Results into the ledger, the histograms and the busy time; ``last`` is the results stream's read position."""

    def __init__(
        self,
        ledger: Ledger,
        stream: RedisQueue,
        busy: RemoteBusy,
        wait: LogHistogram,
        sojourn: LogHistogram,
        agents: Mapping[str, Agent],
    ) -> None:
        self._ledger = ledger
        self._stream = stream
        self._busy = busy
        self._wait = wait
        self._sojourn = sojourn
        self._agents = agents
        self.last = "0-0"
        self.read = 0  # results booked
        self._early: list[Result] = []  # results read before their task's acceptance was booked

    @property
    def behind(self) -> bool:
        """Results read early, waiting for their tasks' acceptance."""
        return bool(self._early)

    def rewind(self) -> None:
        """The results stream starts again from its beginning (Redis came back empty)."""
        self.last = "0-0"

    def book(self, results: Sequence[Result]) -> None:
        """Each result is an effect the sink applied: the ledger, the histograms and the busy time hear of it."""
        ledger = self._ledger
        in_flight = ledger.in_flight
        submitting = self._stream.submitting
        offset = self._stream.offset
        agents = self._agents
        if results:
            self.last = results[-1].entry
        early, self._early = self._early, []
        for r in (*early, *results):
            tid = r.task_id
            task = in_flight.get(tid)
            if task is None and tid in submitting:
                # The worker was quicker than this loop: its result came back before the answer to the task's
                # submission was booked. Booked at a later read, once accepted; not taken for a second outcome.
                self._early.append(r)
                continue
            self.read += 1
            first = task is not None
            if task is None:
                task = Task(tid, r.accepted - offset, r.measured)
                task.accepted_at = r.accepted - offset
            # Else dropped unserved (drop_expired, or the caller's patience ran out): no wait, no service, as in memory.
            served = r.reason not in _UNSERVED
            if r.first_dispatch and first and served:
                self._wait.add(r.started - r.accepted)
            self._busy.area += r.ended - r.started
            if r.reason == "abandoned" and first:
                # The worker's take is the truth: the caller hangs up now (abandoned "patience", gave up), not at its
                # leave time, so it is never both served and gone. The queue's hook books it as the in-memory one.
                self._stream.on_renege(task)
            elif r.reason:
                ledger.fail(task, r.reason)
            else:
                if first:
                    self._sojourn.add(r.ended - r.accepted)
                ledger.complete(task, r.ended - offset, r.degraded)
            worker = agents.get(r.worker)
            if worker is not None and served:
                worker.served += 1
