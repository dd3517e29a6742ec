"""One offline run described as a picklable spec, rebuilt anywhere; the same run on N seeds, in parallel.

A plan is a closure, so a run crosses a process boundary as a :class:`RunSpec` and is prepared again where it
runs (:func:`prepare`): the command line and every replication build their settings, warm-up and plan the same
way. :func:`run_many` runs specs on local processes (or a Dask cluster) and returns their reports in order;
:func:`summarise` turns N reports into the ``replications`` block.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from chaosd.core.confidence import mean_ci
from chaosd.core.errors import ConfigError
from chaosd.views import MeanCI, ReplicationsView, ReportView

if TYPE_CHECKING:
    from chaosd.config.settings import Settings
    from chaosd.experiment.plans import Plan
    from chaosd.experiment.runner import Experiment
    from chaosd.experiment.scenario import Scenario

__all__ = [
    "MAX_REPLICATIONS",
    "MeanCI",
    "Prepared",
    "ReplicationsView",
    "RunSpec",
    "SurvivalSpec",
    "default_jobs",
    "mean_ci",
    "prepare",
    "replicate",
    "run_many",
    "run_one",
    "seeds_for",
    "summarise",
]

_GRADES = ("A+", "A", "B", "C", "D", "F")  # best first, as grade_counts lists them
MAX_REPLICATIONS = 1000  # every run's report is held until the block is built: their number is bounded


@dataclass(frozen=True, slots=True)
class SurvivalSpec:
    """The command line's ``--survival`` options."""

    interval: float = 10.0
    actions: tuple[str, ...] | None = None  # None: every action of the catalogue
    overlap: bool = False


@dataclass(frozen=True, slots=True)
class RunSpec:
    """Everything needed to rebuild one offline run in another process (paths are read where it runs)."""

    scenario: str | None = None  # a scenario file path or shipped name, as the command line got it
    config: str | None = None  # a TOML config path
    # The command line's settings, nested like the TOML ({"seed": 7}): over the scenario and the environment.
    overlay: Mapping[str, object] = field(default_factory=dict)
    duration: float | None = None  # None: the scenario's, else the config's
    warmup: float | None = None  # None: the scenario's, else the config's, else a tenth of the duration
    survival: SurvivalSpec | None = None

    def with_seed(self, seed: int) -> RunSpec:
        return replace(self, overlay={**self.overlay, "seed": seed})


@dataclass(frozen=True, slots=True)
class Prepared:
    """A spec made ready to run: its settings, scenario, timing and plan."""

    settings: Settings
    scenario: Scenario | None
    duration: float
    warmup: float
    plan: Plan | None
    source: str  # what names the run's configuration in an error: the config file, the scenario, or neither
    # Where the settings came from below the command line, strongest first: CHAOSD_… variables, the scenario,
    # the config file, "the defaults".
    layers: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # what the user may not mean (a measured window of 1 s), printed before it runs


def _spec_error(option: str, message: str) -> ConfigError:
    return ConfigError([(f"--{option}", "", message)])  # printed as "--option: message"


