"""Plans that drive faults beside a run: a scenario's ARES-form actions, and survival mode; plus `expect:`."""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from chaosd.durations import parse_duration
from chaosd.errors import FaultError, ScenarioError
from chaosd.faults import CATALOGUE
from chaosd.runner import Experiment
from chaosd.scenario import ScenarioAction

__all__ = ["SURVIVAL_DEFAULT", "check_actions", "evaluate_expectations", "scenario_plan", "survival_plan"]

# Checks a scenario may interleave with its faults.
CHECKS = ("verify_leader",)
SURVIVAL_DEFAULT = tuple(sorted(CATALOGUE))
Plan = Callable[[Experiment], Coroutine[Any, Any, None]]


def _split_metadata(metadata: Mapping[str, Any]) -> tuple[float | None, dict[str, object]]:
    """ARES metadata → (ttl, params): ``duration`` is the fault's TTL, ``params`` or any other key a parameter."""
    meta = dict(metadata)
    ttl = meta.pop("duration", None)
    params = dict(meta.pop("params", None) or {})
    params.update(meta)
    return (None if ttl is None else float(parse_duration(ttl))), params  # type: ignore[arg-type]


def check_actions(actions: Sequence[ScenarioAction], source: str, max_ttl: float) -> None:
    """Validate every action before anything runs: unknown types, bad parameters, bad durations."""
    problems: list[tuple[str, str, str]] = []
    for i, item in enumerate(actions):
        where = f"actions.{i}.action"
        kind = item.action.type
        if kind in CHECKS:
            continue
        spec = CATALOGUE.get(kind)
        if spec is None:
            valid = ", ".join((*sorted(CATALOGUE), *CHECKS))
            problems.append((source, f"{where}.type", f"unknown action {kind!r} (valid: {valid})"))
            continue
        try:
            ttl, params = _split_metadata(item.action.metadata)
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
    actions: Sequence[ScenarioAction], *, speed: float = 1.0, log: list[dict[str, Any]] | None = None
) -> Plan:
    """Inject each action after its delay (relative to the previous action).

    ``speed`` > 1 compresses delays and fault durations (a real-time daemon running a long scenario
    quickly); ``log`` collects what happened (default: the experiment's plan log).
    """

    async def plan(exp: Experiment) -> None:
        clock = exp.clock
        t0 = clock.now()
        entries = exp.plan_log if log is None else log
        at = 0.0
        for item in actions:
            at += item.delay / speed
            await clock.sleep_until(t0 + at)
            spec = item.action
            entry: dict[str, Any] = {"at": exp.pipeline.elapsed(), "action": spec.type, "target": spec.target_id}
            if spec.type == "verify_leader":
                leader = exp.pipeline.dispatcher.leader_id
                entry.update(ok=leader is not None, leader=leader)
                entries.append(entry)
                continue
            ttl, params = _split_metadata(spec.metadata)
            if ttl is not None:
                ttl /= speed
            try:
                record = exp.injector.inject(spec.type, spec.target_id, params, ttl)
                entry.update(ok=True, fault=record.id, targets=list(record.targets))
            except FaultError as exc:
                entry.update(ok=False, error=str(exc))
            entries.append(entry)

    return plan


