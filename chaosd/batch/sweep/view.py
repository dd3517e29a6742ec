"""A sweep's results: the points (each number's mean and 95 % CI over its runs), the capacity knee and the collapse
onset of each series, the file that holds them and their text summary."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict, cast

from chaosd.core.confidence import mean_ci
from chaosd.core.errors import ConfigError
from chaosd.core.humanize import millis, percent, seconds, table
from chaosd.views import MeanCI, ReportView

__all__ = [
    "FORMAT",
    "GOODPUT_FALL",
    "GOODPUT_TARGET",
    "MarkView",
    "SweepParamView",
    "SweepPointView",
    "SweepView",
    "Value",
    "collapse_onsets",
    "fmt_value",
    "knees",
    "load_sweep",
    "point_view",
    "read_sweep",
    "render_sweep",
    "series",
    "write_sweep",
]

FORMAT = 1  # the "sweep" key's value: what tells a sweep file from a run report, and its shape's version
GOODPUT_TARGET = 0.95  # the knee's goodput share of offered load, where slo.availability does not set one
GOODPUT_FALL = 0.05  # the onset: goodput this share below the best at lower load (less is noise on a plateau)


Value = int | float | str | bool  # a swept key's value


class SweepParamView(TypedDict):
    key: str
    values: list[Value]


class SweepPointView(TypedDict):
    """One point of the sweep: each number's mean over its replications, with the 95 % CI when there are several."""

    at: dict[str, Value]
    offered_per_s: MeanCI
    goodput_per_s: MeanCI
    goodput_share: MeanCI  # of the tasks offered in the window, the share that ended good
    p95_s: MeanCI  # sojourn of completed tasks
    shed_share: MeanCI  # refused / offered
    collapse_episodes: MeanCI
    score: MeanCI
    p95_limit_s: float  # slo.p95, else load.deadline: what the knee holds p95 to
    goodput_target: float  # slo.availability, else GOODPUT_TARGET
    within: bool  # the means meet both


class MarkView(TypedDict):
    """The knee or the collapse onset of one series (the points that share the second param's value)."""

    series: dict[str, Value]  # the second param at its value; empty for a sweep of one param
    value: Value | None  # the first param's value there; null: not within the swept range
    point: int | None  # its index in points
    note: str


class SweepView(TypedDict):
    sweep: int
    chaosd_version: str
    command: str
    scenario: str | None
    seed: int
    seeds: list[int]
    replications: int
    duration_s: float
    warmup_s: float
    params: list[SweepParamView]
    points: list[SweepPointView]
    knee: list[MarkView]
    collapse_onset: list[MarkView]


def _measures(r: ReportView) -> dict[str, float | None]:
    window = r["duration_s"] - r["warmup_s"]
    t = r["tasks"]
    offered = t["offered"]
    goodput = r["throughput"]["goodput_per_s"]
    sojourn = r["latency"]["sojourn"]
    return {
        "offered_per_s": offered / window if window > 0 else None,
        "goodput_per_s": goodput,
        # Of the tasks offered in the window, the share that ended good: the window's completions include tasks
        # offered during the warm-up, which made the share of a fully served point read above 100 %.
        "goodput_share": (t["completed"] - t["late"] - t["degraded"]) / offered if offered else None,
        "p95_s": sojourn["p95"] if sojourn["count"] else None,
        "shed_share": t["rejected"] / offered if offered else None,
        "collapse_episodes": float(r["collapse"]["count"]),
        "score": r["score"]["total"],
    }


def point_view(
    at: dict[str, Value], reports: Sequence[ReportView], *, p95_limit: float, goodput_target: float
) -> SweepPointView:
    """One point from its replications' reports (in seed order)."""
    rows = [_measures(r) for r in reports]
    column = {name: mean_ci([row[name] for row in rows]) for name in rows[0]}
    share, p95 = column["goodput_share"]["mean"], column["p95_s"]["mean"]
    within = share is not None and p95 is not None and share >= goodput_target and p95 <= p95_limit
    return {
        "at": at,
        "offered_per_s": column["offered_per_s"],
        "goodput_per_s": column["goodput_per_s"],
        "goodput_share": column["goodput_share"],
        "p95_s": column["p95_s"],
        "shed_share": column["shed_share"],
        "collapse_episodes": column["collapse_episodes"],
        "score": column["score"],
        "p95_limit_s": p95_limit,
        "goodput_target": goodput_target,
        "within": within,
    }


def series(view: SweepView) -> list[tuple[dict[str, Value], list[int]]]:
    """The points of each value of the second param (one series for a single param), in order of the first."""
    return _series(view["params"], view["points"])


def fmt_value(v: Value) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def knees(params: Sequence[SweepParamView], points: Sequence[SweepPointView]) -> list[MarkView]:
    """Per series: the last point of the run of points, from the lowest, that meet the goodput target and the p95
    limit. A point that meets them again after one that does not is noise or luck, not capacity."""
    marks = []
    key = params[0]["key"]
    for at, idx in _series(params, points):
        passing = 0
        while passing < len(idx) and points[idx[passing]]["within"]:
            passing += 1
        if passing == 0:
            first = points[idx[0]]
            note = (
                f"below the swept range: at {key} = {fmt_value(first['at'][key])} goodput or p95 already misses "
                f"{first['goodput_target']:.0%} of offered / {first['p95_limit_s']:g} s"
            )
            marks.append(MarkView(series=at, value=None, point=None, note=note))
            continue
        i = idx[passing - 1]
        p = points[i]
        note = f"the highest {key} with goodput ≥ {p['goodput_target']:.0%} of offered and p95 ≤ {p['p95_limit_s']:g} s"
        if passing == len(idx):
            note += "; the highest point swept: the knee is here or above"
        marks.append(MarkView(series=at, value=p["at"][key], point=i, note=note))
    return marks