def prepare(spec: RunSpec, *, realtime: bool = False, progress: Callable[[Experiment], None] | None = None) -> Prepared:
    """Settings, scenario, duration, warm-up and plan for ``spec``; refuses what cannot run, before it starts.

    Raises :class:`~chaosd.core.errors.ConfigError` (a scenario's as ScenarioError) naming the field, and
    :class:`~chaosd.core.errors.FaultError` for a survival interval too short. ``progress`` sees survival's rounds.
    """
    # The engine, imported by whoever prepares a run: importing this module stays cheap.
    from chaosd.config.handlers import refuse_virtual_time  # noqa: PLC0415
    from chaosd.config.settings import environment_settings  # noqa: PLC0415
    from chaosd.experiment.plans import scenario_plan  # noqa: PLC0415
    from chaosd.experiment.run_timing import run_timing  # noqa: PLC0415
    from chaosd.experiment.scenario import shown_path  # noqa: PLC0415

    config = Path(spec.config) if spec.config is not None else None
    settings, scenario, path, source = _checked_settings(spec, config)
    layers = (
        *environment_settings(),
        *([shown_path(path)] if path is not None else []),
        *([str(config)] if config is not None else []),
        "the defaults",
    )
    timing = run_timing(spec.duration, spec.warmup, scenario, path, settings, config)
    duration, warmup = timing.duration, timing.warmup
    plan: Plan | None = None
    if spec.survival is not None:
        plan = _survival_plan(spec.survival, settings, duration, progress)
    elif scenario is not None and scenario.actions:
        plan = scenario_plan(scenario.actions)
    if not realtime:  # a user's stage handler waits on the real clock: refused before anything starts
        refuse_virtual_time(settings.stages, source)
        if settings.backend.kind == "redis":  # its workers are processes, on the real clock
            raise ConfigError(
                [(source, "backend.kind", "'redis' runs real processes in real time: use `chaosd run --realtime`")]
            )
    return Prepared(settings, scenario, duration, warmup, plan, source, layers, timing.warnings)


def _checked_settings(spec: RunSpec, config: Path | None) -> tuple[Settings, Scenario | None, Path | None, str]:
    """The run's settings, and its scenario checked whole (actions, their targets, ``expect:``) when it has one:
    (settings, scenario, its path, what names the configuration in an error)."""
    from chaosd.config.settings import load_settings  # noqa: PLC0415
    from chaosd.experiment.plans import check_actions, check_expectations  # noqa: PLC0415
    from chaosd.experiment.scenario import find_scenario, load_scenario, settings_for  # noqa: PLC0415
    from chaosd.faults.catalogue import target_problem  # noqa: PLC0415

    if spec.scenario is None:
        return load_settings(config, overrides=spec.overlay), None, None, str(config or "configuration")
    path = find_scenario(spec.scenario)
    scenario = load_scenario(path)
    # The command line's overrides (the seed) go on top, keeping the scenario's (derived) duration.
    settings = settings_for(scenario, path, config, spec.overlay)
    check_actions(scenario.actions, str(path), settings.faults.max_ttl)
    kinds = {stage.name: stage.kind for stage in settings.stages}
    misaimed = [
        (str(path), f"actions.{i}.action.target_id", problem)
        for i, item in enumerate(scenario.actions)
        if (problem := target_problem(item.action.type, item.action.target_id, kinds)) is not None
    ]
    if misaimed:  # else the fault fails at its time and the run ends as if it had none
        raise ConfigError(misaimed)
    check_expectations(scenario.expect, str(path))  # values too, before anything runs
    return settings, scenario, path, str(config or path)


def _survival_plan(
    survival: SurvivalSpec, settings: Settings, duration: float, progress: Callable[[Experiment], None] | None
) -> Plan:
    """Survival's plan for the run: its TTL and room from the interval; refuses an interval that cannot work."""
    from chaosd.experiment.plans import SURVIVAL_DEFAULT, survival_plan, survival_timing  # noqa: PLC0415

    if survival.interval <= 0:
        raise _spec_error("interval", f"must be > 0 (got {survival.interval:g})")
    ttl, room = survival_timing(
        survival.interval,
        default_ttl=settings.faults.default_ttl,
        max_ttl=settings.faults.max_ttl,
        confirm=settings.recovery.confirm,
        overlap=survival.overlap,
    )
    subset = survival.actions if survival.actions is not None else SURVIVAL_DEFAULT
    return survival_plan(
        survival.interval, subset, settings.seed, ttl=ttl, room=room, last_at=duration - ttl, progress=progress
    )


