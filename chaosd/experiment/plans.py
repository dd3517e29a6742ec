"""Plans that drive faults beside a run: a scenario's ARES-form actions, and survival mode; plus `expect:`.

A scenario's expectations are judged on a report: the run's (``chaosd run``), or the window the scenario
ran in on the daemon (:func:`window_report`, the difference of two :class:`Tally` snapshots).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Coroutine, Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from chaosd.config.settings import ClientsConfig
from chaosd.core.confidence import mean_ci
from chaosd.core.errors import FaultError, ScenarioError
from chaosd.core.history import RecentLog
from chaosd.core.humanize import host_stall, seconds
from chaosd.experiment.expectations import (
    EXPECT_KEYS,
    GRADES,
    Expectation,
    Expectations,
    JudgedReport,
    Measured,
    read_expectations,
)
from chaosd.experiment.runner import Experiment
from chaosd.experiment.scenario import CHECKS, ActionSpec, Scenario, ScenarioAction, split_metadata
from chaosd.experiment.score import ScoreInputs, ScoreWeights, compute_score, grade
from chaosd.faults import CATALOGUE, FaultRecord
from chaosd.faults.catalogue import is_remedy
from chaosd.faults.incidents import IncidentBook
from chaosd.views import (
    ExpectationView,
    ExpectedIncident,
    FaultView,
    IncidentView,
    LiveCounts,
    LiveWindow,
    PlanLogEntry,
    ReportView,
    TaskCounts,
    WindowMeasures,
)
from chaosd.views.wire import TERMINAL

__all__ = [
    "EXPECT_KEYS",
    "SURVIVAL_DEFAULT",
    "SURVIVAL_MARGIN",
    "SURVIVAL_MIN_TTL",
    "Plan",
    "Tally",
    "check_actions",
    "check_expectations",
    "check_speed",
    "evaluate_expectations",
    "evaluate_replicated",
    "parse_expectations",
    "scenario_plan",
    "survival_plan",
    "survival_timing",
    "window_report",
]

SURVIVAL_DEFAULT = tuple(sorted(CATALOGUE))
Plan = Callable[[Experiment], Coroutine[object, object, None]]


def check_actions(actions: Sequence[ScenarioAction], source: str, max_ttl: float) -> None:
    """Validate every action before anything runs: unknown types, bad parameters, bad durations."""
    problems: list[tuple[str, str, str]] = []
    for i, item in enumerate(actions):
        where = f"actions.{i}.action"
        kind = item.action.type
        if kind == "set_clients":
            problems.extend((source, f"{where}.metadata.{key}", why) for key, why in _clients_problems(item.action))
            continue
        if kind in CHECKS:
            continue
        spec = CATALOGUE.get(kind)
        if spec is None:
            valid = ", ".join((*sorted(CATALOGUE), *CHECKS))
            problems.append((source, f"{where}.type", f"unknown action {kind!r} (valid: {valid})"))
            continue
        try:
            ttl, params = split_metadata(item.action.metadata)
            spec.check_params(params)
        except FaultError as exc:
            problems.append((source, f"{where}.metadata.{exc.field.removeprefix('params.')}", exc.message))
            continue
        except (ValueError, TypeError) as exc:
            problems.append((source, f"{where}.metadata.duration", str(exc)))
            continue
        if ttl is not None and not 0 < ttl <= max_ttl:
            problems.append((source, f"{where}.metadata.duration", f"must be in (0, {max_ttl:g}] seconds"))
    if problems:
        raise ScenarioError(problems)


def scenario_plan(
    actions: Sequence[ScenarioAction],
    *,
    speed: float = 1.0,
    log: RecentLog | None = None,
    owner: object | None = None,
    stretch: Callable[[float], None] | None = None,
) -> Plan:
    """Inject each action after its delay (relative to the previous action).

    ``speed`` > 1 compresses delays and fault durations (a real-time daemon running a long scenario
    quickly); ``log`` collects what happened (default: the experiment's plan log).

    Compression never merges faults that do not overlap at speed 1: before a fault whose speed-1 start
    comes after an earlier fault's speed-1 end, a sped-up plan waits for that fault's verdict (bounded:
    the injector judges it within ``recovery.limit`` of its end), logs the wait as an ``action: wait``
    entry, and shifts the rest of its schedule by the wait; ``stretch`` is told each wait, in seconds.
    """

    async def plan(exp: Experiment) -> None:
        clock = exp.clock
        t0 = clock.now()
        entries = exp.plan_log if log is None else log
        at = 0.0
        at_1 = 0.0  # where the action falls at speed 1
        mine: list[tuple[FaultRecord, float, int]] = []  # its faults: record, speed-1 end, action index
        for index, item in enumerate(actions):
            at += item.delay / speed
            at_1 += item.delay
            await clock.sleep_until(t0 + at)
            spec = item.action
            if speed > 1 and spec.type not in CHECKS and not is_remedy(spec.type):
                apart = [(r, i) for r, end_1, i in mine if end_1 <= at_1 and r.outcome not in TERMINAL]
                if apart:
                    waited = await _await_apart(exp, apart, index, spec.type, entries)
                    t0 += waited
                    if stretch is not None and waited > 0:
                        stretch(waited)
            entry: PlanLogEntry = {"at": exp.pipeline.elapsed(), "action": spec.type, "target": spec.target_id}
            if spec.type in CHECKS:
                await _carry_out(exp, spec, entry)
                entries.append(entry)
                continue
            ttl, params = split_metadata(spec.metadata)
            if ttl is not None:
                ttl /= speed
            try:
                record = exp.injector.inject(spec.type, spec.target_id, params, ttl, owner=owner)
                entry["ok"], entry["fault"], entry["targets"] = True, record.id, list(record.targets)
                ttl_1 = record.ttl * speed  # its speed-1 TTL (the configured default when not given)
                mine.append((record, at_1 + ttl_1, index))
            except FaultError as exc:
                entry["ok"], entry["error"] = False, str(exc)
            entries.append(entry)

    return plan


async def _carry_out(exp: Experiment, spec: ActionSpec, entry: PlanLogEntry) -> None:
    """An action that injects no fault: a push of the callers' policy, or a check for a leader."""
    if spec.type == "set_clients":
        entry["ok"], entry["changed"] = True, exp.configure_clients(pushed_clients(exp, spec))
        return
    leader, waited = await _leader_within_failover(exp)
    entry["ok"], entry["leader"], entry["waited_s"] = leader is not None, leader, waited


def pushed_clients(exp: Experiment, spec: ActionSpec) -> ClientsConfig:
    """A ``set_clients`` action's policy: its metadata's keys over the policy in force (checked when loaded)."""
    current = exp.pipeline.callers.cfg.model_dump()
    return ClientsConfig.model_validate({**current, **spec.metadata})


def _clients_problems(spec: ActionSpec) -> list[tuple[str, str]]:
    """What is wrong with a ``set_clients`` action's metadata, as (key, why): each key as the config checks it."""
    try:
        ClientsConfig.model_validate(spec.metadata)
    except ValidationError as exc:
        return [(".".join(str(part) for part in e["loc"]), e["msg"]) for e in exc.errors()]
    return []


def verdicts_due(exp: Experiment, records: Sequence[FaultRecord]) -> float:
    """Seconds from now by which the injector has judged every one of ``records``: each gets its verdict within
    ``recovery.limit`` of its end (its revert, or its TTL), after a ``recovery.confirm`` hold; a second to spare."""
    now = exp.pipeline.elapsed()
    ends = [r.reverted_at if r.reverted_at is not None else r.injected_at + r.ttl for r in records]
    recovery = exp.settings.recovery
    return max([0.0, *(end - now for end in ends)]) + recovery.limit + recovery.confirm + 1.0


async def _await_apart(
    exp: Experiment,
    apart: Sequence[tuple[FaultRecord, int]],
    index: int,
    action: str,
    entries: RecentLog,
) -> float:
    """Wait for the verdicts of ``apart`` (faults that end before actions.``index`` starts at speed 1); the wait.

    Bounded: each is judged by the injector within ``recovery.limit`` of its end, so the wait ends by the
    latest end plus the limit (and a second to spare). The entry logged says what it waits for, as it waits.
    """
    clock = exp.clock
    start = clock.now()
    latest = start + verdicts_due(exp, [r for r, _ in apart])
    names = ", ".join(f"fault {r.id} (actions.{i} {r.action})" for r, i in apart)
    entry: PlanLogEntry = {
        "at": exp.pipeline.elapsed(),
        "action": "wait",
        "state": "waiting",
        "for": [r.id for r, _ in apart],
        "reason": f"actions.{index} ({action}) waits for the verdict of {names}: they do not overlap at "
        "speed 1, so they must not share an incident when sped up",
    }
    entries.append(entry)
    settled = True
    for record, _ in apart:
        settled = await _settled(exp, record, latest) and settled
    waited = clock.now() - start
    entry["state"], entry["waited_s"] = "done" if settled else "timed out", waited
    return waited


async def _leader_within_failover(exp: Experiment) -> tuple[str | None, float]:
    """The leader, waiting for one up to the failover bound (``lease_ttl + renew_interval``); and the wait.

    A standby can take over only once the dead leader's lease has run out: a check closer than that to
    a kill (a scenario run at ``--speed``) asks what the runtime never promised. The bound is not scaled.
    """
    cfg = exp.settings.orchestrator
    clock, dispatcher = exp.clock, exp.pipeline.dispatcher
    start = clock.now()
    deadline = start + cfg.lease_ttl + cfg.renew_interval
    while dispatcher.leader_id is None and clock.now() < deadline:
        await clock.sleep(min(cfg.renew_interval / 5, deadline - clock.now()))
    return dispatcher.leader_id, clock.now() - start


SURVIVAL_MIN_TTL = 1.0  # seconds: the shortest fault survival injects
SURVIVAL_MARGIN = 1.0  # seconds left beyond recovery.confirm for a recovery to show before the next fault


def survival_timing(
    interval: float, *, default_ttl: float, max_ttl: float, confirm: float, overlap: bool = False
) -> tuple[float, float | None]:
    """Survival's fault TTL for ``interval``, and the room left after each fault (None when faults overlap).

    By default a fault lasts ``interval`` less the room (``confirm`` + :data:`SURVIVAL_MARGIN`), so its
    recovery can be confirmed before the next one starts; an interval too short for
    :data:`SURVIVAL_MIN_TTL` plus the room is refused, naming ``interval``. With ``overlap`` faults last
    twice the interval (at least ``default_ttl``), so consecutive faults stack.
    """
    if overlap:
        return min(max_ttl, max(default_ttl, 2 * interval)), None
    room = confirm + SURVIVAL_MARGIN
    shortest = SURVIVAL_MIN_TTL + room
    if not interval >= shortest:
        raise FaultError(
            "interval",
            f"{interval:g} s is too short for faults that do not overlap: each needs at least "
            f"{SURVIVAL_MIN_TTL:g} s, then {room:g} s (recovery.confirm {confirm:g} s + {SURVIVAL_MARGIN:g} s) "
            f"for its recovery to show before the next; use an interval of at least {shortest:g} s, "
            "or let faults overlap",
        )
    return min(max_ttl, interval - room), room


def survival_plan(
    interval: float,
    actions: Sequence[str],
    seed: int,
    *,
    ttl: float | None = None,
    room: float | None = None,
    last_at: float | None = None,
    progress: Callable[[Experiment], None] | None = None,
    log: RecentLog | None = None,
    owner: object | None = None,
) -> Plan:
    """Every ``interval``: the next action of a shuffled round of ``actions``, on a random valid target.

    Rounds use every action once, so a long run exercises the whole subset; the run ends early
    when the safety lever is pulled. No fault starts after ``last_at`` (the run's end less the TTL),
    so every fault ends by its TTL.

    With ``room`` (see :func:`survival_timing`) faults do not overlap: each ends ``room`` seconds before
    the next slot, and the next waits for the previous one's verdict (recovered, failed, unmeasured).
    It starts no later than leaves it :data:`SURVIVAL_MIN_TTL` before that end, its TTL shortened to
    keep the schedule; if the previous fault is still recovering by then, the slot is skipped and logged
    as ``skipped: previous fault still recovering``.

    Without ``room`` faults last ``ttl`` (the configured default when None), so consecutive faults
    overlap when it exceeds the interval — that is what gives ``resume_agent`` a paused agent to resume.
    """
    unknown = [a for a in actions if a not in CATALOGUE]
    if unknown:
        raise FaultError("actions", f"unknown action {unknown[0]!r} (valid: {', '.join(sorted(CATALOGUE))})")
    return _Survival(interval, actions, seed, ttl, room, last_at, progress, log, owner).run


@dataclass(frozen=True)
class _Survival:
    """Survival mode's schedule (see :func:`survival_plan`): a slot every ``interval``, each taking the next action
    of the rounds, unless the previous fault's verdict is still due when faults must not overlap."""

    interval: float
    actions: Sequence[str]
    seed: int
    ttl: float | None
    room: float | None
    last_at: float | None
    progress: Callable[[Experiment], None] | None
    log: RecentLog | None
    owner: object | None

    async def run(self, exp: Experiment) -> None:
        rounds = _Rounds(self._applicable(exp), random.Random(f"chaosd:{self.seed}:survival"))
        clock = exp.clock
        t0 = clock.now()
        entries = exp.plan_log if self.log is None else self.log
        previous: FaultRecord | None = None
        k = 0
        while True:
            k += 1
            if self.last_at is not None and k * self.interval > self.last_at:
                return
            slot = t0 + k * self.interval
            await clock.sleep_until(slot)
            if exp.injector.lever is not None:
                entries.append({"at": exp.pipeline.elapsed(), "action": "stop", "reason": exp.injector.lever})
                exp.stop.set()
                return
            if previous is not None and not await self._previous_settled(exp, previous, slot):
                entries.append(
                    {
                        "at": exp.pipeline.elapsed(),
                        "action": "skip",
                        "ok": False,
                        "reason": "skipped: previous fault still recovering",
                        "previous": previous.id,
                    }
                )
            elif (injected := rounds.inject(exp, self._fault_ttl(exp, slot), self.owner)) is not None:
                action, target, previous = injected
                entries.append(
                    {"at": previous.injected_at, "action": action, "target": target, "ok": True, "fault": previous.id}
                )
            if self.progress is not None:
                self.progress(exp)

    def _applicable(self, exp: Experiment) -> list[str]:
        # A python stage's dependencies are the only targets of the dependency_* actions: without any, those
        # actions are left out of the rounds (so the rounds of a run without dependencies stay as they were).
        called = any(s.dependencies for s in exp.pipeline.stages.values())
        return [a for a in self.actions if called or not a.startswith("dependency_")] or list(self.actions)

    async def _previous_settled(self, exp: Experiment, previous: FaultRecord, slot: float) -> bool:
        """Whether the previous fault has its verdict in time for this slot's to start (always, when they overlap)."""
        if self.room is None:
            return True
        end_by = slot + self.interval - self.room
        return await _settled(exp, previous, end_by - SURVIVAL_MIN_TTL)

    def _fault_ttl(self, exp: Experiment, slot: float) -> float | None:
        """This slot's fault TTL: without overlap, short enough to end ``room`` before the next slot."""
        if self.room is None:
            return self.ttl
        late = max(0.0, exp.clock.now() - slot)  # waited for the previous verdict: the fault ends on time
        return min(exp.settings.faults.default_ttl if self.ttl is None else self.ttl, self.interval - self.room - late)


class _Rounds:
    """Survival's actions in shuffled rounds, each used once a round; one that cannot apply now yields to the next."""

    def __init__(self, actions: Sequence[str], rng: random.Random) -> None:
        self._actions = actions
        self._rng = rng
        self._queue: list[str] = []

    def inject(self, exp: Experiment, ttl: float | None, owner: object | None) -> tuple[str, str, FaultRecord] | None:
        """Inject the next action that applies now: (action, target asked for, record), or None if none did."""
        for _ in range(len(self._actions)):
            if not self._queue:
                self._queue = _round(self._actions, self._rng)
            action = self._queue.pop(0)
            target = _survival_target(exp, action, self._rng)
            if target is None:
                continue
            try:
                return action, target, exp.injector.inject(action, target, ttl=ttl, owner=owner)
            except FaultError:
                continue
        return None


async def _settled(exp: Experiment, record: FaultRecord, latest: float) -> bool:
    """Wait, a telemetry tick at a time, until ``record`` has its verdict or the clock passes ``latest``."""
    step = exp.settings.telemetry.tick
    while record.outcome not in TERMINAL:
        if exp.clock.now() + step > latest + 1e-6:  # summed steps drift; the last one still fits
            return False
        await exp.clock.sleep(step)
    return True


def _round(actions: Sequence[str], rng: random.Random) -> list[str]:
    """Every action once, shuffled; a remedy follows the blow it can undo (a resume, its pause)."""
    order = list(dict.fromkeys(actions))
    rng.shuffle(order)
    for action in list(order):
        blow = CATALOGUE[action].remedies
        if blow is not None and blow in order:
            order.remove(action)
            order.insert(order.index(blow) + 1, action)
    return order


def _survival_target(exp: Experiment, action: str, rng: random.Random) -> str | None:
    return CATALOGUE[action].survival_target(exp.pipeline, rng)


# --- expectations ----------------------------------------------------------------------------------


def parse_expectations(expect: Mapping[str, object], source: str) -> Expectations:
    """``expect:`` read once, in its order (a loaded scenario's already is); refuses unknown keys and values that
    cannot be compared."""
    return read_expectations(expect, source)


def check_expectations(expect: Mapping[str, object], source: str) -> None:
    """Refuse unknown keys and values that cannot be compared, before anything runs."""
    read_expectations(expect, source)


def evaluate_expectations(expect: Mapping[str, object], report: JudgedReport) -> list[ExpectationView]:
    """Check ``expect:`` against a report (a run's, or a scenario's window): one entry per expectation.

    Each entry is an :class:`~chaosd.views.ExpectationView`: ``check`` (the key), ``expected`` (as
    written), ``measured`` and ``passed``, plus ``incident`` and ``because`` when they apply. A
    measurement the report does not have (no score yet: nothing was offered) is None and fails.
    Refuses what :func:`check_expectations` refuses.
    """
    checks = read_expectations(expect, "scenario").checks
    results: list[ExpectationView] = []
    faults = report.get("faults", [])
    ids = {f["id"] for f in faults}
    incidents = [i for i in report.get("incidents", []) if ids.intersection(i["faults"])]
    for check in checks:
        key = check.check
        measured, ok, blame = check.judge(report, incidents)
        if not ok and key in ("min_grade", "min_score", "min_availability"):
            blame = _worst_incident(incidents)
        result: ExpectationView = {"check": key, "expected": check.written, "measured": measured, "passed": bool(ok)}
        if blame is not None:
            result["incident"] = _named(blame)
        if not ok:
            result["because"] = _because(key, measured, blame, faults)
        results.append(result)
    return results


# Over replications, a threshold on a number is judged on its 95 % CI: a min_* passes only if the interval's lower
# bound meets it, a max_* only if its upper bound does. A limit on counts or a flag holds only if every run meets it.
_LOWER = ("min_score", "min_availability")
_UPPER = ("max_recovery_s", "max_availability")


def evaluate_replicated(expect: Mapping[str, object], reports: Sequence[ReportView]) -> list[ExpectationView]:
    """Check ``expect:`` over the reports of N replications of one run: one entry per expectation.

    ``min_score`` and ``min_availability`` measure the lower bound of the runs' 95 % CI, ``max_recovery_s`` the
    upper bound (of each run's slowest incident recovery), ``min_grade`` the grade of the score's lower bound;
    ``lost_tasks``, ``duplicated_tasks``, ``all_recovered`` and ``checks_pass`` measure the worst run. With N ≥ 2
    each entry's ``runs`` holds every run's own verdict (seed, measured, passed), in the order of ``reports``.
    One report is judged as :func:`evaluate_expectations` judges it.
    """
    if not reports:
        raise ValueError("no reports to judge")
    expectations = read_expectations(expect, "scenario")
    per_run = [evaluate_expectations(expectations, r) for r in reports]
    if len(reports) == 1:
        return per_run[0]
    results: list[ExpectationView] = []
    for k, check in enumerate(expectations.checks):
        runs = [entries[k] for entries in per_run]
        pooled = _pooled(check, reports, runs)
        pooled["runs"] = [
            {"seed": report["seed"], "measured": e["measured"], "passed": e["passed"]}
            for report, e in zip(reports, runs, strict=True)
        ]
        results.append(pooled)
    return results


def _pooled(check: Expectation, reports: Sequence[ReportView], runs: Sequence[ExpectationView]) -> ExpectationView:
    """One expectation judged over every run: on the CI of a number, else on the worst run."""
    key, wanted = check.check, check.written
    if key not in (*_LOWER, *_UPPER, "min_grade"):
        failing = [(report, e) for report, e in zip(reports, runs, strict=True) if not e["passed"]]
        if not failing:
            return {"check": key, "expected": wanted, "measured": runs[0]["measured"], "passed": True}
        report, first = failing[0]
        worst = first.copy()
        worst["because"] = f"seed {report['seed']} ({len(failing)} of {len(reports)} runs fail): {first.get('because')}"
        return worst
    values = [r["score"]["total"] for r in reports] if key == "min_grade" else [e["measured"] for e in runs]
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    ci = mean_ci(numbers)["ci95"] if len(numbers) == len(values) else None
    bound = None if ci is None else ci[1] if key in _UPPER else ci[0]
    measured: Measured = bound
    if key == "min_grade":
        measured = None if bound is None else grade(bound)
        ok = measured is not None and GRADES.index(measured) >= GRADES.index(str(check.value))
    else:
        limit = check.value
        assert isinstance(limit, float)  # points and durations are read to floats (seconds) when loaded
        ok = bound is not None and (bound <= limit if key in _UPPER else bound >= limit)
    result: ExpectationView = {"check": key, "expected": wanted, "measured": measured, "passed": ok}
    if not ok:
        side = "upper" if key in _UPPER else "lower"
        shown = "none (a run measured nothing)" if bound is None else f"{bound:g}"
        result["because"] = f"{key}: the {side} bound of the 95 % CI over {len(reports)} runs is {shown}"
    return result


def _worst_incident(incidents: Sequence[IncidentView]) -> IncidentView | None:
    """What most likely cost the grade: a failed incident, else the one longest out of tolerance."""
    failed = [i for i in incidents if i["outcome"] == "failed"]
    pool = failed or [i for i in incidents if i.get("impact_s", 0) > 0]
    return max(pool, key=lambda i: (i.get("impact_s", 0.0), i["id"]), default=None)


def _named(incident: IncidentView) -> ExpectedIncident:
    return {
        "id": incident["id"],
        "faults": list(incident["faults"]),
        "actions": list(incident["actions"]),
        "outcome": incident["outcome"],
        "recovery_s": incident["recovery_s"],
        "impact_s": incident.get("impact_s"),
        "stalled_s": incident.get("stalled_s", 0.0),
    }


def _because(key: str, measured: Measured, blame: IncidentView | None, faults: Sequence[FaultView]) -> str:
    """A failed expectation's cause in words: the check, and the fault or incident behind the number."""
    if key == "all_recovered":
        bad = [f"fault {f['id']} ({f['action']}: {f['outcome']})" for f in faults if not f["recovered"]]
        return f"all_recovered: not recovered: {', '.join(bad)}"
    if blame is None:
        return f"{key}: measured {measured}"
    members = ", ".join(f"{n} {a}" for n, a in zip(blame["faults"], blame["actions"], strict=True))
    host = host_stall(blame.get("stalled_s"))
    recovery = blame["recovery_s"]
    if key == "max_recovery_s" and recovery is not None:  # its blame is the slowest timed incident
        took = seconds(float(recovery))
        return f"max_recovery_s: incident {blame['id']} (faults {members}) took {took} to recover{host}"
    return (
        f"{key}: measured {measured}; incident {blame['id']} (faults {members}) {blame['outcome']}, "
        f"{seconds(float(blame.get('impact_s') or 0.0))} out of tolerance{host}"
    )


# --- a scenario's window on the daemon ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tally:
    """The live report's task counts at one instant; a scenario's window is the difference of two.

    Counts are cumulative, bar ``in_flight`` and ``lost``: levels (measured tasks held now; nobody holds now).
    ``Tally()`` is the daemon's start.
    """

    offered: int = 0
    accepted: int = 0
    completed: int = 0
    late: int = 0
    degraded: int = 0
    failed: int = 0
    rejected: int = 0
    duplicated: int = 0
    lost: int = 0
    in_flight: int = 0
    corrupted: int = 0  # memory reads that returned corrupted data undetected

    @classmethod
    def of(cls, report: ReportView | LiveCounts) -> Tally:
        t = report["tasks"]
        causes = {d["cause"]: d["count"] for d in report.get("diagnostics", [])}
        return cls(
            offered=t["offered"],
            accepted=t["accepted"],
            completed=t["completed"],
            late=t["late"],
            degraded=t.get("degraded", 0),
            failed=t["failed"],
            rejected=t["rejected"],
            duplicated=t["duplicated"],
            lost=t["lost"],
            in_flight=t["in_flight"],
            corrupted=causes.get("corruption_undetected", 0),
        )

    def grown_since(self, before: Tally, field: str) -> int:
        """How much the cumulative count ``field`` grew since ``before`` (never negative)."""
        return max(0, int(getattr(self, field)) - int(getattr(before, field)))


def window_report(
    before: Tally,
    report: ReportView | LiveWindow,
    fault_ids: Collection[int],
    weights: ScoreWeights,
    book: IncidentBook | None = None,
) -> WindowMeasures:
    """What happened since ``before``, from the live ``report``: task counts, their score, the window's faults.

    ``faults`` keeps only ``fault_ids`` (the scenario's). ``lost`` counts tasks that went missing in the
    window and still are; the score uses the window's counts and faults, with the formula the report uses.
    A ``book`` (the plan's or window's running totals of its incidents) judges the recoveries instead of
    ``report["incidents"]``: every incident it ever had, not only those still in memory.
    """
    after = Tally.of(report)
    lost = after.grown_since(before, "lost")
    good = max(0, (after.completed - after.late - after.degraded) - (before.completed - before.late - before.degraded))
    # Settled = reached an outcome or went missing: accepted less what is still held, at each end.
    accepted = max((after.accepted - after.in_flight) - (before.accepted - before.in_flight), good + lost)
    offered = max((after.offered - after.in_flight) - (before.offered - before.in_flight), accepted)
    faults = [f for f in report["faults"] if f["id"] in fault_ids]
    judged, recovered, times, total_s, inconsistent = _window_recoveries(report, fault_ids, book)
    counts = ScoreInputs(
        offered=offered,
        accepted=accepted,
        good=good,
        lost=lost,
        duplicated=after.grown_since(before, "duplicated"),
        undetected_corruptions=after.grown_since(before, "corrupted"),
        faults_judged=judged,
        faults_recovered=recovered,
        recovery_times_s=times,
        recovery_total_s=total_s,
        faults_inconsistent=inconsistent,
    )
    score = compute_score(counts, weights)
    return {"tasks": _window_tasks(before, after), "score": score.as_dict(), "faults": faults}


def _window_recoveries(
    report: ReportView | LiveWindow, fault_ids: Collection[int], book: IncidentBook | None
) -> tuple[int, int, tuple[float, ...], float | None, int]:
    """The window's incidents judged: (judged, recovered, recovery times, their total when only it is kept,
    inconsistent)."""
    if book is not None:  # every incident it ever had, counted as each closed
        return book.judged, book.recovered, (), book.recovery.value, book.inconsistent
    # judged per incident, as the run's score is: the scenario's incidents are those holding its faults
    ids = set(fault_ids)
    mine = [i for i in report.get("incidents", []) if ids.intersection(i["faults"])]
    ended = [i for i in mine if i["outcome"] in ("recovered", "failed")]
    times = tuple(float(i["recovery_s"]) for i in ended if i["outcome"] == "recovered" and i["recovery_s"] is not None)
    inconsistent = sum(1 for i in ended if not i.get("consistent", True))
    return len(ended), len(times), times, None, inconsistent


def _window_tasks(before: Tally, after: Tally) -> TaskCounts:
    """The tasks counted since ``before``: each count's growth, and the levels as they stand at ``after``."""
    return {
        "offered": after.grown_since(before, "offered"),
        "accepted": after.grown_since(before, "accepted"),
        "completed": after.grown_since(before, "completed"),
        "late": after.grown_since(before, "late"),
        "degraded": after.grown_since(before, "degraded"),
        "failed": after.grown_since(before, "failed"),
        "rejected": after.grown_since(before, "rejected"),
        "lost": after.grown_since(before, "lost"),
        "duplicated": after.grown_since(before, "duplicated"),
        "in_flight": after.in_flight,
    }


def check_speed(scenario: Scenario, speed: float, default_ttl: float, confirm: float) -> None:
    """Refuse a ``speed`` that leaves a fault less than ``confirm`` seconds to be seen recovering.

    ``speed`` divides delays, TTLs and the duration, but not ``recovery.confirm``: a recovery is confirmed
    no sooner than that long after the fault ends, so each fault must end at least ``confirm`` (real)
    seconds before the scaled scenario does. A scenario that leaves less even at speed 1 runs at 1 only.
    """
    windows = scenario.fault_windows(default_ttl)
    if speed <= 1 or confirm <= 0 or not windows:
        return
    duration = scenario.run_duration(default_ttl)
    tightest = min(windows, key=lambda w: duration - w.end)
    left = duration - tightest.end
    limit = left / confirm
    if speed <= limit:
        return
    if limit < 1:
        fix = f"even at speed 1 it leaves {max(left, 0):g} s: run it at speed 1, or give it a longer duration"
    else:
        fix = f"the largest speed that leaves enough is {math.floor(limit * 100) / 100:g}"
    raise FaultError(
        "speed",
        f"{speed:g} is too fast: actions.{tightest.index} ({tightest.action}) would end "
        f"{max(left, 0) / speed:.2f} s before the scenario does, less than recovery.confirm ({confirm:g} s), "
        f"the time a recovery takes to confirm; {fix}",
    )
