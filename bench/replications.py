"""Replications and sweeps on local processes: the same runs with ``--jobs 1`` and ``--jobs 2``, wall time and ratio.

Replications run through :func:`chaosd.batch.replicate.run_many` and a sweep (``overload`` over ``load.rate``, one run
per point) through :func:`chaosd.batch.sweep.run.run_sweep`, each on a process pool started by forkserver (one or two
processes), interleaved with a peer: the same pool running N pure-Python loops, whose 1-vs-2 ratio is what the
machine's load leaves of two cores at that moment. The reports (and the sweep's view) must be the same bytes.

    python bench/replications.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

from chaosd.batch.replicate import RunSpec, SurvivalSpec, run_many, seeds_for
from chaosd.batch.sweep.params import parse_params
from chaosd.batch.sweep.run import run_sweep


def _spin(k: int) -> int:
    """About a CPU second of pure Python: the peer's task."""
    total = 0
    for i in range(8_000_000):
        total += i * k % 7
    return total


def _chaosd(specs: list[RunSpec], jobs: int) -> tuple[float, str]:
    started = time.perf_counter()
    reports = run_many(specs, jobs=jobs)
    return time.perf_counter() - started, json.dumps(reports, sort_keys=True)


def _sweep(spec: RunSpec, rates: str, jobs: int) -> tuple[float, str]:
    started = time.perf_counter()
    view = run_sweep(spec, parse_params([f"load.rate={rates}"]), jobs=jobs)
    return time.perf_counter() - started, json.dumps(view, sort_keys=True)


def _peer(n: int, jobs: int) -> float:
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("forkserver")) as pool:
        list(pool.map(_spin, range(n)))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="4 replications and 4 sweep points of 30 s (default: 8 of 120 s; 8 of 60 s)",
    )
    args = parser.parse_args()
    n, duration = (4, 30.0) if args.quick else (8, 120.0)
    points, sweep_s = (4, 30.0) if args.quick else (8, 60.0)
    rates = f"200:{200 + 50 * (points - 1)}:50"
    spec = RunSpec(duration=duration, survival=SurvivalSpec(interval=10.0))
    specs = [spec.with_seed(seed) for seed in seeds_for(1, n)]
    sweep = RunSpec(scenario="overload", duration=sweep_s)
    kinds = ("replications", "sweep", "peer")
    walls: dict[tuple[str, int], list[float]] = {(kind, jobs): [] for kind in kinds for jobs in (1, 2)}
    bodies: dict[str, set[str]] = {"replications": set(), "sweep": set()}
    load = os.getloadavg()[0]
    for _ in range(5):  # five interleaved rounds: a sweep's runs are short, and two stalled rounds are outvoted
        for jobs in (1, 2):
            wall, body = _chaosd(specs, jobs)
            walls["replications", jobs].append(wall)
            bodies["replications"].add(body)
            wall, body = _sweep(sweep, rates, jobs)
            walls["sweep", jobs].append(wall)
            bodies["sweep"].add(body)
            walls["peer", jobs].append(_peer(n, jobs))
    medians = {key: statistics.median(v) for key, v in walls.items()}
    print(f"replications: {n} of a {duration:g} s survival run (default config, every action every 10 s)")
    print(f"sweep: overload over load.rate={rates} ({points} points, one {sweep_s:g} s run each)")
    print(f"peer: {n} pure-Python loops of about a CPU second each, on the same kind of pool")
    print(f"machine: {len(os.sched_getaffinity(0))} cores, load average {load:.1f} at the start")
    simulated = {"replications": n * duration, "sweep": points * sweep_s}
    for (kind, jobs), value in medians.items():
        runs = ", ".join(f"{v:.2f}" for v in walls[kind, jobs])
        speed = f" · {simulated[kind] / value:6.1f} simulated s per wall s" if kind in simulated else ""
        print(f"{kind:12s} --jobs {jobs}  {value:7.2f} s wall (runs: {runs}){speed}")
    ratios = {kind: medians[kind, 1] / medians[kind, 2] for kind in kinds}
    peer = ratios["peer"]
    for kind in ("replications", "sweep"):
        verdict = "ok" if ratios[kind] >= 1.8 else "BELOW TARGET"
        print(
            f"ratio jobs 1 / jobs 2, {kind}: {ratios[kind]:.2f} (target ≥ 1.8 on 2 free cores) [{verdict}]; "
            f"as a share of the peer's {peer:.2f}: {ratios[kind] / peer:.2f}"
        )
    for kind, seen in bodies.items():
        print(f"{kind}: reports identical across --jobs: {'yes' if len(seen) == 1 else 'NO'}")


if __name__ == "__main__":
    main()