def run_one(spec: RunSpec) -> ReportView:
    """Prepare ``spec`` and run it in virtual time; its report, with its scenario's expectations judged."""
    from chaosd.experiment.plans import evaluate_expectations  # noqa: PLC0415
    from chaosd.experiment.report import rounded  # noqa: PLC0415
    from chaosd.experiment.runner import run_offline  # noqa: PLC0415
    from chaosd.experiment.verdict import verdict_view  # noqa: PLC0415

    ready = prepare(spec)
    report = run_offline(
        ready.settings,
        duration=ready.duration,
        warmup=ready.warmup,
        virtual=True,
        scenario=ready.scenario.name if ready.scenario else None,
        plan=ready.plan,
    )
    if ready.scenario is not None and ready.scenario.expect:
        report["expectations"] = evaluate_expectations(ready.scenario.expect, report)
    report["verdict"] = verdict_view(report)
    return rounded(report)


def seeds_for(base: int, n: int) -> list[int]:
    """The seeds of ``n`` replications of a run seeded ``base``: ``base`` itself, then one per replication.

    Replication i ≥ 1 is seeded ``numpy.random.SeedSequence(base, spawn_key=(i,)).generate_state(1)[0]``
    (a 32-bit word; numpy keeps SeedSequence's output stable across versions), which is what
    ``SeedSequence(base).spawn(n)[i]`` would give: the first k seeds do not depend on n.
    """
    if n < 1:
        raise ValueError(f"n must be ≥ 1 (got {n})")
    derived = (int(np.random.SeedSequence(base, spawn_key=(i,)).generate_state(1)[0]) for i in range(1, n))
    return [base, *derived]


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def run_many(
    specs: Sequence[RunSpec],
    *,
    jobs: int | None = None,
    cluster: str | None = None,
    on_done: Callable[[int, ReportView], None] | None = None,
    costs: Sequence[float] | None = None,
) -> list[ReportView]:
    """Run every spec (:func:`run_one`); their reports in the order of ``specs``, whatever finishes first.

    ``jobs`` local processes (None: :func:`default_jobs`), started by forkserver (spawn where there is none),
    never forked from this process's threads; ``cluster``: on the Dask scheduler at that address instead.
    The first spec is prepared here first, so a bad one raises before any process starts. ``on_done`` sees
    each report as it arrives, with its index. ``costs``: each spec's expected work, in any unit; local processes
    start the costliest first (ties in the order given), so that no long run starts last and runs alone at the end.
    """
    if not specs:
        return []
    if jobs is not None and jobs < 1:
        raise _spec_error("jobs", f"must be ≥ 1 (got {jobs})")
    prepare(specs[0])
    if cluster is not None:
        from chaosd.batch.cluster import run_on_cluster  # noqa: PLC0415 - dask only when a cluster is asked for

        return run_on_cluster(run_one, specs, cluster, on_done=on_done)
    workers = min(jobs or default_jobs(), len(specs))
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=_ignore_sigint)
    try:
        order = sorted(range(len(specs)), key=lambda i: -costs[i]) if costs is not None else range(len(specs))
        submitted: dict[int, Future[ReportView]] = {}
        for index in order:
            future = submitted[index] = pool.submit(run_one, specs[index])
            if on_done is not None:
                future.add_done_callback(_reporter(index, on_done))
        futures = [submitted[index] for index in range(len(specs))]
        reports = [future.result() for future in futures]
    except BaseException:  # an error or a Ctrl-C: nothing waits for runs whose report nobody reads
        _stop(pool)
        raise
    pool.shutdown()
    return reports


def _ignore_sigint() -> None:
    """A worker leaves Ctrl-C to its parent, which stops the pool: a terminal sends it to the whole group."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the runs in progress (Python 3.14's terminate_workers, by hand)."""
    processes = list(getattr(pool, "_processes", {}).values())  # private, and stable from 3.8 to 3.13
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join()


# What a run imports, loaded once by the fork server: each worker forked from it starts with the engine in memory
# instead of importing it again (about a CPU second each).
_PRELOAD = [
    "chaosd.experiment.runner",
    "chaosd.experiment.plans",
    "chaosd.experiment.report",
    "chaosd.experiment.scenario",
    "chaosd.config.handlers",
]


