"""Compare two chaosd engines on the shipped scenarios: every measured number of the report, over many seeds.

OLD is a git ref (``--old``, default ``main``) checked out with ``git worktree add`` into a temporary directory, or an
existing checkout (``--old-path``); NEW is this checkout. Each scenario runs on each side for seeds 1..N as
``python -m chaosd run SCENARIO --seed S --report FILE --quiet`` with ``PYTHONPATH`` at that side's tree, two runs at a
time, the sides interleaved so that the machine's load falls on both alike. Both sides run the same scenario file
(this checkout's, or the path given): the engines are compared on the same input. The runs see no ``CHAOSD_*``
variable of the calling shell, only those given with ``--old-env`` / ``--new-env`` (a negative control: a changed
setting on one side must show).

What is compared. Each report is walked and its numbers flattened to paths (``latency.sojourn.mean``); booleans count
as 0/1; strings and nulls are not numbers. Left out as non-measurements: the run's identity and settings echoed back
(``seed``, ``duration_s``, ``warmup_s``, ``interrupted``, ``load.*``, ``queue.capacity``, ``throttle.target_s`` and
``.enabled``, ``collapse.detector``), ids and cross-references (``id``, ``fault``, ``incident``, ``faults.N``), fault
TTLs, planned action times and the baseline window's configured length. The timeline becomes each field's mean over
the run's points (``timeline.mean.queue_depth``; its sample times are left out), and the lists of alarm episodes and
throttle moves are compared by their length. List items that name a cause or a check (``diagnostics``,
``expectations``) are keyed by it; faults, incidents and actions by their place in the plan and their action.

The rule. For each metric, each side's mean and its 95 % confidence interval (Student's t, n − 1). A metric
constant over every run of both sides agrees when the two constants are equal and differs otherwise. Any other metric
is judged by Welch's t-test (unequal variances, Welch–Satterthwaite degrees of freedom); with hundreds of metrics, a
5 % test per metric would call about one in twenty of them different by chance alone, so the p-values are corrected
together by Holm's step-down method: the metrics that differ are those the test rejects at a familywise error of 5 %
(over all the metrics judged in the run). The table also marks (``*``) a metric whose difference of means lies
outside the 95 % CI of that difference (an uncorrected test), and the summary says how many of those chance alone
would give. A metric with fewer than two values on a side (an item some runs did not have) is listed, not judged.

    python scripts/compare_engines.py                                  # every scenario, 20 seeds, old = main
    python scripts/compare_engines.py --old HEAD~3 --scenarios baseline,overload --seeds 8
    python scripts/compare_engines.py --old HEAD --scenarios baseline --seeds 4 \\
        --new-env 'CHAOSD_WORKERS__COUNT=5'                            # a negative control: must disagree

Exit 0 when every metric agrees, 1 when one differs, 2 on bad usage or a run that failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
ALPHA = 0.05
RAN = (0, 3)  # the run's exit codes that come with its report: done, or an expectation missed
# Paths that are not measurements: the run's identity, settings echoed back, ids and cross-references, planned times.
_SKIP = re.compile(
    r"^(seed|duration_s|warmup_s|interrupted|load\..*|queue\.capacity|throttle\.(target_s|enabled)|collapse\.detector)$"
    r"|(^|\.)(id|fault|incident|ttl)$|\.faults\.\d+$|(^|\.)baseline\.seconds$|^actions\.[^.]+\.at$"
)
_COUNTED = ("collapse.episodes", "throttle.actions")  # lists of events whose number varies: compared by length
_KEYS = ("cause", "check")  # list items named by one of these are keyed by it


# --- flattening a report -------------------------------------------------------------------------------------------


def flatten(report: Mapping[str, object]) -> dict[str, float]:
    """The report's measured numbers by path (the module docstring says which are left out)."""
    out: dict[str, float] = {}
    _walk(report, "", out)
    return {path: value for path, value in out.items() if not _SKIP.search(path)}


