"""Real-time throughput at zero service time with full telemetry on (detector, throttle, injector, score)
versus the bare pipeline (producers, queue, workers, ledger; no telemetry ticker), interleaved in one run.

    python bench/telemetry_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from chaosd.config.settings import Settings, load_settings
from chaosd.core.clock import LoopClock, new_event_loop
from chaosd.experiment.runner import Experiment
from chaosd.pipeline import Pipeline

OVERLAY = {
    "load": {"arrival": "constant", "rate": 1e7, "producers": 1},
    "workers": {"count": 1},
    "queue": {"capacity": 1000, "when_full": "block"},
    "stages": [{"name": "work", "service": {"distribution": "constant", "mean": 0.0}}],
}


def _run(settings: Settings, seconds: float, telemetry: bool) -> float:
    loop = new_event_loop(virtual=False)
    try:
        clock = LoopClock(loop)

        async def main() -> float:
            if telemetry:
                exp = Experiment(settings, clock, warmup=0.5, virtual=False)
                report = await exp.run(seconds + 0.5)
                return float(report["throughput"]["completed_per_s"])
            pipeline = Pipeline(settings, clock)
            async with pipeline.running():
                await clock.sleep(0.5)
                start = pipeline.ledger.total.completed
                await clock.sleep(seconds)
                return (pipeline.ledger.total.completed - start) / seconds

        return loop.run_until_complete(main())
    finally:
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    seconds = 1.0 if parser.parse_args().quick else 3.0
    settings = load_settings(None, OVERLAY)
    on: list[float] = []
    off: list[float] = []
    for _ in range(3):
        off.append(_run(settings, seconds, telemetry=False))
        on.append(_run(settings, seconds, telemetry=True))
    print(f"telemetry off: {statistics.median(off):,.0f} tasks/s (runs {', '.join(f'{x:,.0f}' for x in off)})")
    print(f"telemetry on:  {statistics.median(on):,.0f} tasks/s (runs {', '.join(f'{x:,.0f}' for x in on)})")
    print(f"ratio off/on: {statistics.median(off) / statistics.median(on):.2f} (budget ≤ 2×)")


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
