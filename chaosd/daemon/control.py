"""The daemon's controller: one live experiment, and the survival and scenario runs driven against it.

Everything the HTTP API does goes through here; it owns the background tasks it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from chaosd.core.errors import Conflict, FaultError, NotFound, Unavailable
from chaosd.core.history import RecentLog
from chaosd.events.log import Event
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
    window_report,
)
from chaosd.experiment.report import rounded
from chaosd.experiment.runner import Experiment
from chaosd.experiment.scenario import Scenario
from chaosd.experiment.score import ScoreWeights, diagnose
from chaosd.faults import CATALOGUE, FaultRecord
from chaosd.faults.incidents import IncidentBook
from chaosd.faults.injector import matches
from chaosd.telemetry.stages import StageWindow
from chaosd.views import (
    ExpectationView,
    FaultsBody,
    LiveCounts,
    LiveWindow,
    PlanEnd,
    PlanKind,
    PlanReport,
    PlanState,
    PlanStatus,
    ReportView,
    ScoreBody,
    StatusBody,
    TaskCounts,
    WindowReport,
    WindowSummary,
)
from chaosd.views.wire import PENDING, TERMINAL

__all__ = ["Controller", "PlanRun"]

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
    final: PlanReport | None = None  # its window report as it ended (see Controller.plan_report)
    book: IncidentBook | None = None  # its incidents' running totals, for its score

    def owns(self, record: FaultRecord) -> bool:
        return record.owner is self

    def stretch(self, seconds: float) -> None:
        """Its plan waited ``seconds`` to keep two faults apart (a sped-up scenario): it lasts that much longer."""
        self.duration += seconds


MAX_WINDOWS = 100  # windows kept (open ones, then the newest closed); the oldest closed one goes first


@dataclass
class Window:
    """A measurement window an experiment opens and closes: its own score, tasks and faults.

    Its faults are those injected while it was open (ids count up from 1 in injection order); its score
    reads its book, which counts every incident holding one of them, whether or not still in memory.
    """

    id: int
    name: str
    started_at: float
    before: Tally
    after_fault: int  # faults with a larger id were injected while it was open
    ended_at: float | None = None
    until_fault: int | None = None  # the last fault id of a closed window
    final: WindowReport | None = None
    book: IncidentBook | None = None  # its incidents' running totals, for its score

    @property
    def open(self) -> bool:
        return self.ended_at is None

    def owns(self, record: FaultRecord) -> bool:
        return self.after_fault < record.id and (self.until_fault is None or record.id <= self.until_fault)

    def summary(self) -> WindowSummary:
        return {
            "id": self.id,
            "name": self.name,
            "state": "open" if self.open else "closed",
            "started_at": self.started_at,
            "ended_at": self.ended_at,
        }


class Controller:
    """Faults, the lever, survival and scenarios on the daemon's experiment; refuses all once stopping."""

    def __init__(self, experiment: Experiment) -> None:
        self.exp = experiment
        self.stopping = False
        self.survival: PlanRun | None = None
        self.scenario: PlanRun | None = None
        self.windows: dict[int, Window] = {}  # at most MAX_WINDOWS
        self._window_ids = 0
        self.problems: list[str] = []  # crashed plans, for /readyz
        self.crashed: list[str] = []  # a crashed pipeline, for /healthz: the daemon needs a restart
        # The status body's per-stage figures: read per status request, over about the telemetry window.
        self.stage_window = StageWindow(
            lambda: experiment.pipeline.stages, experiment.clock.now, experiment.settings.telemetry.window
        )

    def refuse_new(self) -> None:
        """The first step of shutdown: no new fault from anyone (the injector refuses survival's too)."""
        self.stopping = True
        self.exp.injector.close("the daemon is shutting down and accepts no new faults")

    def _refuse_if_stopping(self) -> None:
        if self.stopping:
            raise Unavailable("action", "the daemon is shutting down and accepts no new faults")

    # --- faults and the lever -------------------------------------------------------------------

    def inject(
        self,
        action: str,
        target: str | None,
        params: dict[str, object],
        ttl: float | None,
        labels: dict[str, str] | None = None,
    ) -> FaultRecord:
        self._refuse_if_stopping()
        return self.exp.injector.inject(action, target, params, ttl, labels)

    def revert(self, fault_id: int) -> FaultRecord:
        return self.exp.injector.revert(fault_id)

    def revert_matching(self, labels: dict[str, str], actions: frozenset[str]) -> list[FaultRecord]:
        return self.exp.injector.revert_matching(labels, actions)

    def take_back(self, record: FaultRecord) -> None:
        """Revert a fault whose injection was not stored (the request is answered 503, as if never made)."""
        if record.active:
            self.exp.injector.revert(record.id, why="unstored")

    def fault(self, fault_id: int) -> FaultRecord:
        """A fault kept in memory (history.faults), or a 404 on ``id``."""
        return self.exp.injector.get(fault_id)

    def forgotten(self, fault_id: int) -> bool:
        """Injected in this run but older than the faults kept in memory: only storage still holds it."""
        injector = self.exp.injector
        return injector.faults.get(fault_id) is None and 0 < fault_id <= injector.injected

    def faults(
        self, active: bool | None, labels: dict[str, str], actions: frozenset[str], states: frozenset[str]
    ) -> FaultsBody:
        """The faults kept in memory (the newest history.faults) that are (not) ``active`` and the selector picks."""
        injector = self.exp.injector
        records: list[FaultRecord] = list(injector.faults)
        if active is not None:
            records = [f for f in records if f.active == active]
        if labels or actions or states:
            records = [f for f in records if matches(f, labels, actions, states)]
        return {
            "faults": [f.as_dict() for f in records],
            "lever": injector.lever,
            "injected": injector.injected,
            "first_in_memory": injector.faults.first_kept,
        }

    @property
    def lever(self) -> str | None:
        """Why the safety lever is pulled; None while it is not."""
        return self.exp.injector.lever

    def restore_lever(self, reason: str | None) -> None:
        """Pulled again as it was, when its release was not stored (no fault got in meanwhile: same request)."""
        self.exp.injector.lever = reason

    def pull_lever(self, reason: str) -> int:
        return self.exp.injector.pull_lever(reason)

    def release_lever(self) -> None:
        self._refuse_if_stopping()
        self.exp.injector.release_lever()

    # --- survival and scenarios ------------------------------------------------------------------

    def start_survival(
        self, interval: float, duration: float, actions: tuple[str, ...] | None, *, overlap: bool = False
    ) -> PlanRun:
        """Inject a random fault every ``interval`` for ``duration``; see :func:`survival_plan`.

        By default faults do not overlap (an ``interval`` too short for that is refused, 422 on
        ``interval``); ``overlap`` lets each last twice the interval, so they stack.
        """
        self._refuse_if_stopping()
        if self.survival is not None and self.survival.state == "running":
            raise Conflict("survival", "survival mode is already running; stop it first")
        chosen = actions or tuple(sorted(CATALOGUE))
        unknown = [a for a in chosen if a not in CATALOGUE]
        if unknown:
            raise FaultError("actions", f"unknown action {unknown[0]!r} (valid: {', '.join(sorted(CATALOGUE))})")
        cfg = self.exp.settings.faults
        ttl, room = survival_timing(
            interval,
            default_ttl=cfg.default_ttl,
            max_ttl=cfg.max_ttl,
            confirm=self.exp.settings.recovery.confirm,
            overlap=overlap,
        )
        if self.exp.injector.lever is not None:
            raise Conflict("survival", f"the safety lever is pulled ({self.exp.injector.lever})")
        run = self._new_run("survival", "survival", duration)
        run.before = Tally.of(self._counts())
        plan = survival_plan(
            interval,
            chosen,
            self.exp.settings.seed,
            ttl=ttl,
            room=room,
            last_at=max(0.0, duration - ttl),
            log=run.log,
            owner=run,
        )
        # Overlapping faults are what `overlap` asks for: such a survival does not wait for an open incident.
        run.task = asyncio.create_task(self._drive(run, plan, steady=not overlap), name="survival")
        self.survival = run
        self.exp.events.record(
            run.started_at, "survival", state="started", interval_s=interval, duration_s=duration, overlap=overlap
        )
        return run

    def start_scenario(self, scenario: Scenario, speed: float, source: str) -> PlanRun:
        """Run ``scenario`` against the live pipeline, ``speed`` times faster; refuse what cannot be judged.

        Without ``duration`` it lasts until its last fault ends plus ``SETTLE_S``. A ``speed`` that leaves
        a fault too little time to be seen recovering is refused (422 on ``speed``, naming the largest
        that works). Its expectations are judged on its own window: see :meth:`plan_report`.
        """
        self._refuse_if_stopping()
        if self.scenario is not None and self.scenario.state == "running":
            raise Conflict("scenario", f"scenario {self.scenario.name!r} is running; stop it first")
        settings = self.exp.settings
        check_actions(scenario.actions, source, settings.faults.max_ttl)
        check_expectations(scenario.expect, source)
        check_speed(scenario, speed, settings.faults.default_ttl, settings.recovery.confirm)
        duration = scenario.run_duration(settings.faults.default_ttl) / speed
        run = self._new_run("scenario", scenario.name, duration)
        run.before = Tally.of(self._counts())
        plan = scenario_plan(scenario.actions, speed=speed, log=run.log, owner=run, stretch=run.stretch)
        run.task = asyncio.create_task(self._drive(run, plan, scenario.expect), name="scenario")
        self.scenario = run
        self.exp.events.record(run.started_at, "scenario", name=scenario.name, state="started", speed=speed)
        return run

    def _new_run(self, kind: PlanKind, name: str, duration: float) -> PlanRun:
        run = PlanRun(kind, name, self.exp.pipeline.elapsed(), duration)
        run.log = RecentLog(self.exp.settings.history.entries)
        run.book = IncidentBook(run.owns)
        self.exp.injector.books.append(run.book)
        return run

    def _owned(self, run: PlanRun | Window, *, pending: bool = False) -> list[FaultRecord]:
        """The plan's or window's faults still in memory (history.faults), or only those without a verdict."""
        injector = self.exp.injector
        return [f for f in (injector.in_play if pending else injector.faults) if run.owns(f)]

    def _open_incident(self) -> tuple[int, list[FaultRecord]] | None:
        """The incident still open (a fault of it active or not yet judged), and its faults; None in steady state.

        A fault joins the open incident whatever injected it, so a plan started now would have its faults
        judged with it: only one incident can be open (a new one begins once the last has its verdict).
        """
        pending = [f for f in self.exp.injector.in_play if f.outcome in PENDING and f.action != "resume_agent"]
        if not pending:
            return None
        number = pending[-1].incident
        incident = self.exp.injector.incidents.get(number)
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
        number, members = found
        now = self.exp.pipeline.elapsed()
        bound = verdicts_due(self.exp, members)
        names = ", ".join(f"{m.id} {m.action}" for m in members)
        run.reason = (
            f"waiting for steady state: incident {number} (faults {names}) is still open; "
            f"its faults would join it (at most {bound:g} s)"
        )
        run.log.append({"at": now, "action": "wait", "state": "waiting", "incident": number, "reason": run.reason})
        deadline = self.exp.clock.now() + bound
        while (found := self._open_incident()) is not None:
            left = deadline - self.exp.clock.now()
            if left <= 0:
                number, members = found
                names = ", ".join(f"{m.id} {m.action}" for m in members)
                return (
                    f"incident {number} (faults {names}) was still open after {bound:g} s: "
                    "the plan did not start, so its faults would not join it"
                )
            await self.await_verdicts([m.id for m in found[1]], left)
        run.reason = None
        waited = self.exp.pipeline.elapsed() - now
        run.log.append({"at": self.exp.pipeline.elapsed(), "action": "wait", "state": "done", "waited_s": waited})
        run.started_at = self.exp.pipeline.elapsed()  # its window opens in steady state
        run.before = Tally.of(self._counts())
        return None

    async def _drive(
        self, run: PlanRun, plan: Plan, expect: Mapping[str, object] | None = None, *, steady: bool = True
    ) -> None:
        try:
            refused = await self._await_steady(run) if steady else None
            if refused is not None:
                run.reason = refused
                self._finish(run, "failed")
                return
            if run.kind == "scenario":  # it ends with its last action; a sped-up one may stretch (see stretch)
                await plan(self.exp)
            else:  # a TimeoutError means the run's time was up while its plan still had steps (survival)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(plan(self.exp), timeout=run.duration)
            remaining = run.started_at + run.duration - self.exp.pipeline.elapsed()
            if remaining > 0 and self.exp.injector.lever is None:
                await self.exp.clock.sleep(remaining)  # the last faults run out; the run lasts what was asked
            if run.kind == "scenario":  # expectations never judge a pending fault; bounded: one not
                # recovered within recovery.limit of its end is failed by the injector
                pending = self._owned(run, pending=True)
                await self.await_verdicts([f.id for f in pending], verdicts_due(self.exp, pending))
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
            run.expectations = evaluate_expectations(expect, self.plan_report(run))
        if run.kind == "survival":
            if self.exp.injector.lever is not None:
                run.reason = f"stop condition: {self.exp.injector.lever}"
            self.revert_faults(run)  # normally none left: each ends by its TTL before the run does
        self._finish(run, "finished")

    async def await_verdicts(self, fault_ids: Collection[int], timeout: float) -> None:
        """Until each fault has its verdict, woken by the verdict events themselves; or ``timeout`` seconds."""
        # Looked up among the faults in play, never by id in the memory window: a fault without its verdict
        # may have left it (history.faults), and is still awaited.
        wanted = set(fault_ids)
        pending = {f.id for f in self.exp.injector.in_play if f.id in wanted and f.outcome not in TERMINAL}
        if not pending or timeout <= 0:
            return
        done = asyncio.Event()

        def on_event(event: Event) -> None:
            if event.kind == "fault" and event.data.get("state") in TERMINAL:
                pending.discard(event.data.get("id"))
                if not pending:
                    done.set()

        unsubscribe = self.exp.events.subscribe(on_event)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), timeout)
        finally:
            unsubscribe()

    def _finish(self, run: PlanRun, state: PlanEnd) -> None:
        run.state = state
        run.ended_at = self.exp.pipeline.elapsed()
        run.final = self.plan_report(run)  # the window ends with the run: its status stops moving
        self._forget_book(run.book)
        self.exp.events.record(run.ended_at, run.kind, name=run.name, state=state, reason=run.reason)

    def plan_report(self, run: PlanRun) -> PlanReport:
        """What a plan's expectations judge, and its status scores: its own window, not the daemon's lifetime.

        Task counts and the score are the difference of the live counts between the plan's start and
        now (its end, once it has ended: the report is kept then); faults, incidents and actions are the
        plan's own. Its cost grows with the plan (its faults and log), not with the daemon's faults or timeline.
        """
        if run.final is not None:
            return run.final
        window = self._window(run, faults=True)
        window["actions"] = list(run.log)  # the newest history.entries
        return rounded(window)

    # --- measurement windows --------------------------------------------------------------------

    def open_window(self, name: str | None) -> Window:
        """Start measuring from now; the daemon's own score goes on as it was."""
        if sum(1 for w in self.windows.values() if w.open) >= MAX_WINDOWS:
            raise Conflict("window", f"{MAX_WINDOWS} windows are open; close one first")
        self._window_ids += 1
        injector = self.exp.injector
        window = Window(
            id=self._window_ids,
            name=name or f"window-{self._window_ids}",
            started_at=self.exp.pipeline.elapsed(),
            before=Tally.of(self._counts()),
            after_fault=injector.injected,
        )
        window.book = IncidentBook(window.owns)
        injector.books.append(window.book)
        self.windows[window.id] = window
        closed = [w for w in self.windows.values() if not w.open]
        for old in closed[: max(0, len(self.windows) - MAX_WINDOWS)]:
            del self.windows[old.id]
        self.exp.events.record(window.started_at, "window", id=window.id, name=window.name, state="opened")
        return window

    def discard_window(self, window: Window) -> None:
        """Forget a window whose opening was not stored, as if it had never been opened."""
        if window.open:
            self.close_window(window.id)
        self.windows.pop(window.id, None)

    def reopen_window(self, window: Window) -> None:
        """Open again a window whose closing was not stored, counting on as if it had never closed."""
        window.ended_at = window.until_fault = window.final = None
        if window.book is not None:
            self.exp.injector.books.append(window.book)

    def window(self, window_id: int) -> Window:
        found = self.windows.get(window_id)
        if found is None:
            raise NotFound("id", f"no window {window_id} (the newest {MAX_WINDOWS} are kept)")
        return found

    def window_report(self, window: Window) -> WindowReport:
        """The window's own tasks, score, faults, incidents and diagnostics (frozen once it is closed)."""
        if window.final is not None:
            return window.final
        report = self._window(window, faults=True)
        t = report["tasks"]
        causes = {
            "refused": t["rejected"],
            "failed": t["failed"],
            "late": t["late"],
            "degraded": t["degraded"],
            "lost": t["lost"],
            "duplicated": t["duplicated"],
            "faults_failed": sum(1 for f in report["faults"] if f["outcome"] == "failed"),
        }
        body: WindowReport = {
            **window.summary(),
            "tasks": report["tasks"],
            "score": report["score"],
            "faults": report["faults"],
            "incidents": report["incidents"],
            "window": report["window"],
            "diagnostics": [{"cause": c.cause, "count": c.count, "share": c.share} for c in diagnose(causes)],
        }
        return rounded(body)

    def close_window(self, window_id: int) -> WindowReport:
        window = self.window(window_id)
        if not window.open:
            raise Conflict("id", f"window {window_id} is already closed")
        window.ended_at = self.exp.pipeline.elapsed()
        window.until_fault = self.exp.injector.injected
        window.final = self.window_report(window)
        self._forget_book(window.book)
        score = window.final["score"]
        self.exp.events.record(
            window.ended_at,
            "window",
            id=window.id,
            name=window.name,
            state="closed",
            score=score.get("total"),
            grade=score.get("grade"),
            availability=score.get("availability"),
        )
        return window.final

    def _window(self, run: PlanRun | Window, *, faults: bool) -> PlanReport:
        """The plan's window now: task counts, score, incidents (and its faults as dicts, when ``faults``).

        The score needs the counts and the plan's incidents only; rendering every fault (``faults``)
        costs far more, so a status, which is polled, goes without.
        """
        records = self._owned(run)  # those still in memory: its score reads its book, which counted them all
        incidents = self.exp.injector.incidents
        numbers = sorted({f.incident for f in records if f.incident})
        now: LiveWindow = {
            **self._counts(),
            "faults": [f.as_dict() for f in records] if faults else [],
            "incidents": [i.as_dict() for n in numbers if (i := incidents.get(n)) is not None],
        }
        before = run.before or Tally()  # a plan without a snapshot: judged from the daemon's start
        ids = {f.id for f in records}
        weights = ScoreWeights.from_config(self.exp.settings.score)
        measures = window_report(before, now, ids, weights, run.book)
        end = run.ended_at if run.ended_at is not None else self.exp.pipeline.elapsed()
        return {
            "tasks": measures["tasks"],
            "score": measures["score"],
            "faults": measures["faults"],
            # The incidents holding its faults: what ``max_recovery_s`` judges (as the run report's do).
            "incidents": [i for i in now["incidents"] if ids.intersection(i["faults"])],
            "window": {"start_at": run.started_at, "end_at": end},
        }

    def _counts(self) -> LiveCounts:
        """The live report's task counts (what :meth:`Tally.of` reads), without building the whole report.

        ``Experiment.report()`` also renders every fault, incident and the timeline: too much for a status
        that is polled. These are the same numbers (``tests/system/test_plan_status.py`` holds them equal).
        """
        p = self.exp.pipeline
        m = p.ledger.measured
        _, lost, in_flight = self.exp.accounted()
        tasks: TaskCounts = {
            "offered": m.offered,
            "accepted": m.accepted,
            "completed": m.completed,
            "late": m.late,
            "degraded": m.degraded,
            "failed": m.failed,
            "rejected": m.rejected,
            "duplicated": p.audit.measured.count,
            "lost": lost,
            "in_flight": in_flight,
        }
        undetected = sum(store.undetected_reads for store in p.memory.values())
        return {"tasks": tasks, "diagnostics": [{"cause": "corruption_undetected", "count": undetected}]}

    def _forget_book(self, book: IncidentBook | None) -> None:
        """Its window has ended: the book stops counting (its plan's or window's report is final)."""
        books = self.exp.injector.books
        if book is not None and book in books:
            books.remove(book)

    async def stop_plan(self, run: PlanRun | None, what: str) -> PlanRun:
        if run is None:
            raise NotFound(what, f"no {what} has run")
        if run.state == "running" and run.task is not None:
            run.reason = "stopped by request"
            run.task.cancel()
            await asyncio.gather(run.task, return_exceptions=True)
        if run.kind == "survival":
            reverted = self.revert_faults(run)
            if reverted:
                run.log.append({"at": self.exp.pipeline.elapsed(), "action": "stop", "reverted": reverted})
        return run

    def revert_faults(self, run: PlanRun) -> list[int]:
        """Revert the faults ``run`` injected that are still active; their ids."""
        reverted = []
        for record in self._owned(run, pending=True):
            if record.active:
                self.revert(record.id)
                reverted.append(record.id)
        return reverted

    # --- what the daemon serves about the experiment -----------------------------------------------

    def pipeline_problems(self) -> list[str]:
        """Why the pipeline cannot serve now (for /readyz): its backend unreachable, or no telemetry yet."""
        problems = []
        backend = getattr(self.exp.pipeline, "backend_health", None)
        if backend is not None and (down := backend()):
            problems.append(down)  # the Redis runtime: unreachable now, and why
        if self.exp.telemetry.latest is None:
            problems.append("pipeline: no telemetry yet")
        return problems

    def status(self, run_id: str, started_unix: float) -> StatusBody:
        """The pipeline's snapshot: agents, leader, DAG, queue, detector, throttle, telemetry, score, plans."""
        exp = self.exp
        p = exp.pipeline
        snap = exp.telemetry.latest
        backend = getattr(p, "backend_health", None)
        return {
            "run_id": run_id,
            "started_unix": started_unix,
            "uptime_s": p.elapsed(),
            "agents": [
                {"id": a.id, "kind": a.kind, "state": a.state, "restarts": a.restart_count, "gave_up": a.gave_up}
                for a in p.agents.values()
            ],
            "leader": p.dispatcher.leader_id,
            "route": list(p.route_names or ()),
            "dag": {
                "nodes": sorted(p.dag.edges),
                "edges": sorted(f"{a}->{b}" for a, succ in p.dag.edges.items() for b in succ),
                "removed_nodes": sorted(p.dag.removed_nodes),
                "removed_edges": sorted(f"{a}->{b}" for a, b in p.dag.removed_edges),
                "breakers_open": sorted(p.avoided),
                "dependencies": [
                    f"{n}/{d}" for n, stage in sorted(p.stages.items()) for d in sorted(stage.dependencies)
                ],
                "stages": self.stage_window.figures(),
            },
            "queue": {"depth": p.queue.depth, "capacity": p.queue.capacity},
            "detector": exp.detector.state.value,
            "throttle_factor": exp.throttle.factor,
            "admission": {
                "policy": exp.throttle.policy,
                "limit": exp.throttle.limit,
                "standing": exp.throttle.standing,
                "capacity_per_s": snap.capacity_rate if snap is not None else 0.0,
                "shed_per_s": snap.shed_rate if snap is not None else 0.0,
            },
            "backend": backend() if backend is not None else None,
            "telemetry": snap.as_dict() if snap is not None else None,
            "score": exp.live_score().as_dict(),
            "faults_active": len(exp.injector.active()),
            "lever": exp.injector.lever,
            "survival": self.survival.state if self.survival is not None else "idle",
            "scenario": self.scenario.state if self.scenario is not None else "idle",
            "stopping": self.stopping,
        }

    def score(self) -> ScoreBody:
        """The daemon's live score, with its fault totals."""
        exp = self.exp
        return {
            **exp.live_score().as_dict(),
            "faults_injected": exp.injector.injected,
            "faults_recovered": exp.injector.outcomes["recovered"],
        }

    def report(self) -> ReportView:
        """The run report so far, listing the newest history.report faults and incidents."""
        return self.exp.report(listed=self.exp.settings.history.report)

    def sizes(self) -> dict[str, int]:
        """How many entries each long-lived in-memory structure holds now (for bounds, soak and tests)."""
        exp = self.exp
        p = exp.pipeline
        plans = [run for run in (self.survival, self.scenario) if run is not None]
        return {
            "faults": len(exp.injector.faults),
            "faults_pending": len(exp.injector.in_play),
            "incidents": len(exp.injector.incidents),
            "timeline": exp.timeline_points,
            "plan_log": len(exp.plan_log) + sum(len(run.log) for run in plans),
            "collapse_episodes": len(exp.detector.episodes),
            "throttle_actions": len(exp.throttle.actions),
            "restarts": sum(len(a.restarts) for a in p.agents.values()),
            "events": len(exp.events),
            "windows": len(self.windows),
            "dispatch_log": p.dispatcher.log_size,
            "in_flight": len(p.ledger.in_flight),
            "queue_blocked": len(p.queue.blocked),
        }

    def plan_status(self, run: PlanRun | None) -> PlanStatus:
        """A plan's progress. ``score`` is its own window's (from its start to its end, or to now while it
        runs: see :meth:`plan_report`); ``daemon_score`` is the daemon's whole lifetime, as ``/api/v1/score``.
        """
        if run is None:
            return {"state": "idle"}
        window = run.final if run.final is not None else self._window(run, faults=False)
        now = self.exp.pipeline.elapsed()
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
            "daemon_score": self.exp.live_score().as_dict(),
        }
        if run.kind == "scenario":
            status["expectations"] = run.expectations
            status["passed"] = all(e["passed"] for e in run.expectations) if run.state == "finished" else None
        return rounded(status)

    async def shutdown(self) -> int:
        """Refuse new faults, stop the plans, revert every active fault. Returns how many were reverted."""
        self.refuse_new()
        for run in (self.survival, self.scenario):
            if run is not None and run.state == "running" and run.task is not None:
                run.reason = "daemon shutting down"
                run.task.cancel()
                await asyncio.gather(run.task, return_exceptions=True)
        return self.exp.injector.revert_all("shutdown")
