"""chaosd's virtual-time engine against SimPy models of the same work, its linearity in run length, and its memory.

Everything below runs in one invocation, each comparison as interleaved pairs (the side that goes first alternates),
reported as the median of the pairs' ratios of simulated seconds per wall second:

1. **M/M/4 at ρ 0.9** (Poisson arrivals at 360/s from 4 producers, one exponential 10 ms stage, 4 workers): chaosd
   through ``run_offline`` with the detector and admission control off (``detector.enabled`` and
   ``throttle.enabled`` false), against SimPy's bare model (a ``Resource`` of 4, a process per customer). Beside it,
   the engine's floor: the same queue as bare callbacks on chaosd's ``Engine`` heap, with none of the pipeline's
   books (no ledger, dispatch, histograms, telemetry ticks), against the same SimPy model.
2. **The default config** (``config/chaosd.toml``) at 200/s and at 1,000/s (overloaded: capacity admission sheds),
   against a SimPy model of the same work. The model has:

   - the same 4 Poisson producers at rate/4 each, a task object per arrival with its id, times and warm-up cohort,
     ledger counts for both cohorts, an in-flight table and an owed-effects set (the audit);
   - the same bounded queue (a deque; a waiting worker is handed its task through a SimPy event, which is faster
     than a ``simpy.Store``) behind the same admission: an offer is refused when the tasks waiting reach the limit
     ("shed" below the queue's capacity, "queue_full" at it), and each telemetry tick sets the limit as the
     ``capacity`` policy does (measured capacity × admitted wait, cut to the target once the head of the queue has
     stood above it for ``throttle.standing`` seconds); the queue's depth integral kept exactly, and the busy
     workers' integral;
   - 4 worker processes walking the default route plan → search → recall → context → answer, with each stage's
     configured exponential mean drawn from its own stream: the llm and compute stages served inline, the tool
     stage with its timeout (cut and retried with backoff), the memory stage reading a random entry of its store
     and checking it against the corrupted set (restoring it, with its restore time, when found), the mcp stage
     checking its connection; every attempt added to its stage's latency histogram, breaker streaks reset on
     success; the dispatch table's assignment and acknowledgement per task; wait and sojourn histograms;
     completion judged late against the deadline;
   - the leader's heartbeat (every ``orchestrator.renew_interval``): lease renewal, a sweep of the task leases, a
     checkpoint of the dispatch table every ``checkpoint_interval``, a breaker check per stage, a memory scrub;
   - the telemetry tick (every ``telemetry.tick``): a reading of the counts, the busy and queue-depth integrals, the
     head's age and the wait and sojourn histograms (log buckets ×1.05, binned with numpy as chaosd bins them), a
     ring of a window's readings, the window's rates, p50/p95/p99 of wait and sojourn, the least-squares dQ/dt, a
     detector's signals (saturation, standing queue, growth, shedding, collapse, p95 against a median baseline)
     with hold windows, the admission limit, a steady-state window of goodput, errors and p95 (running sums), a
     timeline point every ``run.timeline``, and the stage histograms binned every 10 s.

   It leaves out what does nothing in these runs (faults, the injector's catalogue, the supervisor, breakers that
   never trip, the MCP reconnect loop) and the report's assembly. Both sides are timed from built settings to the
   run's end (chaosd: ``run_offline``; SimPy: building the model and running it).
3. **Linearity**: one 600 s run of the default config at 200/s against ten 60 s runs of it, ratio of wall times.
4. **Memory**: the maximum RSS of a fresh process (``resource.getrusage``) that imports chaosd and runs the default
   config at 200/s for 1 s, 600 s and 3,600 s.

Each side's completions, refusals and mean sojourn are printed beside its speed, so the two are seen to simulate the
same queue.

Each part says which build of chaosd it measured (``chaosd --version``'s): the checkout's own install (plain Python
when it is editable), and with ``--compiled`` then a wheel built from the checkout, whose hot path mypyc compiles
(``pip install .`` installs that one), on the comparisons with SimPy.

    python bench/engine.py            # about 2 minutes
    python bench/engine.py --quick    # under a minute
    python bench/engine.py --quick --speed-only    # the comparisons with SimPy only
    python bench/engine.py --compiled              # and then the comparisons again, compiled (about 2 minutes more)
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _simpy_models import MM4_MEAN, MM4_RATE, ROUTE, WARMUP_SHARE, Outcome, simpy_default, simpy_mm4

from chaosd.config.settings import Settings, load_settings
from chaosd.core.engine import Engine
from chaosd.experiment.runner import run_offline
from chaosd.native import build

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "chaosd.toml"
MM4: dict[str, Any] = {
    "load": {"rate": MM4_RATE, "producers": 4, "arrival": "poisson"},
    "workers": {"count": 4},
    "detector": {"enabled": False},
    "throttle": {"enabled": False},
    "stages": [{"name": "work", "kind": "compute", "service": {"distribution": "exponential", "mean": MM4_MEAN}}],
}
TARGETS = {"mm4": 2.0, "default": 1.0, "linearity": 1.15, "rss_mb": 5.0}


# --- chaosd --------------------------------------------------------------------------------------------------------


def chaosd_run(settings: Settings, duration: float) -> Outcome:
    started = time.perf_counter()
    report = run_offline(settings, duration=duration, warmup=duration * WARMUP_SHARE)
    wall = time.perf_counter() - started
    span = report["duration_s"] - report["warmup_s"]
    return Outcome(
        wall,
        report["throughput"]["completed_per_s"],
        report["tasks"]["rejected"] / span,
        report["latency"]["sojourn"]["mean"],
    )


def bare_mm4(seed: int, duration: float) -> Outcome:
    """The engine's floor: the same M/M/4 as plain callbacks on chaosd's :class:`Engine` heap with none of the
    pipeline's books (a deque of arrival times, a count of idle servers, two timers per customer)."""
    engine = Engine()
    draw = random.Random(f"bare:{seed}").random
    queue: collections.deque[float] = collections.deque()
    idle = [4]
    warmup = duration * WARMUP_SHARE
    sojourns: list[float] = []

    def arrive() -> None:
        t = engine.t
        if idle[0]:
            idle[0] -= 1
            engine.call_at(t - math.log(1.0 - draw()) * MM4_MEAN, finish, t)
        else:
            queue.append(t)
        engine.call_at(t - math.log(1.0 - draw()) / MM4_RATE, arrive)

    def finish(arrived: float) -> None:
        t = engine.t
        if t >= warmup:
            sojourns.append(t - arrived)
        if queue:
            engine.call_at(t - math.log(1.0 - draw()) * MM4_MEAN, finish, queue.popleft())
        else:
            idle[0] += 1

    started = time.perf_counter()
    engine.call_at(0.0, arrive)
    engine.run(duration)
    wall = time.perf_counter() - started
    return Outcome(wall, len(sojourns) / (duration - warmup), 0.0, math.fsum(sojourns) / max(1, len(sojourns)))


