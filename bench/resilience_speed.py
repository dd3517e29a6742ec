"""Virtual-time speed with faults: cascading_storm and survival mode, beside the fault-free pipeline.

All three run the default agent DAG at the same load in the same process, interleaved, so the ratios
compare runs that saw the same machine load. Prints simulated seconds per wall second and the ratios.

    python bench/resilience_speed.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from chaosd.config.settings import Settings
from chaosd.experiment.plans import scenario_plan, survival_plan
from chaosd.experiment.runner import run_offline
from chaosd.experiment.scenario import load_scenario, settings_for
from chaosd.faults import CATALOGUE

ROOT = Path(__file__).resolve().parent.parent


def _speed(settings: Settings, duration: float, plan: object = None) -> float:
    started = time.perf_counter()
    run_offline(settings, duration=duration, warmup=duration / 10, plan=plan)  # type: ignore[arg-type]
    return duration / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    path = ROOT / "scenarios" / "cascading_storm.yaml"
    storm = load_scenario(path)
    settings = settings_for(storm, path, None)
    duration = 60.0 if args.quick else storm.duration
    survival_s = 120.0 if args.quick else 600.0
    speeds: dict[str, list[float]] = {"fault-free": [], "cascading_storm": [], "survival": []}
    for _ in range(3):
        speeds["fault-free"].append(_speed(settings, duration))
        speeds["cascading_storm"].append(_speed(settings, duration, scenario_plan(storm.actions)))
        plan = survival_plan(10.0, tuple(sorted(CATALOGUE)), settings.seed, ttl=20.0, last_at=survival_s - 20.0)
        speeds["survival"].append(_speed(settings, survival_s, plan))
    medians = {k: statistics.median(v) for k, v in speeds.items()}
    print(f"workload: default agent DAG, {settings.load.rate:g} tasks/s, {settings.workers.count} workers")
    for name, value in medians.items():
        print(f"{name:16s} {value:6.1f} simulated s per wall s (runs: {', '.join(f'{v:.1f}' for v in speeds[name])})")
    base = medians["fault-free"]
    print(f"ratio fault-free/cascading_storm: {base / medians['cascading_storm']:.2f}")
    print(f"ratio fault-free/survival (every action, 10 s interval): {base / medians['survival']:.2f}")


if __name__ == "__main__":
    main()
