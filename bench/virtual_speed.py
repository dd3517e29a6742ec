"""Virtual-time speed of the full chaosd pipeline: simulated seconds per wall-clock second.

Workload (M/M/c-ish): 1,000 tasks/s offered by 4 Poisson producers, 12 workers, one exponential
stage with mean 10 ms (rho ~ 0.83), telemetry/detector on (always on in ``run_offline``).

Baseline: the same arrival/service pattern as a minimal producer/consumer on the same
:class:`chaosd.core.clock.VirtualEventLoop`, using only ``asyncio.Queue`` and ``asyncio.sleep``
(no ledger, histograms, telemetry or detector). Runs are interleaved (bare, chaosd, ...) and the
medians are reported.

    python bench/virtual_speed.py           # 120 simulated s x 3 repeats
    python bench/virtual_speed.py --quick   # 20 simulated s x 3 repeats
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import VirtualEventLoop
from chaosd.experiment.runner import run_offline

RATE = 1000.0  # tasks/s offered, all producers together
PRODUCERS = 4
WORKERS = 12
MEAN_SERVICE = 0.010  # seconds
CAPACITY = 10_000
TARGET = 40.0  # simulated s per wall s

OVERLAY: dict[str, Any] = {
    "seed": 1,
    "load": {"rate": RATE, "producers": PRODUCERS, "arrival": "poisson"},
    "workers": {"count": WORKERS},
    "queue": {"capacity": CAPACITY, "when_full": "block"},
    "stages": [{"name": "work", "service": {"distribution": "exponential", "mean": MEAN_SERVICE}}],
}


def run_chaosd(settings: Settings, duration: float) -> tuple[float, int, int]:
    """One chaosd run in virtual time; returns (wall seconds, tasks completed after warm-up, tasks lost)."""
    start = time.perf_counter()
    report = run_offline(settings, duration=duration, warmup=duration * 0.1, virtual=True)
    wall = time.perf_counter() - start
    return wall, int(report["tasks"]["completed"]), int(report["tasks"]["lost"])


class _Item:
    __slots__ = ("id",)

    def __init__(self, item_id: int) -> None:
        self.id = item_id


def run_bare(duration: float, seed: int = 1) -> tuple[float, int]:
    """The same pattern with plain asyncio on a VirtualEventLoop; returns (wall seconds, items served)."""
    loop = VirtualEventLoop()
    queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=CAPACITY)  # binds to the loop on first use
    served = 0

    async def producer(rng: random.Random, rate: float) -> None:
        now = loop.time
        next_t = now() + rng.expovariate(rate)
        i = 0
        while True:
            delay = next_t - now()
            if delay > 0:
                await asyncio.sleep(delay)
            await queue.put(_Item(i))
            i += 1
            next_t += rng.expovariate(rate)

    async def consumer(rng: random.Random) -> None:
        nonlocal served
        lambd = 1.0 / MEAN_SERVICE
        while True:
            await queue.get()
            await asyncio.sleep(rng.expovariate(lambd))
            served += 1

    async def main() -> None:
        tasks = [
            asyncio.create_task(producer(random.Random(f"bare:{seed}:arrivals:{i}"), RATE / PRODUCERS))
            for i in range(PRODUCERS)
        ]
        service_rng = random.Random(f"bare:{seed}:service")
        tasks += [asyncio.create_task(consumer(service_rng)) for _ in range(WORKERS)]
        await asyncio.sleep(duration)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    start = time.perf_counter()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return time.perf_counter() - start, served


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter run (20 simulated s per repeat)")
    parser.add_argument("--duration", type=float, default=None, help="simulated seconds per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side (median reported)")
    args = parser.parse_args()
    duration = args.duration if args.duration is not None else (20.0 if args.quick else 120.0)
    repeats = max(1, args.repeats)

    settings = load_settings(overlay=OVERLAY)
    # Warm imports and first-call paths outside the timed runs.
    run_bare(1.0)
    run_offline(settings, duration=1.0, warmup=0.1, virtual=True)

    chaosd_speeds: list[float] = []
    bare_speeds: list[float] = []
    chaosd_done: list[int] = []
    bare_done: list[int] = []
    lost: list[int] = []
    for _ in range(repeats):
        wall, done = run_bare(duration)
        bare_speeds.append(duration / wall)
        bare_done.append(done)
        wall, done, n_lost = run_chaosd(settings, duration)
        chaosd_speeds.append(duration / wall)
        chaosd_done.append(done)
        lost.append(n_lost)

    speed = statistics.median(chaosd_speeds)
    bare = statistics.median(bare_speeds)
    print(
        f"workload: {RATE:g} tasks/s offered, {PRODUCERS} poisson producers, {WORKERS} workers, "
        f"exp service {MEAN_SERVICE * 1000:g} ms (rho={RATE * MEAN_SERVICE / WORKERS:.2f}); "
        f"{duration:g} simulated s x {repeats}"
    )
    print(
        f"chaosd runs: {', '.join(f'{s:.1f}' for s in chaosd_speeds)} sim s/wall s; "
        f"completed (after warm-up) median {statistics.median(chaosd_done):.0f}, "
        f"lost max {max(lost)}"
    )
    print(
        f"bare runs:   {', '.join(f'{s:.1f}' for s in bare_speeds)} sim s/wall s; "
        f"served median {statistics.median(bare_done):.0f}"
    )
    verdict = "ok" if speed >= TARGET else "BELOW TARGET"
    print(f"virtual_speed: {speed:.1f} simulated s per wall s (target ≥ {TARGET:g}) [{verdict}]")
    print(f"bare virtual loop: {bare:.1f} simulated s per wall s")
    print(f"ratio chaosd/bare: {bare / speed:.2f}")


if __name__ == "__main__":
    main()
