"""Worker agents: take a task, walk it through the stages, hand the outcome to the ledger."""

from __future__ import annotations

from collections.abc import Sequence

from chaosd.clock import Clock
from chaosd.histogram import LogHistogram
from chaosd.pipeline.ledger import Ledger
from chaosd.pipeline.queue import IngressQueue
from chaosd.pipeline.stages import StageRunner
from chaosd.pipeline.task import Task

__all__ = ["BusyMeter", "Worker"]

# A worker whose stages never wait (zero service time) still lets others run this often.
_YIELD_EVERY = 64


class BusyMeter:
    """Number of busy workers and its integral over clock time (utilisation's numerator)."""

    __slots__ = ("_t", "area", "busy")

    def __init__(self, t: float) -> None:
        self.busy = 0
        self.area = 0.0
        self._t = t

    def start(self, t: float) -> None:
        self.area += self.busy * (t - self._t)
        self._t = t
        self.busy += 1

    def stop(self, t: float) -> None:
        self.area += self.busy * (t - self._t)
        self._t = t
        self.busy -= 1

    def area_at(self, t: float) -> float:
        return self.area + self.busy * (t - self._t)


class Worker:
    """One worker agent: serves one task at a time, start to finish."""

    def __init__(
        self,
        *,
        stages: Sequence[StageRunner],
        queue: IngressQueue,
        ledger: Ledger,
        clock: Clock,
        busy: BusyMeter,
        wait: LogHistogram,
        sojourn: LogHistogram,
    ) -> None:
        self._stages = tuple(stages)
        self._queue = queue
        self._ledger = ledger
        self._clock = clock
        self._busy = busy
        self._wait = wait
        self._sojourn = sojourn
        self.current: Task | None = None

    async def run(self) -> None:
        queue = self._queue
        now = self._clock.now
        sleep = self._clock.sleep
        busy = self._busy
        wait_add = self._wait.add
        sojourn_add = self._sojourn.add
        ledger = self._ledger
        stages = self._stages
        served = 0
        while True:
            task = queue.get_nowait()
            if task is None:
                task = await queue.get()
                served = 0
            elif served >= _YIELD_EVERY:
                self.current = task
                await sleep(0)
                served = 0
            self.current = task
            t = now()
            task.started_at = t
            busy.start(t)
            wait_add(t - task.accepted_at)
            reason = None
            for stage in stages:
                if stage.simple:
                    service = stage.sample()
                    if service > 0.0:
                        await sleep(service)
                    continue
                reason = await stage.run()
                if reason is not None:
                    break
            t = now()
            busy.stop(t)
            if reason is None:
                sojourn_add(t - task.accepted_at)
                ledger.complete(task, t)
            else:
                ledger.fail(task, reason)
            self.current = None
            served += 1