def mm4_settings(seed: int) -> Settings:
    return load_settings(overlay={**MM4, "seed": seed})


def default_settings(rate: float, seed: int) -> Settings:
    return load_settings(CONFIG, overlay={"seed": seed, "load": {"rate": rate}})


# --- measuring -----------------------------------------------------------------------------------------------------


def pairs(
    chaosd_side: Callable[[int], Outcome], simpy_side: Callable[[int], Outcome], repeats: int
) -> tuple[list[Outcome], list[Outcome]]:
    """``repeats`` interleaved pairs on seeds 1.., the side going first alternating; each side's outcomes."""
    ours: list[Outcome] = []
    theirs: list[Outcome] = []
    for i in range(repeats):
        if i % 2:
            theirs.append(simpy_side(i + 1))
            ours.append(chaosd_side(i + 1))
        else:
            ours.append(chaosd_side(i + 1))
            theirs.append(simpy_side(i + 1))
    return ours, theirs


def show_pairs(title: str, duration: float, ours: list[Outcome], theirs: list[Outcome], target: float) -> float:
    ratios = [t.wall / o.wall for o, t in zip(ours, theirs, strict=True)]
    ratio = statistics.median(ratios)
    print(f"{title}: {duration:g} simulated s × {len(ours)} pairs")
    for name, runs in (("chaosd", ours), ("SimPy", theirs)):
        speed = statistics.median(duration / r.wall for r in runs)
        done = statistics.median(r.completed for r in runs)
        refused = statistics.median(r.refused for r in runs)
        sojourn = statistics.median(r.sojourn for r in runs)
        print(
            f"  {name:6s} {speed:7.1f} simulated s per wall s · completed {done:6.1f}/s, refused {refused:6.1f}/s, "
            f"mean sojourn {sojourn * 1000:6.2f} ms"
        )
    verdict = "ok" if ratio >= target else "BELOW TARGET"
    each = ", ".join(f"{r:.2f}" for r in ratios)
    print(f"  ratio chaosd/SimPy: {ratio:.2f} (pairs: {each}; target ≥ {target:g}) [{verdict}]")
    return ratio


