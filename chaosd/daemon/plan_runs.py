"""Survival and scenario runs against the live pipeline: started in steady state, judged on their own window."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from chaosd.core.errors import Conflict, FaultError, NotFound
from chaosd.core.history import RecentLog
from chaosd.daemon.fault_control import FaultControl
from chaosd.daemon.gate import Gate
from chaosd.daemon.measure import LiveMeasure
from chaosd.experiment.plans import (
    Plan,
    Tally,
    check_actions,
    check_expectations,
    check_speed,
    evaluate_expectations,
    scenario_plan,
    survival_plan,
    survival_timing,
    verdicts_due,
)
from chaosd.experiment.report import rounded
from chaosd.experiment.runner import Experiment
from chaosd.experiment.scenario import Scenario
from chaosd.faults import CATALOGUE, FaultRecord
from chaosd.faults.catalogue import is_remedy
from chaosd.faults.incidents import IncidentBook
from chaosd.views import ExpectationView, PlanEnd, PlanKind, PlanReport, PlanState, PlanStatus
from chaosd.views.wire import PENDING

__all__ = ["PlanRun", "PlanRunner"]

log = logging.getLogger("chaosd")


@dataclass
class PlanRun:
    """A survival or scenario run against the live pipeline."""

    kind: PlanKind
    name: str
    started_at: float
    duration: float
    state: PlanState = "running"  # running → finished | stopped | failed
    ended_at: float | None = None
    reason: str | None = None
    log: RecentLog = field(default_factory=lambda: RecentLog(1000))  # the newest history.entries
    expectations: list[ExpectationView] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    before: Tally | None = None  # the task counts when it started: its window is what happened since
    final: PlanReport | None = None  # its window report as it ended (see PlanRunner.report)
    book: IncidentBook | None = None  # its incidents' running totals, for its score

    def owns(self, record: FaultRecord) -> bool:
        return record.owner is self

    def stretch(self, seconds: float) -> None:
        """Its plan waited ``seconds`` to keep two faults apart (a sped-up scenario): it lasts that much longer."""
        self.duration += seconds


class PlanRunner:
    """One survival and one scenario at a time (the last of each is kept); it owns and cancels their tasks."""

    def __init__(self, experiment: Experiment, gate: Gate, faults: FaultControl, measure: LiveMeasure) -> None:
        self._exp = experiment
        self._gate = gate
        self._faults = faults
        self._measure = measure
        self.survival: PlanRun | None = None
        self.scenario: PlanRun | None = None
        self.problems: list[str] = []  # crashed plans, for /readyz

    def start_survival(
        self, interval: float, duration: float, actions: tuple[str, ...] | None, *, overlap: bool = False
    ) -> PlanRun:
        """Inject a random fault every ``interval`` for ``duration``; see :func:`survival_plan`.

        By default faults do not overlap (an ``interval`` too short for that is refused, 422 on
        ``interval``); ``overlap`` lets each last twice the interval, so they stack.
        """
        self._gate.check()
        if self.survival is not None and self.survival.state == "running":
            raise Conflict("survival", "survival mode is already running; stop it first")
        chosen = actions or tuple(sorted(CATALOGUE))
        unknown = [a for a in chosen if a not in CATALOGUE]
        if unknown:
            raise FaultError("actions", f"unknown action {unknown[0]!r} (valid: {', '.join(sorted(CATALOGUE))})")
        settings = self._exp.settings
        ttl, room = survival_timing(
            interval,
            default_ttl=settings.faults.default_ttl,
            max_ttl=settings.faults.max_ttl,
            confirm=settings.recovery.confirm,
            overlap=overlap,
        )
        if self._exp.injector.lever is not None:
            raise Conflict("survival", f"the safety lever is pulled ({self._exp.injector.lever})")
        run = self._new_run("survival", "survival", duration)
        plan = survival_plan(
            interval,
            chosen,
            settings.seed,
            ttl=ttl,
            room=room,
            last_at=max(0.0, duration - ttl),
            log=run.log,
            owner=run,
        )
        # Overlapping faults are what `overlap` asks for: such a survival does not wait for an open incident.
        run.task = asyncio.create_task(self._drive(run, plan, steady=not overlap), name="survival")
        self.survival = run
        self._exp.events.record(
            run.started_at, "survival", state="started", interval_s=interval, duration_s=duration, overlap=overlap
        )
        return run

    def start_scenario(self, scenario: Scenario, speed: float, source: str) -> PlanRun:
        """Run ``scenario`` against the live pipeline, ``speed`` times faster; refuse what cannot be judged.

        Without ``duration`` it lasts until its last fault ends plus ``SETTLE_S``. A ``speed`` that leaves
        a fault too little time to be seen recovering is refused (422 on ``speed``, naming the largest
        that works). Its expectations are judged on its own window: see :meth:`report`.
        """
        self._gate.check()
        if self.scenario is not None and self.scenario.state == "running":
            raise Conflict("scenario", f"scenario {self.scenario.name!r} is running; stop it first")
        settings = self._exp.settings
        check_actions(scenario.actions, source, settings.faults.max_ttl)
        check_expectations(scenario.expect, source)
        check_speed(scenario, speed, settings.faults.default_ttl, settings.recovery.confirm)
        duration = scenario.run_duration(settings.faults.default_ttl) / speed
        run = self._new_run("scenario", scenario.name, duration)
        plan = scenario_plan(scenario.actions, speed=speed, log=run.log, owner=run, stretch=run.stretch)
        run.task = asyncio.create_task(self._drive(run, plan, scenario.expect), name="scenario")
        self.scenario = run
        self._exp.events.record(run.started_at, "scenario", name=scenario.name, state="started", speed=speed)
        return run

    def _new_run(self, kind: PlanKind, name: str, duration: float) -> PlanRun:
        run = PlanRun(kind, name, self._exp.pipeline.elapsed(), duration)
        run.log = RecentLog(self._exp.settings.history.entries)
        run.book = self._measure.open_book(run.owns)
        run.before = self._measure.tally()
        return run

    def _open_incident(self) -> tuple[int, list[FaultRecord]] | None:
        """The incident still open (a fault of it active or not yet judged), and its faults; None in steady state.

        A fault joins the open incident whatever injected it, so a plan started now would have its faults
        judged with it: only one incident can be open (a new one begins once the last has its verdict).
        """
        injector = self._exp.injector
        pending = [f for f in injector.in_play if f.outcome in PENDING and not is_remedy(f.action)]
        if not pending:
            return None
        number = pending[-1].incident
        incident = injector.incidents.get(number)
        members = list(incident.members) if incident is not None else pending
        return number, members

    async def _await_steady(self, run: PlanRun) -> str | None:
        """Before a plan's first fault: wait for the open incident's verdict; None once steady, else why not.

        Bounded: the injector judges a fault within ``recovery.limit`` of its end, so the wait lasts at most
        the open faults' remaining TTL plus ``recovery.limit`` + ``recovery.confirm`` + 1 s. The plan's
        ``reason`` says what it waits for meanwhile; its window (and its duration) starts once steady.
        """
        found = self._open_incident()
        if found is None:
            return None
        exp = self._exp
        number, members = found
        now = exp.pipeline.elapsed()
        bound = verdicts_due(exp, members)
        names = ", ".join(f"{m.id} {m.action}" for m in members)
        run.reason = (
            f"waiting for steady state: incident {number} (faults {names}) is still open; "
            f"its faults would join it (at most {bound:g} s)"
        )
        run.log.append({"at": now, "action": "wait", "state": "waiting", "incident": number, "reason": run.reason})
        deadline = exp.clock.now() + bound
        while (found := self._open_incident()) is not None:
            left = deadline - exp.clock.now()
            if left <= 0:
                number, members = found
                names = ", ".join(f"{m.id} {m.action}" for m in members)
                return (
                    f"incident {number} (faults {names}) was still open after {bound:g} s: "
                    "the plan did not start, so its faults would not join it"
                )
            await self._faults.await_verdicts([m.id for m in found[1]], left)
        run.reason = None
        waited = exp.pipeline.elapsed() - now
        run.log.append({"at": exp.pipeline.elapsed(), "action": "wait", "state": "done", "waited_s": waited})
        run.started_at = exp.pipeline.elapsed()  # its window opens in steady state
        run.before = self._measure.tally()
        return None

    async def _drive(
        self, run: PlanRun, plan: Plan, expect: Mapping[str, object] | None = None, *, steady: bool = True
    ) -> None:
        exp = self._exp
        try:
            refused = await self._await_steady(run) if steady else None
            if refused is not None:
                run.reason = refused
                self._finish(run, "failed")
                return
            if run.kind == "scenario":  # it ends with its last action; a sped-up one may stretch (see stretch)
                await plan(exp)
            else:  # a TimeoutError means the run's time was up while its plan still had steps (survival)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(plan(exp), timeout=run.duration)
            remaining = run.started_at + run.duration - exp.pipeline.elapsed()
            if remaining > 0 and exp.injector.lever is None:
                await exp.clock.sleep(remaining)  # the last faults run out; the run lasts what was asked
            if run.kind == "scenario":  # expectations never judge a pending fault; bounded: one not
                # recovered within recovery.limit of its end is failed by the injector
                pending = self._measure.owned(run, pending=True)
                await self._faults.await_verdicts([f.id for f in pending], verdicts_due(exp, pending))
        except asyncio.CancelledError:
            run.reason = run.reason or "stopped"
            self._finish(run, "stopped")
            raise
        except Exception as exc:
            run.reason = f"{type(exc).__name__}: {exc}"
            self.problems.append(f"{run.kind} crashed: {run.reason}")
            log.exception("%s run crashed", run.kind)
            self._finish(run, "failed")
            return
        if run.kind == "scenario" and expect:
            run.expectations = evaluate_expectations(expect, self.report(run))
        if run.kind == "survival":
            if exp.injector.lever is not None:
                run.reason = f"stop condition: {exp.injector.lever}"
            self.revert_faults(run)  # normally none left: each ends by its TTL before the run does
        self._finish(run, "finished")

    def _finish(self, run: PlanRun, state: PlanEnd) -> None:
        run.state = state
        run.ended_at = self._exp.pipeline.elapsed()
        run.final = self.report(run)  # the window ends with the run: its status stops moving
        self._measure.forget_book(run.book)
        self._exp.events.record(run.ended_at, run.kind, name=run.name, state=state, reason=run.reason)

    def report(self, run: PlanRun) -> PlanReport:
        """What a plan's expectations judge, and its status scores: its own window, not the daemon's lifetime.

        Task counts and the score are the difference of the live counts between the plan's start and
        now (its end, once it has ended: the report is kept then); faults, incidents and actions are the
        plan's own. Its cost grows with the plan (its faults and log), not with the daemon's faults or timeline.
        """
        if run.final is not None:
            return run.final
        window = self._measure.measures(run, faults=True)
        window["actions"] = list(run.log)  # the newest history.entries
        return rounded(window)

    def status(self, run: PlanRun | None) -> PlanStatus:
        """A plan's progress. ``score`` is its own window's (from its start to its end, or to now while it
        runs: see :meth:`report`); ``daemon_score`` is the daemon's whole lifetime, as ``/api/v1/score``.
        """
        if run is None:
            return {"state": "idle"}
        window = run.final if run.final is not None else self._measure.measures(run, faults=False)
        now = self._exp.pipeline.elapsed()
        status: PlanStatus = {
            "kind": run.kind,
            "name": run.name,
            "state": run.state,
            "started_at": run.started_at,
            "ended_at": run.ended_at,
            "duration_s": run.duration,
            "elapsed_s": (run.ended_at if run.ended_at is not None else now) - run.started_at,
            "actions": run.log.ok,
            "log": run.log.newest(50),
            "reason": run.reason,
            "window": window["window"],
            "score": window["score"],
            "daemon_score": self._exp.live_score().as_dict(),
        }
        if run.kind == "scenario":
            status["expectations"] = run.expectations
            status["passed"] = all(e["passed"] for e in run.expectations) if run.state == "finished" else None
        return rounded(status)

    async def stop(self, run: PlanRun | None, what: str) -> PlanRun:
        """Stop ``run`` (a 404 on ``what`` when there is none); a survival's faults still active are reverted."""
        if run is None:
            raise NotFound(what, f"no {what} has run")
        if run.state == "running" and run.task is not None:
            run.reason = "stopped by request"
            run.task.cancel()
            await asyncio.gather(run.task, return_exceptions=True)
        if run.kind == "survival":
            reverted = self.revert_faults(run)
            if reverted:
                run.log.append({"at": self._exp.pipeline.elapsed(), "action": "stop", "reverted": reverted})
        return run

    async def stop_running(self, reason: str) -> None:
        """Cancel the plans still running, and wait for them to end (their faults stay: see ``revert_faults``)."""
        for run in (self.survival, self.scenario):
            if run is not None and run.state == "running" and run.task is not None:
                run.reason = reason
                run.task.cancel()
                await asyncio.gather(run.task, return_exceptions=True)

    def revert_faults(self, run: PlanRun) -> list[int]:
        """Revert the faults ``run`` injected that are still active; their ids."""
        reverted = []
        for record in self._measure.owned(run, pending=True):
            if record.active:
                self._faults.revert(record.id)
                reverted.append(record.id)
        return reverted

    def kept(self) -> list[PlanRun]:
        """The last survival and the last scenario, those that have run."""
        return [run for run in (self.survival, self.scenario) if run is not None]
