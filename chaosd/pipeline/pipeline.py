"""Assembles producers, the ingress queue, workers and the ledger, and owns their tasks."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

from chaosd.clock import Clock
from chaosd.config import Settings
from chaosd.histogram import LogHistogram
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.load import LoadShape
from chaosd.pipeline.producer import Admission, Producer
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.stages import StageRunner
from chaosd.pipeline.task import Task
from chaosd.pipeline.worker import BusyMeter, Worker
from chaosd.rng import Streams

__all__ = ["Pipeline"]


class _Open:
    """Admission when nobody throttles."""

    factor = 1.0


class Pipeline:
    """The running system under test. ``async with pipeline.running():`` starts and stops it."""

    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        *,
        admission: Admission | None = None,
        measure_from: float = 0.0,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.t0 = clock.now()
        streams = Streams(settings.seed)
        load = settings.load
        self.shape = LoadShape(load.rate, load.phases)
        self.ledger = Ledger(load.deadline)
        self.queue = IngressQueue(settings.queue.capacity, settings.queue.when_full, clock)
        self.busy = BusyMeter(self.t0)
        self.wait = LogHistogram()
        self.sojourn = LogHistogram()
        self.admission: Admission = admission if admission is not None else _Open()
        ids = itertools.count(1)
        n = load.producers
        self.producers = [
            Producer(
                share=1.0 / n,
                shape=self.shape,
                arrival=load.arrival,
                burst_size=load.burst_size,
                rng=streams.stream(f"arrivals:{i}"),
                queue=self.queue,
                ledger=self.ledger,
                admission=self.admission,
                clock=clock,
                ids=ids,
                t0=self.t0,
                measure_from=self.t0 + measure_from,
                phase=i / n,
            )
            for i in range(n)
        ]
        self.stages = [
            StageRunner(stage, streams.stream(f"service:{stage.name}"), self.queue, self.ledger, clock)
            for stage in settings.stages
        ]
        self.workers = [
            Worker(
                stages=self.stages,
                queue=self.queue,
                ledger=self.ledger,
                clock=clock,
                busy=self.busy,
                wait=self.wait,
                sojourn=self.sojourn,
            )
            for _ in range(settings.workers.count)
        ]
        self.mean_service = sum(s.service.expected() for s in settings.stages)

    def elapsed(self) -> float:
        return self.clock.now() - self.t0

    def holders(self) -> Iterator[Task]:
        """Every task somebody holds: waiting in the queue, blocked at admission, or in service."""
        yield from self.queue.waiting()
        for worker in self.workers:
            if worker.current is not None:
                yield worker.current

    def in_service(self) -> int:
        return sum(1 for w in self.workers if w.current is not None)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Pipeline]:
        """Run workers and producers for the body of the ``async with``; cancel and await them after.

        They live in a task group: if one crashes, the body is cancelled and the error propagates.
        """
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(w.run(), name=f"worker-{i}") for i, w in enumerate(self.workers)]
            tasks += [group.create_task(p.run(), name=f"producer-{i}") for i, p in enumerate(self.producers)]
            try:
                yield self
            finally:
                for task in tasks:
                    task.cancel()
