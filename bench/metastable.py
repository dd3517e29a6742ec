"""Retry storms around the predicted threshold, the ways out, and what the callers' model costs, from one run.

1. **The threshold**: the retry_storm pipeline (4 workers, 10 ms exponential service: a capacity of 400/s; a queue
   of 2,000; callers that wait 1 s and retry 3 times at once; admission control off) with a 10 s spike to twice the
   capacity. ``chaosd predict`` says a storm holds itself above capacity / attempts per caller = 100 callers/s. For
   loads from half to twice that, the share of seeds out of the storm at the end of a 240 s run (goodput over the
   last 10 s at ≥ 90 % of the callers).
2. **The ways out**, at twice the threshold, judged as the acceptance tests judge them (goodput back to ≥ 90 % of
   the callers within 20 s of the spike's end and staying there, in 5 s means): none; workers dropping expired
   attempts; a 10 % retry budget; admission control (the capacity policy, bounded by the callers' timeout); backoff
   with jitter (0.1 s doubling to 1 s, half of it random); admission with callers honouring its retry-after hint.
   Each with the share of seeds that recover, their mean goodput after the spike and attempts per caller.
3. **The cost**: the default config at 200/s with callers that wait forever and never retry (the defaults) against
   callers with a policy that never fires in that run (a 5 s timeout, 3 retries on timeouts and refusals, a 10 %
   budget), interleaved pairs of the same seed, as simulated seconds per wall second.

    python bench/metastable.py            # about a minute
    python bench/metastable.py --quick    # fewer seeds and pairs
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from chaosd.config.settings import Settings, deep_merge, load_settings
from chaosd.experiment.predict import predict
from chaosd.experiment.runner import run_offline
from chaosd.views import ReportView

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "chaosd.toml"
STORM: dict[str, Any] = {
    "workers": {"count": 4},
    "stages": [{"name": "work", "kind": "compute", "service": {"distribution": "exponential", "mean": 0.01}}],
    "queue": {"capacity": 2000},
    "throttle": {"enabled": False},
    "load": {"deadline": 0, "phases": [{"type": "spike", "at": 5.0, "rate": 800.0, "duration": 10.0}]},
    "clients": {"timeout": 1.0, "retries": 3},
    "run": {"timeline": 1.0},
}
TRIGGER_END, DURATION = 15.0, 60.0
SWEEP_S = 240.0
SHARES = (0.5, 0.75, 0.9, 1.1, 1.25, 1.5, 2.0)  # loads as a share of the predicted threshold
WAYS_OUT: dict[str, dict[str, Any]] = {
    "none": {},
    "drop_expired": {"clients": {"drop_expired": True}},
    "budget 0.1": {"clients": {"budget": {"ratio": 0.1}}},
    "admission (capacity)": {"throttle": {"enabled": True, "policy": "capacity"}},
    "backoff 0.1 s ×2 to 1 s, jitter 0.5": {
        "clients": {"backoff": {"base": 0.1, "factor": 2, "max": 1, "jitter": 0.5}}
    },
    "admission + retry-after": {"throttle": {"enabled": True, "policy": "capacity"}, "clients": {"retry_after": True}},
}
QUIET_POLICY = {"timeout": 5.0, "retries": 3, "budget": {"ratio": 0.1}}


def storm_settings(rate: float, seed: int, extra: dict[str, Any]) -> Settings:
    return load_settings(overlay=deep_merge(deep_merge(STORM, {"seed": seed, "load": {"rate": rate}}), extra))


def recovered(report: ReportView, rate: float) -> tuple[bool, float]:
    """(back to ≥ 90 % of the callers within 20 s of the spike's end and stays so, in 5 s means; mean goodput
    from then on)."""
    rates = [float(p["goodput_per_s"]) for p in report["timeline"] if p["t"] > TRIGGER_END + 1e-9]
    means = [statistics.fmean(rates[i : i + 5]) for i in range(len(rates) - 4)]
    back = next((i for i in range(len(means)) if min(means[i:]) >= 0.9 * rate), None)
    after = statistics.fmean(rates[20:]) if len(rates) > 20 else 0.0
    return back is not None and back + 1 <= 20, after


def drained(report: ReportView, rate: float) -> bool:
    """Whether the run ended out of the storm: goodput over its last 10 s at ≥ 90 % of the callers."""
    tail = [float(p["goodput_per_s"]) for p in report["timeline"]][-10:]
    return statistics.fmean(tail) >= 0.9 * rate


def threshold_sweep(seeds: int) -> float:
    """Near the threshold a backlog drains slowly (at capacity − attempts per caller × load): the runs are long
    enough for that, and judged at their end."""
    prediction = predict(storm_settings(100.0, 1, {}))
    threshold = prediction["threshold_per_s"]
    assert threshold is not None, prediction
    print(f"prediction: {prediction['reason']}")
    print(
        f"threshold {threshold:.1f} callers/s; {seeds} seeds per load; a 10 s spike to 800/s at 5 s; {SWEEP_S:g} s runs"
    )
    print(f"  {'load':>14} {'share of seeds out of the storm at the end':>44}")
    for share in SHARES:
        rate = share * threshold
        ok = sum(
            drained(run_offline(storm_settings(rate, s, {}), duration=SWEEP_S, warmup=0.0), rate)
            for s in range(1, seeds + 1)
        )
        print(f"  {rate:7.1f}/s ×{share:<4g} {ok:>26d} of {seeds} ({ok / seeds:4.0%})")
    return threshold


def ways_out(threshold: float, seeds: int) -> None:
    rate = 2.0 * threshold
    print(f"\nways out at {rate:.0f} callers/s (twice the threshold), {seeds} seeds")
    print(f"  {'policy':38} {'recovering':>12} {'goodput after':>14} {'attempts/caller':>16}")
    for name, extra in WAYS_OUT.items():
        runs = [run_offline(storm_settings(rate, s, extra), duration=DURATION, warmup=0.0) for s in range(1, seeds + 1)]
        judged = [recovered(r, rate) for r in runs]
        ok = sum(j[0] for j in judged)
        good = statistics.fmean(j[1] for j in judged)
        amplification = statistics.fmean(
            (r["tasks"]["offered"] + r["tasks"]["retried"]) / r["tasks"]["offered"] for r in runs
        )
        print(f"  {name:38} {ok:>5d} of {seeds} {good:>12.1f}/s {amplification:>16.2f}")


def cost(pairs: int, duration: float) -> None:
    print(f"\ncost of the callers' model: the default config at 200/s, {duration:g} simulated s, {pairs} pairs")
    ratios: list[float] = []
    speeds: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(pairs):
        order = ("off", "on") if i % 2 == 0 else ("on", "off")
        walls: dict[str, float] = {}
        for side in order:
            overlay = {"seed": i + 1, "load": {"rate": 200.0}}
            if side == "on":
                overlay["clients"] = QUIET_POLICY
            settings = load_settings(CONFIG, overlay=overlay)
            started = time.perf_counter()
            report = run_offline(settings, duration=duration, warmup=duration / 10)
            walls[side] = time.perf_counter() - started
            speeds[side].append(duration / walls[side])
            if side == "on":
                assert report["tasks"]["retried"] == 0, "the quiet policy fired: not a measure of its bookkeeping"
        ratios.append(walls["off"] / walls["on"])
    for side, label in (("off", "callers wait forever (defaults)"), ("on", f"callers with a policy {QUIET_POLICY}")):
        print(f"  {label}: {statistics.median(speeds[side]):.1f} simulated s per wall s")
    ratio = statistics.median(ratios)
    verdict = "ok" if ratio >= 0.9 else "ABOVE TARGET"
    each = ", ".join(f"{r:.2f}" for r in ratios)
    print(f"  speed with the policy / without: {ratio:.3f} (pairs: {each})")
    print(f"  target: a cost of at most 10 % (ratio ≥ 0.90) [{verdict}]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds and pairs")
    args = parser.parse_args()
    seeds, pairs = (3, 3) if args.quick else (5, 7)
    threshold = threshold_sweep(seeds)
    ways_out(threshold, seeds)
    cost(pairs, 60.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