def linearity(duration: float, pieces: int, repeats: int) -> None:
    """One run of ``duration`` against ``pieces`` runs of a ``pieces``-th of it, which goes first alternating."""
    settings = default_settings(200.0, 1)
    ratios = []
    for i in range(repeats):
        walls: dict[str, float] = {}
        for side in ("long", "short") if i % 2 == 0 else ("short", "long"):
            if side == "long":
                walls[side] = chaosd_run(settings, duration).wall
            else:
                walls[side] = sum(chaosd_run(settings, duration / pieces).wall for _ in range(pieces))
        ratios.append(walls["long"] / walls["short"])
        print(
            f"  {duration:g} s once: {walls['long']:.2f} s wall · {duration / pieces:g} s × {pieces}: "
            f"{walls['short']:.2f} s wall"
        )
    ratio = statistics.median(ratios)
    target = TARGETS["linearity"]
    verdict = "ok" if ratio <= target else "ABOVE TARGET"
    print(f"  ratio once/pieces: {ratio:.3f} (target ≤ {target:g}) [{verdict}]")


_CHILD = """
import resource, sys
from pathlib import Path
from chaosd.config.settings import load_settings
from chaosd.experiment.runner import run_offline
duration = float(sys.argv[1])
settings = load_settings(Path(sys.argv[2]), overlay={"seed": 1, "load": {"rate": 200.0}})
report = run_offline(settings, duration=duration, warmup=duration / 10)
status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, status["VmRSS"].split()[0], report["tasks"]["completed"])
"""


