"""Replications on local processes: the same N replications with ``--jobs 1`` and ``--jobs 2``, wall time and ratio.

Both run through :func:`chaosd.batch.replicate.run_many` (a process pool started by forkserver, one or two processes),
interleaved with a peer: the same pool running N pure-Python loops, whose 1-vs-2 ratio is what the machine's load
leaves of two cores at that moment. The reports must be the same bytes.

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


def _peer(n: int, jobs: int) -> float:
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("forkserver")) as pool:
        list(pool.map(_spin, range(n)))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 replications of 30 s (default: 8 of 120 s)")
    args = parser.parse_args()
    n, duration = (4, 30.0) if args.quick else (8, 120.0)
    spec = RunSpec(duration=duration, survival=SurvivalSpec(interval=10.0))
    specs = [spec.with_seed(seed) for seed in seeds_for(1, n)]
    walls: dict[tuple[str, int], list[float]] = {(kind, jobs): [] for kind in ("chaosd", "peer") for jobs in (1, 2)}
    bodies: set[str] = set()
    load = os.getloadavg()[0]
    for _ in range(2):
        for jobs in (1, 2):
            wall, body = _chaosd(specs, jobs)
            walls["chaosd", jobs].append(wall)
            bodies.add(body)
            walls["peer", jobs].append(_peer(n, jobs))
    medians = {key: statistics.median(v) for key, v in walls.items()}
    print(f"workload: {n} replications of a {duration:g} s survival run (default config, every action every 10 s)")
    print(f"peer: {n} pure-Python loops of about a CPU second each, on the same kind of pool")
    print(f"machine: {len(os.sched_getaffinity(0))} cores, load average {load:.1f} at the start")
    for (kind, jobs), value in medians.items():
        runs = ", ".join(f"{v:.2f}" for v in walls[kind, jobs])
        speed = f" · {n * duration / value:6.1f} simulated s per wall s" if kind == "chaosd" else ""
        print(f"{kind:6s} --jobs {jobs}  {value:7.2f} s wall (runs: {runs}){speed}")
    ours = medians["chaosd", 1] / medians["chaosd", 2]
    peer = medians["peer", 1] / medians["peer", 2]
    print(f"ratio jobs 1 / jobs 2: chaosd {ours:.2f}, peer {peer:.2f} (target ≥ 1.8 on 2 free cores)")
    print(f"chaosd's speed-up as a share of the peer's: {ours / peer:.2f}")
    print(f"reports identical across --jobs: {'yes' if len(bodies) == 1 else 'NO'}")


if __name__ == "__main__":
    main()
