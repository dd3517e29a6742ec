"""Real-time throughput at zero service time: chaosd's pipeline vs a bare asyncio pipeline.

chaosd: ``run_offline(virtual=False)`` with 1 producer offering constant arrivals at 1e7 tasks/s
(far above what it can emit, so it never sleeps), a ``block`` queue of capacity 1000, 1 worker and
one ``constant`` stage with mean 0 (no sleep). Throughput is ``report["throughput"]["completed_per_s"]``
(completions per clock second after the warm-up).

Bare: producer -> ``asyncio.Queue(maxsize=1000)`` -> consumer on
``chaosd.core.clock.new_event_loop(virtual=False)`` (the loop chaosd uses in real time),
items are small slotted objects; throughput is items consumed per second over the same window.

Runs are interleaved (bare, chaosd, bare, chaosd, ...) and medians are reported, with the ratio of each pair;
the budget judges the median of those paired ratios.

    python bench/realtime_throughput.py           # 3 s per run x 3 each
    python bench/realtime_throughput.py --quick   # 1 s per run x 3 each
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import new_event_loop
from chaosd.experiment.runner import run_offline

CAPACITY = 1000
BUDGET = 2.5  # bare/chaosd ratio allowed

OVERLAY: dict[str, Any] = {
    "seed": 1,
    "load": {"rate": 1e7, "producers": 1, "arrival": "constant"},
    "workers": {"count": 1},
    "queue": {"capacity": CAPACITY, "when_full": "block"},
    "stages": [{"name": "work", "service": {"distribution": "constant", "mean": 0.0}}],
}


class _Item:
    __slots__ = ("id",)

    def __init__(self, item_id: int) -> None:
        self.id = item_id


def run_bare(duration: float, warmup: float) -> float:
    """Items consumed per wall second between ``warmup`` and ``duration`` seconds."""
    loop = new_event_loop(virtual=False)
    queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=CAPACITY)
    consumed = 0

    async def producer() -> None:
        i = 0
        while True:
            await queue.put(_Item(i))
            i += 1

    async def consumer() -> None:
        nonlocal consumed
        while True:
            await queue.get()
            consumed += 1

    async def main() -> float:
        tasks = [asyncio.create_task(consumer()), asyncio.create_task(producer())]
        try:
            await asyncio.sleep(warmup)
            c0, t0 = consumed, time.perf_counter()
            await asyncio.sleep(duration - warmup)
            c1, t1 = consumed, time.perf_counter()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return (c1 - c0) / (t1 - t0)

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def run_chaosd(settings: Settings, duration: float, warmup: float) -> tuple[float, dict[str, Any]]:
    report = run_offline(settings, duration=duration, warmup=warmup, virtual=False)
    return float(report["throughput"]["completed_per_s"]), report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs (1 s each)")
    parser.add_argument("--duration", type=float, default=None, help="wall seconds per run (default 3)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side (median reported)")
    args = parser.parse_args()
    duration = args.duration if args.duration is not None else (1.0 if args.quick else 3.0)
    warmup = min(0.5, duration * 0.2)
    repeats = max(1, args.repeats)

    settings = load_settings(overlay=OVERLAY)
    # Warm imports and first-call paths outside the measured runs.
    run_bare(0.2, 0.05)
    run_chaosd(settings, 0.2, 0.05)

    bare: list[float] = []
    chaosd: list[float] = []
    problems: list[str] = []
    for i in range(repeats):
        bare.append(run_bare(duration, warmup))
        rate, report = run_chaosd(settings, duration, warmup)
        chaosd.append(rate)
        tasks = report["tasks"]
        if tasks["completed"] <= 0 or tasks["lost"] != 0 or tasks["lost_all_cohorts"] != 0:
            problems.append(
                f"run {i + 1}: completed={tasks['completed']} lost={tasks['lost']} "
                f"lost_all_cohorts={tasks['lost_all_cohorts']}"
            )

    b = statistics.median(bare)
    c = statistics.median(chaosd)
    ratio = b / c if c > 0 else float("inf")
    print(f"runs: {duration:g} s each ({warmup:g} s warm-up), {repeats} x interleaved")
    print(f"bare runs:   {', '.join(f'{x:,.0f}' for x in bare)} tasks/s")
    print(f"chaosd runs: {', '.join(f'{x:,.0f}' for x in chaosd)} tasks/s")
    print(f"bare: {b:,.0f} tasks/s")
    print(f"chaosd: {c:,.0f} tasks/s")
    # Each bare run and the chaosd run after it see nearly the same machine: their ratio cancels the drift of a
    # shared machine between runs, which the ratio of medians does not.
    # The budget judges their median.
    paired = sorted(x / y for x, y in zip(bare, chaosd, strict=True) if y > 0)
    judged = statistics.median(paired) if paired else float("inf")
    print(f"ratio bare/chaosd of the medians: {ratio:.2f}")
    verdict = "ok" if judged <= BUDGET else "OVER BUDGET"
    pairs = ", ".join(f"{r:.2f}" for r in paired)
    print(f"paired ratios: {pairs}; median {judged:.2f} (budget ≤ {BUDGET:g}×) [{verdict}]")
    if problems:
        print("CHECK FAILED: " + "; ".join(problems))
        raise SystemExit(1)
    print("check: every chaosd run completed > 0 tasks with lost == 0")


if __name__ == "__main__":
    main()