def _context() -> multiprocessing.context.BaseContext:
    """Forkserver where there is one (a single-threaded server forks the workers), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


def _reporter(index: int, on_done: Callable[[int, ReportView], None]) -> Callable[[Future[ReportView]], None]:
    def done(future: Future[ReportView]) -> None:
        if not future.cancelled() and future.exception() is None:
            on_done(index, future.result())

    return done


def summarise(reports: Sequence[ReportView]) -> ReplicationsView:
    """The ``replications`` block: every number's mean and 95 % CI over ``reports``, and the runs per grade."""
    from chaosd.experiment.report import rounded  # noqa: PLC0415
    from chaosd.experiment.verdict import service_verdict  # noqa: PLC0415

    if not reports:
        raise ValueError("no reports to summarise")
    scores = [r["score"] for r in reports]
    components = {
        "availability": mean_ci([s["availability"] for s in scores]),
        "recovery": mean_ci([s["recovery"] for s in scores]),
        "recovery_rate": mean_ci([s["recovery_rate"] for s in scores]),
        "recovery_speed": mean_ci([s["recovery_speed"] for s in scores]),
        "consistency": mean_ci([s["consistency"] for s in scores]),
    }
    grades = [s["grade"] or "none" for s in scores]
    counts = {g: grades.count(g) for g in (*_GRADES, "none") if g in grades}
    actions = sorted({a for r in reports for a in r["faults_summary"]["mean_recovery_s_by_action"]})
    recovery = {a: mean_ci([r["faults_summary"]["mean_recovery_s_by_action"].get(a) for r in reports]) for a in actions}
    block: ReplicationsView = {
        "n": len(reports),
        "seeds": [r["seed"] for r in reports],
        "score": mean_ci([s["total"] for s in scores]),
        "components": {name: ci for name, ci in components.items() if ci["n"]},
        "grade_counts": counts,
        "recovery_s": recovery,
        "goodput": mean_ci([r["throughput"]["goodput_per_s"] for r in reports]),
        "completed": mean_ci([r["throughput"]["completed_per_s"] for r in reports]),
        "wait_mean_s": mean_ci([r["latency"]["wait"]["mean"] for r in reports]),
        "p95_s": mean_ci([r["latency"]["sojourn"]["p95"] for r in reports]),
        "lost": mean_ci([float(r["tasks"]["lost"]) for r in reports]),
        "failed_runs": [
            {"seed": r["seed"], "reason": reason}
            for r in reports
            for passed, reason in (service_verdict(r),)
            if not passed
        ],
    }
    return rounded(block)


def replicate(
    spec: RunSpec,
    n: int,
    *,
    jobs: int | None = None,
    cluster: str | None = None,
    on_done: Callable[[int, ReportView], None] | None = None,
) -> ReportView:
    """``spec`` on ``n`` seeds (:func:`seeds_for` of its own): the base seed's report with the ``replications``
    block, its expectations judged over every run (:func:`chaosd.experiment.plans.evaluate_replicated`)."""
    from chaosd.experiment.plans import evaluate_replicated  # noqa: PLC0415
    from chaosd.experiment.report import rounded  # noqa: PLC0415
    from chaosd.experiment.verdict import verdict_view  # noqa: PLC0415

    if not 1 <= n <= MAX_REPLICATIONS:
        raise _spec_error("replications", f"must be from 1 to {MAX_REPLICATIONS} (got {n})")
    ready = prepare(spec)
    specs = [spec.with_seed(seed) for seed in seeds_for(ready.settings.seed, n)]
    reports = run_many(specs, jobs=jobs, cluster=cluster, on_done=on_done)
    report = reports[0]
    report["replications"] = summarise(reports)
    if ready.scenario is not None and ready.scenario.expect:
        report["expectations"] = rounded(evaluate_replicated(ready.scenario.expect, reports))
    report["verdict"] = verdict_view(report)  # over every run: theirs, and the expectations judged over them
    return report