def _walk(node: object, path: str, out: dict[str, float]) -> None:
    if isinstance(node, bool):
        out[path] = float(node)
    elif isinstance(node, int | float):
        if math.isfinite(node):
            out[path] = float(node)
    elif isinstance(node, Mapping):
        for key, value in node.items():
            _walk(value, f"{path}.{key}" if path else str(key), out)
    elif isinstance(node, list):
        _walk_list(node, path, out)


def _walk_list(items: list[object], path: str, out: dict[str, float]) -> None:
    if path in _COUNTED:
        out[f"{path}.length"] = float(len(items))
        return
    if path == "timeline":
        points = [p for p in items if isinstance(p, Mapping)]
        fields = {k for p in points for k, v in p.items() if k != "t" and isinstance(v, int | float)}
        for name in sorted(fields):
            values = [float(p[name]) for p in points if isinstance(p.get(name), int | float)]
            if values:
                out[f"timeline.mean.{name}"] = math.fsum(values) / len(values)
        return
    out[f"{path}.length"] = float(len(items))
    for i, item in enumerate(items):
        _walk(item, f"{path}.{_label(item, i)}", out)


def _label(item: object, index: int) -> str:
    if isinstance(item, Mapping):
        for key in _KEYS:
            if isinstance(item.get(key), str):
                return f"[{item[key]}]"
        if isinstance(item.get("action"), str):
            return f"{index}({item['action']})"
    return str(index)


