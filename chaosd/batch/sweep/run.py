"""``chaosd sweep``: one run (or N replications) per point of one or two config keys' values, on local processes
or a Dask cluster, and where the pipeline's capacity knee and its collapse onset lie along the first key."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from chaosd.batch.replicate import RunSpec, prepare, run_many, seeds_for
from chaosd.batch.sweep.params import Param, grid, needs_stages, overlay_at
from chaosd.batch.sweep.view import (
    FORMAT,
    GOODPUT_TARGET,
    SweepParamView,
    SweepView,
    Value,
    collapse_onsets,
    fmt_value,
    knees,
    point_view,
)
from chaosd.config.settings import deep_merge
from chaosd.core.errors import ConfigError
from chaosd.core.version import __version__
from chaosd.experiment.report import rounded
from chaosd.views import ReportView

__all__ = ["run_sweep"]


def _point_spec(
    base: RunSpec, params: Sequence[Param], point: Sequence[Value], stages: Sequence[Mapping[str, object]]
) -> RunSpec:
    return replace(base, overlay=deep_merge(base.overlay, overlay_at(params, point, stages)))


def _stages(base: RunSpec, params: Sequence[Param]) -> list[dict[str, object]]:
    """The run's own stage list as tables, when a param reaches into a stage (the sweep sets a copy of it)."""
    if not needs_stages(params):
        return []
    return [stage.model_dump(mode="json") for stage in prepare(base).settings.stages]


def _checked(
    base: RunSpec, params: Sequence[Param], points: Sequence[tuple[Value, ...]]
) -> list[tuple[float, float, int, float]]:
    """Every point prepared here, before any run starts: its p95 limit, goodput target, seed and the work a run of it
    offers (tasks: its load's rate × its duration). A point that does not validate is named with the params that
    made it."""
    limits = []
    stages = _stages(base, params)
    for point in points:
        spec = _point_spec(base, params, point, stages)  # a stage a param names must exist: its own error
        try:
            prepared = prepare(spec)
        except ConfigError as exc:
            where = ", ".join(f"{p.key}={fmt_value(v)}" for p, v in zip(params, point, strict=True))
            problems = []
            for source, field, msg in exc.problems:
                named = [p for p in params if field == p.key or field.startswith(p.key + ".")] or params
                texts = " ".join(f"--param {p.text}" for p in named)
                problems.append((f"{texts}: at {where}", field, msg if field else f"{source}: {msg}"))
            raise ConfigError(problems) from None
        settings = prepared.settings
        limit = settings.slo.p95 if settings.slo.p95 is not None else settings.load.deadline
        target = settings.slo.availability if settings.slo.availability is not None else GOODPUT_TARGET
        limits.append((limit, target, settings.seed, settings.load.rate * prepared.duration))
    return limits


def run_sweep(
    base: RunSpec,
    params: Sequence[Param],
    *,
    replications: int = 1,
    jobs: int | None = None,
    cluster: str | None = None,
    command: str = "",
    on_done: Callable[[int, int], None] | None = None,
) -> SweepView:
    """Every point of the grid on the same ``replications`` seeds (common random numbers: the points differ by the
    swept keys alone); the knee and the onset of each series. ``on_done(finished, total)`` sees the runs arrive."""
    if replications < 1:
        raise ConfigError([("--replications", "", f"must be ≥ 1 (got {replications})")])
    points = grid(params)
    limits = _checked(base, params, points)
    seeds = seeds_for(limits[0][2], replications)  # a sweep cannot set the seed: every point has the same one
    stages = _stages(base, params)
    specs = [_point_spec(base, params, point, stages).with_seed(seed) for point in points for seed in seeds]
    finished = 0

    def arrived(_index: int, _report: ReportView) -> None:
        nonlocal finished
        finished += 1
        if on_done is not None:
            on_done(finished, len(specs))

    # The points offering the most work start first: a sweep up a rate would otherwise start its longest run last.
    costs = [cost for (_limit, _target, _seed, cost) in limits for _ in seeds]
    reports = run_many(specs, jobs=jobs, cluster=cluster, on_done=arrived, costs=costs)
    n = replications
    views = [
        point_view(
            {p.key: v for p, v in zip(params, point, strict=True)},
            reports[k * n : (k + 1) * n],
            p95_limit=limit,
            goodput_target=target,
        )
        for k, (point, (limit, target, _seed, _cost)) in enumerate(zip(points, limits, strict=True))
    ]
    param_views = [SweepParamView(key=p.key, values=list(p.values)) for p in params]
    first = reports[0]
    view: SweepView = {
        "sweep": FORMAT,
        "chaosd_version": __version__,
        "command": command,
        "scenario": first["scenario"],
        "seed": seeds[0],
        "seeds": seeds,
        "replications": n,
        "duration_s": first["duration_s"],
        "warmup_s": first["warmup_s"],
        "params": param_views,
        "points": views,
        "knee": knees(param_views, views),
        "collapse_onset": collapse_onsets(param_views, views),
    }
    return rounded(view)
