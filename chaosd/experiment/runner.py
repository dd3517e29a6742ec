"""One experiment: the pipeline, its telemetry, detector and throttle, run for a while → a report.

The same coroutines run on the virtual loop (``chaosd run``) and the real one (the daemon).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from typing import TypeVar

from typing_extensions import TypedDict

from chaosd.admission.detector import CollapseDetector, DetectorState
from chaosd.admission.throttle import Throttle
from chaosd.backends import make_pipeline
from chaosd.config.settings import ClientsConfig, Settings
from chaosd.core.clock import Clock, LoopClock, every, new_event_loop, wall_time
from chaosd.core.history import RecentLog
from chaosd.core.hostwait import CpuWait
from chaosd.core.rng import Streams
from chaosd.core.version import __version__
from chaosd.events.log import EventLog
from chaosd.experiment.admission_report import collapse_view, throttle_view
from chaosd.experiment.measured import Mark, MeasuredSpan, load_view, queue_block, report_tasks
from chaosd.experiment.predict import predict
from chaosd.experiment.report import rounded
from chaosd.experiment.resilience import diagnostics, faults_summary, runtime_view
from chaosd.experiment.score import Score, ScoreInputs, ScoreWeights, compute_score
from chaosd.faults import Injector
from chaosd.telemetry.engine import Telemetry
from chaosd.telemetry.snapshot import Snapshot
from chaosd.telemetry.stages import stage_table
from chaosd.views import (
    CollapseView,
    DiagnosticView,
    ExpectationView,
    FaultsSummaryView,
    FaultView,
    IncidentView,
    PlanLogEntry,
    ReportTasks,
    ReportView,
    RuntimeView,
    ScoreView,
    TimelinePoint,
)

__all__ = ["Experiment", "run_offline"]

T = TypeVar("T")
# What a plan is (scenario actions, survival picks): chaosd.experiment.plans builds them, as its ``Plan``.
PlanFn = Callable[["Experiment"], Coroutine[object, object, None]]


class _Resilience(TypedDict):
    """The report's measurements of the faults and what they cost (:meth:`Experiment._resilience`)."""

    faults: list[FaultView]
    incidents: list[IncidentView]
    faults_summary: FaultsSummaryView
    runtime: RuntimeView
    score: ScoreView
    diagnostics: list[DiagnosticView]
    actions: list[PlanLogEntry]
    expectations: list[ExpectationView]