def collapse_onsets(params: Sequence[SweepParamView], points: Sequence[SweepPointView]) -> list[MarkView]:
    """Per series: the lowest point where the detector reports collapse episodes, or where goodput falls more than
    GOODPUT_FALL below the best goodput at any lower point (more offered, less served in time)."""
    marks = []
    key = params[0]["key"]
    for at, idx in _series(params, points):
        best: float | None = None
        found: MarkView | None = None
        for i in idx:
            p = points[i]
            goodput = p["goodput_per_s"]["mean"]
            episodes = p["collapse_episodes"]["mean"] or 0.0
            reasons = []
            if episodes > 0:
                reasons.append(f"the detector reported {episodes:g} collapse episode(s) a run")
            if goodput is not None and best is not None and goodput < (1 - GOODPUT_FALL) * best:
                reasons.append(f"goodput fell to {goodput:.1f}/s from {best:.1f}/s at lower load")
            if reasons:
                found = MarkView(series=at, value=p["at"][key], point=i, note="; ".join(reasons))
                break
            if goodput is not None:
                best = goodput if best is None else max(best, goodput)
        marks.append(found or MarkView(series=at, value=None, point=None, note="no collapse within the swept range"))
    return marks


def _series(
    params: Sequence[SweepParamView], points: Sequence[SweepPointView]
) -> list[tuple[dict[str, Value], list[int]]]:
    if len(params) == 1:
        return [({}, list(range(len(points))))]
    key = params[1]["key"]
    return [({key: v}, [i for i, p in enumerate(points) if p["at"][key] == v]) for v in params[1]["values"]]


def write_sweep(view: SweepView, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(view, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_sweep(path: Path) -> SweepView | None:
    """The sweep in the JSON file at ``path``; None when it holds something else (a run report), or cannot be read
    (whoever reads it next says why). A ``sweep`` key of another format or shape is one clear problem."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or "sweep" not in data:
        return None
    return load_sweep(data, path)


def load_sweep(data: dict[str, object], path: Path) -> SweepView:
    """A parsed JSON file with a ``sweep`` key as a sweep; one clear problem if it is another version or shape."""
    if data.get("sweep") != FORMAT:
        raise ConfigError([(str(path), "sweep", f"a sweep file of format {FORMAT} expected (got {data['sweep']!r})")])
    for key in ("params", "points", "knee", "collapse_onset"):
        if not isinstance(data.get(key), list):
            raise ConfigError([(str(path), key, "missing or not a list: not a sweep file")])
    return cast("SweepView", data)  # a sweep by its format key and lists


def _cell(ci: MeanCI, show: Callable[[float], str]) -> str:
    mean, bounds = ci["mean"], ci["ci95"]
    if mean is None:
        return "-"
    if bounds is None:
        return show(mean)
    return f"{show(mean)} ± {show((bounds[1] - bounds[0]) / 2)}"


def _mark(kind: str, params: Sequence[SweepParamView], mark: MarkView) -> str:
    where = "".join(f"{k} = {fmt_value(v)}: " for k, v in mark["series"].items())
    at = "none" if mark["value"] is None else f"{params[0]['key']} = {fmt_value(mark['value'])}"
    return f"  {kind:<10} {where}{at} ({mark['note']})"


def render_sweep(view: SweepView) -> str:
    """The sweep's text summary: a row per point (mean ± the 95 % CI's half-width with replications), then the
    knee and the collapse onset of each series."""
    params = view["params"]
    n = view["replications"]
    runs = (
        f"{n} run{'s' if n != 1 else ''} each (seeds {', '.join(map(str, view['seeds'][:4]))}{', …' if n > 4 else ''})"
    )
    lines = [
        f"chaosd sweep: {view['scenario'] or 'config load'} · {len(view['points'])} points × {runs} · "
        f"{seconds(view['duration_s'])} (warm-up {seconds(view['warmup_s'])} excluded)",
    ]
    if view["command"]:
        lines.append(f"  command    {view['command']}")
    header = [p["key"] for p in params] + ["offered", "goodput", "good share", "p95", "shed", "collapses", "score"]
    rows = []
    for p in view["points"]:
        rows.append(
            [
                *(fmt_value(p["at"][q["key"]]) for q in params),
                _cell(p["offered_per_s"], lambda x: f"{x:.1f}/s"),
                _cell(p["goodput_per_s"], lambda x: f"{x:.1f}/s"),
                _cell(p["goodput_share"], percent),
                _cell(p["p95_s"], millis) + ("" if p["within"] else " ✗"),
                _cell(p["shed_share"], percent),
                _cell(p["collapse_episodes"], lambda x: f"{x:g}"),
                _cell(p["score"], lambda x: f"{x:.1f}"),
            ]
        )
    lines += ["  " + line for line in table(header, rows, ">" * len(header))]
    lines.append("  (✗: below the goodput target or above the p95 limit, on the means)")
    lines += [_mark("knee", params, m) for m in view["knee"]]
    lines += [_mark("onset", params, m) for m in view["collapse_onset"]]
    return "\n".join(lines)
