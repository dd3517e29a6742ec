"""A task's walk along the route: its stages in order, the first failure ending it, a skipped stage degrading it.

Both backends' workers walk their tasks with :class:`StageWalker`; they differ only in how a task reaches them and
how its outcome leaves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from chaosd.core.clock import Clock
from chaosd.pipeline.stages import DEGRADED, Degraded, StageRunner
from chaosd.pipeline.task import Task
from chaosd.pipeline.tracing import TaskEnd, TaskTracer
from chaosd.views import FailReason

__all__ = ["Claims", "StageWalker", "Walk", "WalkOutcome", "WorkerFlags"]

# How a walk ended: None when the task got through every stage, DEGRADED when it went on without a stage's result.
WalkOutcome = FailReason | Degraded | None


@dataclass(frozen=True, slots=True)
class Walk:
    """The route as workers walk it: the stages to run, and the optional ones skipped, which make it degraded."""

    stages: tuple[StageRunner, ...]
    bypassed: tuple[StageRunner, ...] = ()

    def count_bypassed(self) -> Degraded:
        """A task got through without the skipped stages' results: degraded, like a tool given up on."""
        for skipped in self.bypassed:
            skipped.degraded += 1
        return DEGRADED


class WorkerFlags(Protocol):
    """What faults set on a worker that its walks read: its service-time factor, and whether it is cut off."""

    @property
    def slow(self) -> float: ...

    @property
    def partitioned(self) -> bool: ...


class Claims(Protocol):
    """The dispatch state: which worker holds a task, recorded before the walk first lets others run."""

    def assign(self, task: Task, worker: str, now: float) -> None: ...


class StageWalker:
    """One worker's walks: each task's stages served in route order, and how the walk ended.

    A simple stage (nothing can go wrong) is served inline: its service drawn, recorded and slept. How its sleep is
    timed is the backend's: ``coalesce`` sleeps a run of simple stages with one timer (a worker process's every
    wake-up is a scheduling delay); otherwise each sleeps on its own, on the model's schedule where the clock makes
    up lateness (``catch_up``). ``waited`` says whether the last walk awaited (and so claimed its task first).
    """

    __slots__ = ("_catch_up", "_claims", "_coalesce", "_flags", "_now", "_sleep", "_worker", "due", "waited")

    def __init__(
        self, clock: Clock, flags: WorkerFlags, worker: str, claims: Claims | None = None, *, coalesce: bool = False
    ) -> None:
        self._now = clock.now
        self._sleep = clock.sleep
        self._flags = flags
        self._worker = worker
        self._claims = claims  # None: the transport records who took a task as it delivers it
        self._coalesce = coalesce
        # Real time: a simple stage's service ends on the model's schedule, counted from when this worker was free
        # (its previous service's due end, ``due``) or the task arrived, whichever is later, so one late wake-up
        # does not push back every later service. At most ``catch_up`` of lateness is made up per task: the rest of
        # a longer delay (a stall) shows. What is measured (wait, sojourn) stays the clock's readings.
        self._catch_up = 0.0 if coalesce else clock.catch_up
        self.due = float("-inf")
        self.waited = False

    async def walk(self, task: Task, route: Walk | None, t: float) -> WalkOutcome:
        """``task``, taken at ``t``, along ``route`` (None: there is none)."""
        if route is None:
            self.waited = False
            return "no_route"
        slow = self._flags.slow
        sleep = self._sleep
        catch_up = self._catch_up
        coalesce = self._coalesce
        claims = self._claims
        outcome: WalkOutcome = None
        unsent = True  # the task is claimed just before the first await: until then nobody can see it is held
        pending = 0.0  # coalesced service not slept yet
        due = max(self.due, task.accepted_at, t - catch_up) if catch_up else 0.0
        for stage in route.stages:
            if stage.simple:
                service = stage.sample() * slow
                stage.stats.latency.add(service)
                if service > 0.0:
                    if unsent:
                        unsent = False
                        if claims is not None:
                            claims.assign(task, self._worker, t)
                    if catch_up:
                        due += service
                        await sleep(due - self._now())
                    elif coalesce:
                        pending += service
                    else:
                        await sleep(service)
                continue
            if pending > 0.0:
                await sleep(pending)
                pending = 0.0
            if unsent:
                unsent = False
                if claims is not None:
                    claims.assign(task, self._worker, t)
            ran = await stage.run(slow, task)
            if catch_up:
                due = self._now()  # a stage that times itself: the next one starts from when it ended
            if ran == DEGRADED:
                outcome = DEGRADED
            elif ran is not None:
                outcome = ran
                break
        if pending > 0.0:
            await sleep(pending)
        if catch_up:
            self.due = due
        self.waited = not unsent
        return outcome

    async def traced(self, task: Task, route: Walk | None, t: float, tracer: TaskTracer) -> WalkOutcome:
        """The slow path for a sampled task: the same work, each stage on its own timer, with a span per stage."""
        now = self._now
        if self._claims is not None:
            self._claims.assign(task, self._worker, t)
        self.waited = True
        handle = tracer.started(task, self._worker, t)
        slow = self._flags.slow
        outcome: WalkOutcome = None if route is not None else "no_route"
        for stage in route.stages if route is not None else ():
            begun = now()
            ran: WalkOutcome = None
            if stage.simple:
                service = stage.sample() * slow
                stage.stats.latency.add(service)
                if service > 0.0:
                    await self._sleep(service)
            else:
                ran = await stage.run(slow, task)
            tracer.stage(handle, stage.name, stage.kind, begun, now(), ran)
            if ran == DEGRADED:
                outcome = DEGRADED
            elif ran is not None:
                outcome = ran
                break
        ended: TaskEnd
        if outcome is not None and outcome != DEGRADED:
            ended = outcome
        else:
            ended = "lost_to_partition" if self._flags.partitioned else "completed"
        tracer.ended(handle, now(), ended)
        if self._catch_up:
            self.due = now()  # served off the schedule: the next task's service starts from here at the earliest
        return outcome