# --- statistics ----------------------------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _ibeta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with ``df`` degrees of freedom."""
    return _ibeta(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(df: float, p_two_sided: float = ALPHA) -> float:
    """The t for which P(|T| ≥ t) = ``p_two_sided`` (the 95 % interval's half-width in standard errors)."""
    lo, hi = 0.0, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided(mid, df) > p_two_sided:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class Side:
    n: int
    mean: float
    var: float  # sample variance (n − 1)

    @classmethod
    def of(cls, values: Sequence[float]) -> Side:
        n = len(values)
        mean = math.fsum(values) / n
        var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
        return cls(n, mean, var)

    @property
    def half(self) -> float:
        """The 95 % CI's half-width of the mean."""
        return t_quantile(self.n - 1) * math.sqrt(self.var / self.n) if self.n > 1 and self.var > 0 else 0.0


@dataclass
class Metric:
    scenario: str
    path: str
    old: Side
    new: Side
    p: float  # Welch's two-sided p-value (1 or 0 for constants)
    outside: bool  # the difference of means lies outside its 95 % CI (uncorrected)
    constant: bool
    differs: bool = False  # after Holm's correction


def judge(scenario: str, path: str, old: Sequence[float], new: Sequence[float]) -> Metric | None:
    """One metric's verdict before the correction; None when a side has fewer than two values."""
    if len(old) < 2 or len(new) < 2:
        return None
    a, b = Side.of(old), Side.of(new)
    if a.var == 0.0 and b.var == 0.0:
        same = a.mean == b.mean
        return Metric(scenario, path, a, b, 1.0 if same else 0.0, not same, True, not same)
    va, vb = a.var / a.n, b.var / b.n
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / ((va * va / (a.n - 1) if va else 0.0) + (vb * vb / (b.n - 1) if vb else 0.0))
    t = (b.mean - a.mean) / se
    return Metric(scenario, path, a, b, t_two_sided(t, df), abs(t) > t_quantile(df), False)


def holm(metrics: Sequence[Metric], alpha: float = ALPHA) -> None:
    """Mark the tested metrics whose difference Holm's step-down method keeps at a familywise error of ``alpha``."""
    tested = sorted((m for m in metrics if not m.constant), key=lambda m: m.p)
    for rank, metric in enumerate(tested):
        if metric.p > alpha / (len(tested) - rank):
            break
        metric.differs = True


# --- running -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    name: str  # old | new
    tree: Path
    env: Mapping[str, str]


@contextmanager
def old_tree(ref: str | None, path: Path | None) -> Iterator[tuple[Path, str]]:
    """OLD's tree and how to name it: an existing checkout, or ``ref`` checked out into a temporary worktree."""
    if path is not None:
        yield path.resolve(), f"{path} ({_describe(path)})"
        return
    assert ref is not None
    commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    with tempfile.TemporaryDirectory(prefix="chaosd-old-") as tmp:
        where = Path(tmp) / "old"
        _git("worktree", "add", "--detach", str(where), commit)
        try:
            yield where, f"{ref} ({commit[:10]})"
        finally:
            _git("worktree", "remove", "--force", str(where))


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _describe(tree: Path) -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=tree, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "not a git checkout"


def environment(tree: Path, extra: Sequence[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOSD_")}
    env["PYTHONPATH"] = str(tree)
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--old-env/--new-env: expected KEY=VALUE, got {item!r}")
        env[key] = value
    return env


def run_one(engine: Engine, scenario: Path, seed: int, out: Path) -> dict[str, float]:
    report = out / f"{engine.name}-{scenario.stem}-{seed}.json"
    command = [sys.executable, "-m", "chaosd", "run", str(scenario), "--seed", str(seed), "--report", str(report)]
    done = subprocess.run(
        [*command, "--quiet"], cwd=engine.tree, env=dict(engine.env), capture_output=True, text=True, check=False
    )
    if done.returncode not in RAN or not report.exists():
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{engine.name}: {' '.join(command[1:])} exited {done.returncode}: {tail}")
    return flatten(json.loads(report.read_text(encoding="utf-8")))


def run_all(
    engines: Sequence[Engine], scenarios: Sequence[Path], seeds: int, jobs: int, out: Path
) -> dict[tuple[str, str], list[dict[str, float]]]:
    """Every (side, scenario) → its runs' flattened reports, in seed order; the sides interleaved run by run."""
    runs = [(e, s, seed) for seed in range(1, seeds + 1) for s in scenarios for e in engines]
    done = 0

    def one(job: tuple[Engine, Path, int]) -> dict[str, float]:
        nonlocal done
        flat = run_one(*job, out)
        done += 1
        print(f"\r{done}/{len(runs)} runs", end="", file=sys.stderr, flush=True)
        return flat

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, runs))
    print(file=sys.stderr)
    found: dict[tuple[str, str], list[dict[str, float]]] = {}
    for (engine, scenario, _), flat in zip(runs, results, strict=True):
        found.setdefault((engine.name, scenario.stem), []).append(flat)
    return found


# --- the table -----------------------------------------------------------------------------------------------------


def compare(
    found: Mapping[tuple[str, str], list[dict[str, float]]], scenarios: Sequence[Path]
) -> tuple[list[Metric], list[tuple[str, str, int, int]]]:
    """Every metric judged (Holm applied), and those not judged: (scenario, path, old values, new values)."""
    metrics: list[Metric] = []
    unjudged = []
    for scenario in (s.stem for s in scenarios):
        old, new = found[("old", scenario)], found[("new", scenario)]
        paths = sorted({p for flat in (*old, *new) for p in flat})
        for path in paths:
            a = [flat[path] for flat in old if path in flat]
            b = [flat[path] for flat in new if path in flat]
            metric = judge(scenario, path, a, b)
            if metric is None:
                unjudged.append((scenario, path, len(a), len(b)))
            else:
                metrics.append(metric)
    holm(metrics)
    return metrics, unjudged


def _num(x: float) -> str:
    return f"{x:.6g}"


def _ci(side: Side) -> str:
    return f"{_num(side.mean)} ± {_num(side.half)}" if side.var > 0 else _num(side.mean)


def show(metrics: Sequence[Metric], unjudged: Sequence[tuple[str, str, int, int]], only_differ: bool) -> None:
    shown = [m for m in metrics if not m.constant or m.differs]
    if only_differ:
        shown = [m for m in shown if m.differs or m.outside]
    width = max([len(f"{m.scenario} {m.path}") for m in shown] + [20])
    print(
        f"{'scenario metric':{width}s}  {'old mean ± 95 % CI':>28s}  {'new mean ± 95 % CI':>28s}  {'Δ':>8s}  "
        f"{'p':>8s}  verdict"
    )
    for m in shown:
        delta = f"{(m.new.mean - m.old.mean) / abs(m.old.mean):+.1%}" if m.old.mean else "—"
        verdict = "DIFFERS" if m.differs else "agrees" + (" *" if m.outside else "")
        print(
            f"{m.scenario + ' ' + m.path:{width}s}  {_ci(m.old):>28s}  {_ci(m.new):>28s}  {delta:>8s}  "
            f"{m.p:>8.2g}  {verdict}"
        )
    for scenario, path, a, b in unjudged:
        print(f"{scenario + ' ' + path:{width}s}  not judged: {a} value(s) old, {b} new")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="See the module docstring.")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--old", default=None, help="the OLD engine's git ref (default: main)")
    where.add_argument("--old-path", type=Path, default=None, help="an existing checkout as the OLD engine")
    parser.add_argument("--scenarios", default=None, help="comma-separated names in scenarios/ or paths (default: all)")
    parser.add_argument("--seeds", type=int, default=20, help="seeds 1..N per scenario and side (default 20)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    parser.add_argument("--old-env", action="append", default=[], metavar="KEY=VALUE", help="for the OLD side's runs")
    parser.add_argument("--new-env", action="append", default=[], metavar="KEY=VALUE", help="for the NEW side's runs")
    parser.add_argument("--differ-only", action="store_true", help="list only the metrics that differ (or are marked)")
    parser.add_argument("--keep", type=Path, default=None, help="keep every run's report in this directory")
    args = parser.parse_args()
    if args.seeds < 2 or args.jobs < 1:
        parser.error("--seeds must be ≥ 2 and --jobs ≥ 1")
    scenarios = _scenarios(args.scenarios, parser)
    started = time.perf_counter()
    with old_tree(args.old or (None if args.old_path else "main"), args.old_path) as (tree, name):
        engines = (
            Engine("old", tree, environment(tree, args.old_env)),
            Engine("new", ROOT, environment(ROOT, args.new_env)),
        )
        with tempfile.TemporaryDirectory(prefix="chaosd-compare-") as tmp:
            out = args.keep or Path(tmp)
            out.mkdir(parents=True, exist_ok=True)
            try:
                found = run_all(engines, scenarios, args.seeds, args.jobs, out)
            except RuntimeError as exc:
                print(f"\na run failed: {exc}", file=sys.stderr)
                return 2
    wall = time.perf_counter() - started
    metrics, unjudged = compare(found, scenarios)
    print(f"old: {name}{_extra(args.old_env)}")
    print(f"new: {ROOT} ({_describe(ROOT)}){_extra(args.new_env)}")
    print(
        f"scenarios: {', '.join(s.stem for s in scenarios)} · seeds 1–{args.seeds} · {args.jobs} at a time · "
        f"{wall:.0f} s wall"
    )
    show(metrics, unjudged, args.differ_only)
    return summary(metrics, unjudged)


def summary(metrics: Sequence[Metric], unjudged: Sequence[object]) -> int:
    constant = sum(1 for m in metrics if m.constant and not m.differs)
    tested = [m for m in metrics if not m.constant]
    outside = sum(1 for m in tested if m.outside)
    agree = sum(1 for m in metrics if not m.differs)
    print(
        f"constant and equal on both sides: {constant} metrics (not listed); not judged (fewer than 2 values on a "
        f"side): {len(unjudged)}; * = outside the difference's 95 % CI uncorrected: {outside} of {len(tested)} "
        f"(about {ALPHA * len(tested):.0f} expected by chance when the engines agree)"
    )
    print(f"{agree} of {len(metrics)} metrics agree (Welch's t-test, Holm-corrected, familywise α {ALPHA:g})")
    return 0 if agree == len(metrics) else 1


def _extra(env: Sequence[str]) -> str:
    return f" with {' '.join(env)}" if env else ""


def _scenarios(given: str | None, parser: argparse.ArgumentParser) -> list[Path]:
    if given is None:
        return sorted(SCENARIOS.glob("*.yaml"))
    found = []
    for item in given.split(","):
        path = SCENARIOS / f"{item}.yaml" if "/" not in item and not item.endswith((".yaml", ".yml")) else Path(item)
        if not path.is_file():
            parser.error(
                f"--scenarios: no scenario {item!r} (names: {', '.join(p.stem for p in SCENARIOS.glob('*.yaml'))})"
            )
        found.append(path.resolve())
    return found


if __name__ == "__main__":
    sys.exit(main())