class Experiment:
    """Builds and runs one pipeline with its watchers on the running loop's clock."""

    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        *,
        warmup: float,
        scenario: str | None = None,
        virtual: bool = True,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.warmup = warmup
        self.scenario = scenario
        self.virtual = virtual
        self.events = EventLog()
        keep = settings.history
        tick = settings.telemetry.tick
        deadline = settings.load.deadline
        self.throttle = Throttle(
            settings.throttle, keep.entries, tick=tick, capacity=settings.queue.capacity, deadline=deadline
        )
        self.throttle.set_horizon(deadline, settings.clients.timeout)
        self.pipeline = make_pipeline(settings, clock, admission=self.throttle, measure_from=warmup, events=self.events)
        self.detector = CollapseDetector(
            settings.detector, tick, keep.entries, deadline=deadline, window=settings.telemetry.window
        )
        self.telemetry = Telemetry(settings.telemetry, self.pipeline, settings.detector.slope_window)
        self.pipeline.callers.retry_after = self._retry_after
        self._timeline: deque[TimelinePoint] = deque(maxlen=keep.timeline)
        self._next_sample = settings.run.timeline
        self._warm: Mark | None = None
        self._warm_seconds: dict[DetectorState, float] | None = None
        self.injector = Injector(
            settings.faults,
            settings.recovery,
            settings.slo,
            self.pipeline,
            Streams(settings.seed).stream("faults"),
            self.events,
            tick,
            keep.faults,
            stall=settings.detector.stall,
            window=settings.telemetry.window,
        )
        self.stop = asyncio.Event()
        self.plan_log = RecentLog(keep.entries)  # scenario actions and survival picks, as they happened
        self.expectations: list[ExpectationView] = []
        self._walked: tuple[float, tuple[int, int, int]] | None = None  # accounted(): the last walk, and when

    def _retry_after(self) -> float:
        """The hint a refusal carries (as HTTP's Retry-After): how long the queue needs to serve what waits in it
        and one more, at the capacity last measured; 0 before anything was measured."""
        snap = self.telemetry.latest
        rate = snap.capacity_rate if snap is not None else 0.0
        return (self.pipeline.queue.depth + 1) / rate if rate > 0 else 0.0

    def configure_clients(self, cfg: ClientsConfig) -> list[str]:
        """Push the callers' policy ``cfg`` (already validated) from now on, as a configuration push would: recorded
        as an event; admission's horizon follows the new timeout. Returns the keys that changed."""
        old = self.pipeline.callers.cfg
        changed = [key for key in type(cfg).model_fields if getattr(cfg, key) != getattr(old, key)]
        self.pipeline.configure_callers(cfg)
        self.throttle.set_horizon(self.throttle.deadline, cfg.timeout)
        self.events.record(
            self.clock.now() - self.pipeline.t0, "clients", clients=cfg.model_dump(mode="json"), changed=changed
        )
        return changed

    @property
    def timeline_points(self) -> int:
        """How many report timeline points are kept (at most ``history.timeline``)."""
        return len(self._timeline)

    def accounted(self, fresh: bool = False) -> tuple[int, int, int]:
        """``ledger.unaccounted(pipeline.holders())``: (lost among all tasks, lost among measured ones, measured
        still held).

        Finding a lost task walks every holder, a million of them behind a long backlog, and the score event,
        ``/metrics``, the status and the live report all ask. Tasks are lost only while a fault is in play (on
        the in-memory pipeline), so with none pending the last walk's lost counts still hold and the measured
        tasks still held are the measured ones in flight less those: counters, not a walk. The walk is redone
        anyway every 5 s, or every in-flight/20,000 s when more are in flight, which keeps its cost per task
        flat as the backlog grows; ``fresh`` (the final report) always walks.
        """
        p = self.pipeline
        ledger = p.ledger
        now = self.clock.now()
        walked = self._walked
        if (
            fresh
            or walked is None
            or not p.loss_needs_fault
            or self.injector.in_play
            or now - walked[0] >= max(5.0, len(ledger.in_flight) / 20_000)
        ):
            counts = ledger.unaccounted(p.holders())
            self._walked = (now, counts)
            return counts
        lost_all, lost_measured, _ = walked[1]
        m = ledger.measured
        return lost_all, lost_measured, m.accepted - m.completed - m.failed - lost_measured

    def _mark(self) -> Mark:
        return Mark.read(self.pipeline, self.clock.now())

    def _on_tick(self, snap: Snapshot) -> None:
        if self.settings.detector.enabled:
            transition = self.detector.update(snap)
            if transition is not None:
                self.events.record(
                    snap.t,
                    "detector",
                    old=transition.old.value,
                    new=transition.new.value,
                    reason=transition.reason,
                )
        throttle = self.throttle
        action = throttle.update(self.detector.state, snap)
        self.pipeline.queue.limit = throttle.limit
        if action is not None:
            self.events.record(snap.t, "throttle", action=action.action, factor=action.factor, limit=action.limit)
        # Failures are not the steady state: the injector's baseline does not learn while the detector says failing.
        self.injector.on_tick(snap, steady=self.detector.state is not DetectorState.FAILING)
        if snap.t + 1e-9 >= self._next_sample:
            self._next_sample += self.settings.run.timeline
            point: TimelinePoint = {
                "t": snap.t,
                "offered_per_s": snap.arrival_rate,
                "attempts_per_s": snap.attempt_rate,
                "retries_per_s": snap.caller_retry_rate,
                "abandoned_per_s": snap.abandon_rate,
                "wasted_per_s": snap.waste_rate,
                "throughput_per_s": snap.throughput,
                "goodput_per_s": snap.goodput,
                "queue_depth": snap.queue_depth,
                "sojourn_p95": snap.sojourn_p95,
                "utilisation": snap.utilisation,
                "state": self.detector.state.value,
                "throttle_factor": self.throttle.factor,
            }
            self._timeline.append(rounded(point))

    async def _ticker(self) -> None:
        """Telemetry ticks as callbacks on the clock (``every``), for as long as this coroutine runs: a tick at ``t``
        sums up the tick before whatever a plan or a fault's end does at ``t``."""
        tick = self.settings.telemetry.tick
        t0 = self.pipeline.t0
        clock = self.clock
        cpu = CpuWait(enabled=not self.virtual)  # opened here: the loop's thread is the one whose wait counts

        def due(k: int) -> float:
            return t0 + round(k * tick, 9)  # on the decimal grid: the tick at a run's end is at its very end

        def beat(k: int) -> None:
            self._on_tick(self.telemetry.tick(max(0.0, clock.now() - due(k)), cpu.take()))

        try:
            await every(clock, due, beat)
        finally:
            cpu.close()

    async def run(
        self,
        duration: float | None,
        stop: asyncio.Event | None = None,
        on_start: Callable[[], None] | None = None,
        plan: PlanFn | None = None,
    ) -> ReportView:
        """Run until ``duration`` seconds of clock time have passed or ``stop`` is set; return the report.

        ``plan`` (scenario actions, survival mode) runs beside the pipeline and may end the run early
        by setting ``experiment.stop``.
        """
        p = self.pipeline
        if stop is not None:
            self.stop = stop
        self.events.record(0.0, "run", state="started")
        async with p.running(), asyncio.TaskGroup() as group:
            ticker = group.create_task(self._ticker(), name="telemetry")
            planner = group.create_task(plan(self), name="plan") if plan is not None else None
            try:
                if on_start is not None:
                    on_start()
                await self._until(self.warmup, self.stop)
                self._warm = self._mark()
                self._warm_seconds = dict(self.detector.seconds)
                p.queue.reset_peaks()
                self.events.record(self._warm.t, "run", state="measuring")
                await self._until(duration, self.stop)
                self.injector.revert_all("shutdown")
                report = self.report()
            finally:
                ticker.cancel()
                if planner is not None:
                    planner.cancel()
        self.events.record(report["duration_s"], "run", state="stopped")
        return report

    async def _until(self, t: float | None, stop: asyncio.Event | None) -> None:
        if stop is not None and stop.is_set():
            return
        deadline = None if t is None else self.pipeline.t0 + t
        if stop is None:
            if deadline is not None:
                await self.clock.sleep_until(deadline)
            return
        waiters: list[asyncio.Future[object]] = [asyncio.ensure_future(stop.wait())]
        if deadline is not None:
            # On the clock itself, at exactly the deadline: a tick due then still comes first (see _ticker).
            waiters.append(asyncio.ensure_future(self.clock.sleep_until(deadline)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    def report(self, listed: int | None = None) -> ReportView:
        """The report over the measured window (warm-up excluded); public field names.

        ``listed``: how many of the newest faults and incidents to list (the live report's
        ``history.report``); None lists every one kept in memory (``history.faults``), as a final report does.
        Counts and the score are of every fault either way.
        """
        s = self.settings
        p = self.pipeline
        end = self._mark()
        span = MeasuredSpan(self._warm or end, end)
        tasks = report_tasks(p, self.accounted(fresh=listed is None))
        collapse = collapse_view(self.detector, s.detector.enabled, self._warm_seconds, end.t)
        resilience = self._resilience(tasks, collapse, listed)
        report: ReportView = {
            "chaosd_version": __version__,
            "scenario": self.scenario,
            "seed": s.seed,
            "clock": "virtual" if self.virtual else "real",
            "duration_s": end.t,
            "warmup_s": span.warm.t,
            "load": load_view(s, p, self.injector, span),
            "tasks": tasks,
            "throughput": span.throughput(),
            "queue": queue_block(s, p, span),
            "utilisation": span.utilisation(s.workers.count),
            "latency": span.latency(),
            "collapse": collapse,
            "throttle": throttle_view(self.throttle, p.ledger.measured),
            "timeline": [],  # filled in after rounding: its points were rounded as they were taken
            "faults": resilience["faults"],
            "incidents": resilience["incidents"],
            "faults_summary": resilience["faults_summary"],
            "runtime": resilience["runtime"],
            "score": resilience["score"],
            "diagnostics": resilience["diagnostics"],
            "actions": resilience["actions"],
            "expectations": resilience["expectations"],
            "stages": stage_table(p.stages, span.warm.stages, end.stages, self.clock.now()),
            "storm": predict(s.model_copy(update={"clients": p.callers.cfg})),  # the policy in force at the end
        }
        result = rounded(report)
        result["timeline"] = list(self._timeline)
        return result

    def live_score(self, accounted: tuple[int, int, int] | None = None) -> Score:
        """The score so far, from the same measurements as the report (for progress lines and status).

        ``accounted`` is :meth:`accounted` when the caller has just asked for it. Faults still
        active or recovering are pending (not judged yet, not failed); unmeasured ones have no verdict.
        """
        p = self.pipeline
        _, lost, in_flight = accounted if accounted is not None else self.accounted()
        m = p.ledger.measured
        # Judged per incident: overlapping faults share one recovery, an isolated fault is its own incident.
        # The injector's book has counted every incident as it closed: O(1), however long the run.
        book = self.injector.book
        return compute_score(
            ScoreInputs(
                offered=m.offered + m.retried - in_flight,
                accepted=m.accepted - in_flight,
                good=m.completed - m.late - m.degraded - m.wasted,
                # Each caller ends once: served (a completion it still waited for) or given up.
                callers=m.completed - m.wasted + m.gave_up if self.pipeline.callers.on or m.retried else None,
                lost=lost,
                duplicated=p.audit.measured.count,
                undetected_corruptions=sum(s.undetected_reads for s in p.memory.values()),
                faults_judged=book.judged,
                faults_recovered=book.recovered,
                recovery_times_s=(),
                recovery_total_s=book.recovery.value,
                faults_inconsistent=book.inconsistent,
            ),
            ScoreWeights.from_config(self.settings.score),
        )

    def _resilience(self, t: ReportTasks, collapse: CollapseView, listed: int | None) -> _Resilience:
        """Faults with their recoveries, the score, diagnostics — all from measurements of this run."""
        injector = self.injector
        # The newest history.faults (or ``listed``) faults and incidents; the counts are of all.
        faults = [f.as_dict() for f in _newest(injector.faults, listed)]
        score = self.live_score((t["lost_all_cohorts"], t["lost"], t["in_flight"]))
        found = diagnostics(self.pipeline, injector, t, collapse)
        incidents = [i.as_dict() for i in _newest(injector.incidents, listed)]
        return {
            "faults": faults,
            "incidents": incidents,
            "faults_summary": faults_summary(
                self.settings, injector, faults_listed=len(faults), incidents_listed=len(incidents)
            ),
            "runtime": runtime_view(self.pipeline),
            "score": score.as_dict(),
            "diagnostics": found,
            "actions": list(self.plan_log),
            "expectations": self.expectations,
        }


class _Interrupt:
    """The loop's handler for the stop signals: the first ends the run gently, so it still reports; a later one
    cancels the run, report and all.

    A second signal within ``_ECHO`` of the first is the same request delivered twice, not an insistence:
    ``timeout -s INT`` signals the child and then its process group, and wrappers forward the terminal's Ctrl-C.
    """

    _ECHO = 1.0  # wall seconds

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.task: asyncio.Task[ReportView] | None = None
        self.first: float | None = None
        self.forced = False

    def __call__(self) -> None:
        now = wall_time()
        if self.first is None:
            self.first = now
            self.stop.set()
        elif now - self.first >= self._ECHO and self.task is not None:
            self.forced = True
            self.task.cancel()


def _newest(kept: Iterable[T], count: int | None) -> Iterable[T]:
    """The last ``count`` of ``kept`` (all of them when ``count`` is None), oldest first."""
    if count is None:
        return kept
    return deque(kept, maxlen=count)


def run_offline(
    settings: Settings,
    *,
    duration: float,
    warmup: float,
    virtual: bool = True,
    scenario: str | None = None,
    plan: PlanFn | None = None,
    on_tick: Callable[[Snapshot], None] | None = None,
    stop_on: tuple[int, ...] = (),
) -> ReportView:
    """Run one experiment on a fresh loop (virtual time unless ``virtual`` is False); return its report.

    ``on_tick`` sees every telemetry snapshot (a progress display). A signal in ``stop_on`` ends the run at the
    loop's next turn, however far ahead virtual time is, and the report covers what ran; another one a second or
    more later abandons the run with ``KeyboardInterrupt``. ``report["interrupted"]`` says whether a signal ended
    the run.
    """
    loop = new_event_loop(virtual=virtual)
    clock = LoopClock(loop)
    stop = asyncio.Event()
    interrupt = _Interrupt(stop)

    async def main() -> ReportView:
        experiment = Experiment(settings, clock, warmup=warmup, scenario=scenario, virtual=virtual)
        if on_tick is not None:
            experiment.telemetry.listen(on_tick)
        return await experiment.run(duration, stop=stop, plan=plan)

    try:
        for sig in stop_on:
            loop.add_signal_handler(sig, interrupt)
        interrupt.task = loop.create_task(main(), name="experiment")
        try:
            report = loop.run_until_complete(interrupt.task)
        except asyncio.CancelledError:
            if interrupt.forced:
                raise KeyboardInterrupt from None
            raise
    finally:
        for sig in stop_on:
            loop.remove_signal_handler(sig)
        loop.close()
    report["interrupted"] = interrupt.first is not None
    return report
