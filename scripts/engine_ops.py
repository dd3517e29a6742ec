"""The virtual-time engine's hot path counted, not timed: Python bytecodes and calls per task, by function.

On a shared, loaded machine a few per cent of speed are lost in the noise of wall and CPU times alike; the number of
bytecodes a run executes is the same from one run to the next (to within the outside-I/O polls, which are paced by
real time), so a change that removes work from the hot path shows here at once. It leaves out what runs in C (numpy,
heapq, the random generator): time those with ``python bench/engine.py`` and a sampling profiler.

    python scripts/engine_ops.py                  # M/M/4 and the default config at 200/s and 1,000/s, 5 s each
    python scripts/engine_ops.py --top 30 mm4     # one of them, with its 30 busiest functions

The runs are bench/engine.py's (the same settings, seed 1).
"""

from __future__ import annotations

import argparse
import collections
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from chaosd.config.settings import Settings, load_settings
from chaosd.experiment.runner import run_offline

CONFIG = Path(__file__).resolve().parent.parent / "config" / "chaosd.toml"
# bench/engine.py's M/M/4: Poisson arrivals at 360/s, one exponential 10 ms stage, 4 workers, detector and throttle off.
MM4: dict[str, Any] = {
    "load": {"rate": 360.0, "producers": 4, "arrival": "poisson"},
    "workers": {"count": 4},
    "detector": {"enabled": False},
    "throttle": {"enabled": False},
    "stages": [{"name": "work", "kind": "compute", "service": {"distribution": "exponential", "mean": 0.010}}],
}
RUNS: dict[str, Callable[[], Settings]] = {
    "mm4": lambda: load_settings(overlay={**MM4, "seed": 1}),
    "default-200": lambda: load_settings(CONFIG, overlay={"seed": 1, "load": {"rate": 200.0}}),
    "default-1000": lambda: load_settings(CONFIG, overlay={"seed": 1, "load": {"rate": 1000.0}}),
}


def completed(settings: Settings, duration: float) -> int:
    """Run ``duration`` simulated seconds, with no warm-up (every task counts); tasks completed."""
    report = run_offline(settings, duration=duration, warmup=0.0)
    return int(report["tasks"]["completed"])


def count(settings: Settings, duration: float) -> tuple[collections.Counter[str], collections.Counter[str], int]:
    """(bytecodes by function, calls by function, tasks completed) of one run of ``duration`` simulated seconds."""
    completed(settings, 1.0)  # imports and first calls outside the count
    ops: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        name = frame.f_code.co_qualname
        if event == "opcode":
            ops[name] += 1
        elif event == "call":
            calls[name] += 1
        return tracer

    sys.settrace(tracer)
    try:
        done = completed(settings, duration)
    finally:
        sys.settrace(None)
    return ops, calls, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help=f"which runs, of {', '.join(RUNS)} (default: all)")
    parser.add_argument("--duration", type=float, default=5.0, help="simulated seconds per run")
    parser.add_argument("--top", type=int, default=12, help="functions listed per run")
    args = parser.parse_args()
    unknown = sorted(set(args.runs) - set(RUNS))
    if unknown:
        parser.error(f"unknown run(s) {', '.join(unknown)} (valid: {', '.join(RUNS)})")
    for name in args.runs or RUNS:
        ops, calls, done = count(RUNS[name](), args.duration)
        total = sum(ops.values())
        print(
            f"{name}: {args.duration:g} simulated s, {done} tasks completed: {total:,} bytecodes, "
            f"{sum(calls.values()):,} Python calls ({total / max(done, 1):,.0f} bytecodes per task)"
        )
        for function, n in ops.most_common(args.top):
            print(f"  {100 * n / total:5.1f} %  {n:9,d} bytecodes  {calls[function]:7,d} calls  {function}")


if __name__ == "__main__":
    main()