def survival_plan(
    interval: float,
    actions: Sequence[str],
    seed: int,
    *,
    ttl: float | None = None,
    last_at: float | None = None,
    progress: Callable[[Experiment], None] | None = None,
    log: list[dict[str, Any]] | None = None,
) -> Plan:
    """Every ``interval``: the next action of a shuffled round of ``actions``, on a random valid target.

    Rounds use every action once, so a long run exercises the whole subset; the run ends early
    when the safety lever is pulled.

    Faults last ``ttl`` (the configured default when None), so consecutive faults overlap when it
    exceeds the interval — that is what gives ``resume_agent`` a paused agent to resume. No fault
    starts after ``last_at`` (the run's end less the TTL), so every fault ends by its TTL.
    """
    unknown = [a for a in actions if a not in CATALOGUE]
    if unknown:
        raise FaultError("actions", f"unknown action {unknown[0]!r} (valid: {', '.join(sorted(CATALOGUE))})")

    async def plan(exp: Experiment) -> None:
        rng = random.Random(f"chaosd:{seed}:survival")
        clock = exp.clock
        t0 = clock.now()
        entries = exp.plan_log if log is None else log
        queue: list[str] = []
        k = 0
        while True:
            k += 1
            if last_at is not None and k * interval > last_at:
                return
            await clock.sleep_until(t0 + k * interval)
            if exp.injector.lever is not None:
                entries.append({"at": exp.pipeline.elapsed(), "action": "stop", "reason": exp.injector.lever})
                exp.stop.set()
                return
            for _ in range(len(actions)):  # an action that cannot apply now yields to the next one
                if not queue:
                    queue = _round(actions, rng)
                action = queue.pop(0)
                target = _survival_target(exp, action, rng)
                if target is None:
                    continue
                try:
                    record = exp.injector.inject(action, target, ttl=ttl)
                except FaultError:
                    continue
                entries.append(
                    {"at": record.injected_at, "action": action, "target": target, "ok": True, "fault": record.id}
                )
                break
            if progress is not None:
                progress(exp)

    return plan


def _round(actions: Sequence[str], rng: random.Random) -> list[str]:
    """Every action once, shuffled; a resume follows the pause it can resume."""
    order = list(dict.fromkeys(actions))
    rng.shuffle(order)
    if "pause_agent" in order and "resume_agent" in order:
        order.remove("resume_agent")
        order.insert(order.index("pause_agent") + 1, "resume_agent")
    return order


def _survival_target(exp: Experiment, action: str, rng: random.Random) -> str | None:
    spec = CATALOGUE[action]
    if action == "resume_agent":
        paused = sorted(a.id for a in exp.pipeline.agents.values() if a.paused)
        return rng.choice(paused) if paused else None
    if action == "kill_leader":
        return "leader" if exp.pipeline.dispatcher.leader_id is not None else None
    return spec.default_target if spec.default_target not in ("worker",) else "random"


def evaluate_expectations(expect: Mapping[str, Any], report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Check a scenario's ``expect:`` against its report; each item passes or fails with the measured value."""
    grades = ["F", "D", "C", "B", "A", "A+"]
    results: list[dict[str, Any]] = []
    faults = report.get("faults", [])
    for key, wanted in expect.items():
        if key == "min_grade":
            actual: Any = report["score"]["grade"]
            ok = grades.index(actual) >= grades.index(str(wanted))
        elif key == "min_score":
            actual = report["score"]["total"]
            ok = actual >= float(wanted)
        elif key == "max_recovery_s":
            times = [f["recovery_s"] for f in faults if f["recovery_s"] is not None]
            actual = max(times, default=0.0)
            ok = actual <= float(parse_duration(wanted))  # type: ignore[arg-type]
        elif key in ("lost_tasks", "max_lost"):
            actual = report["tasks"]["lost"]
            ok = actual <= int(wanted)
        elif key in ("duplicated_tasks", "max_duplicated"):
            actual = report["tasks"]["duplicated"]
            ok = actual <= int(wanted)
        elif key == "all_recovered":
            actual = all(f["recovered"] for f in faults)
            ok = actual == bool(wanted)
        elif key == "checks_pass":
            actual = all(a.get("ok", False) for a in report.get("actions", []))
            ok = actual == bool(wanted)
        elif key == "min_availability":
            actual = report["score"]["availability"]
            ok = actual >= float(wanted)
        else:
            raise ScenarioError(
                [("scenario", f"expect.{key}", f"unknown expectation (valid: {', '.join(EXPECT_KEYS)})")]
            )
        results.append({"expect": key, "wanted": wanted, "actual": actual, "passed": bool(ok)})
    return results


EXPECT_KEYS = (
    "min_grade",
    "min_score",
    "max_recovery_s",
    "lost_tasks",
    "duplicated_tasks",
    "all_recovered",
    "checks_pass",
    "min_availability",
)