def rss(duration: float) -> tuple[float, float, float]:
    """(max RSS, RSS at the end, both MB; wall seconds) of a fresh interpreter that runs the default config at 200/s
    for ``duration``."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-P", "-c", _CHILD, str(duration), str(CONFIG)],  # -P: the build on sys.path, not ROOT
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    peak, now, _ = done.stdout.split()[-3:]
    return int(peak) / 1024, int(now) / 1024, time.perf_counter() - started


def memory(durations: tuple[float, ...]) -> None:
    peaks = {}
    for duration in durations:
        peaks[duration], now, wall = rss(duration)
        print(
            f"  {duration:6g} simulated s: max RSS {peaks[duration]:6.1f} MB, {now:6.1f} MB at the end "
            f"({wall:.1f} s wall)"
        )
    short, long = durations[-2], durations[-1]
    growth = peaks[long] - peaks[short]
    verdict = "ok" if growth <= TARGETS["rss_mb"] else "ABOVE TARGET"
    print(f"  max RSS, {long:g} s less {short:g} s: {growth:+.1f} MB (target ≤ {TARGETS['rss_mb']:g} MB) [{verdict}]")


def compiled(argv: list[str]) -> None:
    """This script again, with ``argv``, on a wheel of the checkout built with its hot path compiled: the wheel is
    installed (without its dependencies, which this interpreter has) into a folder the child finds first."""
    with tempfile.TemporaryDirectory(prefix="chaosd-compiled-") as tmp:
        started = time.perf_counter()
        pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "wheel", "--no-deps", "-w", tmp, str(ROOT)], check=True, capture_output=True)
        (wheel,) = Path(tmp).glob("chaosd-*.whl")
        target = Path(tmp) / "site"
        subprocess.run(
            [*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True, capture_output=True
        )
        print(f"\ncompiled: a wheel of this checkout built and installed in {time.perf_counter() - started:.0f} s")
        sys.stdout.flush()
        env = os.environ | {"PYTHONPATH": str(target)}
        subprocess.run([sys.executable, __file__, *argv], env=env, check=True)  # sys.path[0]: bench/, not ROOT


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer pairs")
    parser.add_argument(
        "--speed-only", action="store_true", help="the comparisons with SimPy only (no linearity, no memory)"
    )
    parser.add_argument(
        "--compiled", action="store_true", help="then the comparisons again on a compiled wheel of this checkout"
    )
    args = parser.parse_args()
    quick = args.quick
    repeats = 3 if quick else 5
    mm4_s, low_s, high_s = (40.0, 40.0, 20.0) if quick else (120.0, 120.0, 60.0)
    # Imports and first-call paths outside the timed runs.
    chaosd_run(mm4_settings(0), 2.0)
    simpy_mm4(0, 2.0)
    simpy_default(default_settings(200.0, 0), 2.0)
    print(f"chaosd build: {build()} ({Path(sys.modules['chaosd'].__file__ or '').parent})")
    print(f"machine: {len(os.sched_getaffinity(0))} cores, load average {os.getloadavg()[0]:.1f} at the start")
    ours, theirs = pairs(
        lambda seed: chaosd_run(mm4_settings(seed), mm4_s), lambda seed: simpy_mm4(seed, mm4_s), repeats
    )
    show_pairs("M/M/4 at ρ 0.9 (360/s, 10 ms), detector and throttle off", mm4_s, ours, theirs, TARGETS["mm4"])
    floor, theirs = pairs(lambda seed: bare_mm4(seed, mm4_s), lambda seed: simpy_mm4(seed, mm4_s), repeats)
    ratio = statistics.median(t.wall / o.wall for o, t in zip(floor, theirs, strict=True))
    speed = statistics.median(mm4_s / r.wall for r in floor)
    sojourn = statistics.median(r.sojourn for r in floor)
    print(
        f"  floor: the same M/M/4 as bare callbacks on chaosd's engine, no books: {speed:7.1f} simulated s per wall s, "
        f"{ratio:.2f}× SimPy (mean sojourn {sojourn * 1000:6.2f} ms)"
    )
    defaults = default_settings(200.0, 1)
    capacity = defaults.workers.count / sum(s.service.mean for s in defaults.stages if s.name in ROUTE)
    for rate, duration in ((200.0, low_s), (1000.0, high_s)):
        ours, theirs = pairs(
            lambda seed, r=rate, d=duration: chaosd_run(default_settings(r, seed), d),
            lambda seed, r=rate, d=duration: simpy_default(default_settings(r, seed), d),
            repeats,
        )
        title = f"default config at {rate:g}/s"
        if rate > capacity:
            title += f" ({rate / capacity:.1f}× its capacity of {capacity:.0f}/s: capacity admission sheds)"
        show_pairs(title, duration, ours, theirs, TARGETS["default"])
    if not args.speed_only:
        print("linearity: the default config at 200/s")
        linearity(120.0 if quick else 600.0, 10, 1 if quick else 2)
        print("memory: a fresh process per run, the default config at 200/s")
        memory((1.0, 300.0, 1200.0) if quick else (1.0, 600.0, 3600.0))
    if args.compiled:
        compiled(["--speed-only", *(["--quick"] if quick else [])])


if __name__ == "__main__":
    main()
