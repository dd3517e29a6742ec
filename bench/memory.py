"""Memory in simulated time: does a run hold the same memory however long it has run?

Offline: ``run_offline`` (what ``chaosd run`` runs) on ``config/chaosd.toml`` (200 tasks/s, no faults) for 60 s,
600 s and 3,600 s of virtual time, each in a fresh interpreter; its max RSS (``getrusage``).
The daemon: the soak's parts and settings (bench/soak.py: survival with a fault every 60 s, 2 tasks/s, 5 s tick)
for 48 simulated hours; the process RSS after ``gc.collect()`` at 8 h and at 48 h.
Control: the same runs with the stage histograms never drained (``Telemetry._drain_stages`` does nothing), which
is how samples once piled up for a run's whole life: the figures must move, or this bench could not see a leak.
Targets: offline 600 s and 3,600 s within 5 MB; the daemon grows ≤ 8 MB from 8 h to 48 h.

    python bench/memory.py
    python bench/memory.py --quick      # 60 s against 600 s, 2 h against 8 h (a smoke run)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "chaosd.toml"
HOUR = 3600.0
OFFLINE_TARGET = 5.0  # MB between the shorter and the longer offline run
SOAK_TARGET = 8.0  # MB of growth between the two soak times


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # Linux: KiB


def _leak_stage_samples() -> None:
    """The control: the stage histograms keep every sample unbinned until a reader comes (one never does)."""
    from chaosd.telemetry.engine import Telemetry  # noqa: PLC0415 - the children import only what they run

    Telemetry._drain_stages = lambda self: None  # type: ignore[method-assign]


def child_offline(duration: float) -> dict[str, Any]:
    # What `chaosd run` imports, and no more: the daemon's parts (the soak's) would add their own RSS.
    from chaosd.config.settings import load_settings  # noqa: PLC0415
    from chaosd.experiment.runner import run_offline  # noqa: PLC0415

    settings = load_settings(CONFIG)
    report = run_offline(settings, duration=duration, warmup=duration / 10)
    return {"max_rss": max_rss_mb(), "completed": report["tasks"]["completed"], "rate": settings.load.rate}


def child_soak(hours: list[int]) -> dict[str, Any]:
    from _virtual_daemon import VirtualDaemon  # noqa: PLC0415 - a sibling script's helper, not a package
    from soak import overlay  # noqa: PLC0415

    from chaosd.config.settings import load_settings  # noqa: PLC0415

    settings = load_settings(overlay=overlay(argparse.Namespace(rate=2.0, tick=5.0)))
    daemon = VirtualDaemon(settings)
    daemon.call(daemon.controller.plans.start_survival, 60.0, (max(hours) + 1) * HOUR, None)
    out: dict[str, Any] = {}
    for h in range(1, max(hours) + 1):
        daemon.advance_to(h * HOUR)
        if h in hours:
            gc.collect()
            out[str(h)] = {"rss": rss_mb(), "sizes": daemon.controller.board.sizes()}
    out["completed"] = daemon.exp.pipeline.ledger.total.completed
    return out


def spawn(*args: str) -> dict[str, Any]:
    """This script's child mode in a fresh interpreter; its JSON answer."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"child {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def offline(durations: list[float], leaky: bool) -> list[dict[str, Any]]:
    flag = ("--leaky",) if leaky else ()
    return [spawn("offline", f"{d:g}", *flag) for d in durations]


def print_offline(durations: list[float]) -> bool:
    short, long = durations[-2], durations[-1]
    print(
        f"offline: run_offline on config/chaosd.toml (no faults), {', '.join(f'{d:g} s' for d in durations)} of "
        "virtual time, each in a fresh interpreter; max RSS in MB"
    )
    control = "control: stage samples never drained"
    rows = [("as is", offline(durations, False)), (control, offline([short, long], True))]
    width = max(len(r[0]) for r in rows)
    header = "".join(f"{f'{d:g} s':>9}" for d in durations)
    print(f"  {'':{width}}{header}{f'{long:g} s − {short:g} s':>16}")
    growth: dict[str, float] = {}
    for label, runs in rows:
        cells = [f"{'':>9}"] * (len(durations) - len(runs)) + [f"{r['max_rss']:9.1f}" for r in runs]
        growth[label] = runs[-1]["max_rss"] - runs[-2]["max_rss"]
        print(f"  {label:{width}}{''.join(cells)}{growth[label]:+16.1f}")
    tasks = rows[0][1][-1]["completed"]
    print(f"  ({rows[0][1][-1]['rate']:g} tasks/s offered; {tasks} tasks completed in the {long:g} s run)")
    ok = abs(growth["as is"]) <= OFFLINE_TARGET
    seen = growth[control] > OFFLINE_TARGET
    print(f"target {long:g} s within {OFFLINE_TARGET:g} MB of {short:g} s: {growth['as is']:+.1f} MB [{verdict(ok)}]")
    print(f"control beyond the target (the bench sees a leak): {verdict(seen)}")
    return ok and seen


def print_soak(hours: list[int]) -> bool:
    early, late = hours
    print()
    print(
        f"the daemon: bench/soak.py's parts and settings (survival, a fault every 60 s, 2 tasks/s, 5 s tick) for "
        f"{late} simulated hours in a fresh interpreter; RSS in MB after gc.collect()"
    )
    rows = [("as is", spawn("soak", f"{early},{late}")), ("control", spawn("soak", f"{early},{late}", "--leaky"))]
    print(f"  {'':10}{f'{early} h':>9}{f'{late} h':>9}{f'{late} h − {early} h':>14}")
    growth: dict[str, float] = {}
    for label, run in rows:
        a, b = run[str(early)]["rss"], run[str(late)]["rss"]
        growth[label] = b - a
        print(f"  {label:10}{a:9.1f}{b:9.1f}{b - a:+14.1f}")
    sizes_a, sizes_b = rows[0][1][str(early)]["sizes"], rows[0][1][str(late)]["sizes"]
    changed = [f"{k} {sizes_a[k]} → {sizes_b[k]}" for k in sizes_b if sizes_a.get(k) != sizes_b[k]]
    print(f"  entries kept, {early} h → {late} h (each within its history.* bound): {', '.join(changed) or 'none'}")
    print(f"  ({rows[0][1]['completed']} tasks completed)")
    ok = growth["as is"] <= SOAK_TARGET
    seen = growth["control"] > SOAK_TARGET
    print(f"target growth ≤ {SOAK_TARGET:g} MB from {early} h to {late} h: {growth['as is']:+.1f} MB [{verdict(ok)}]")
    print(f"control beyond the target (the bench sees a leak): {verdict(seen)}")
    return ok and seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 s against 600 s, 2 h against 8 h")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "WHEN"), help=argparse.SUPPRESS)
    parser.add_argument("--leaky", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        if args.leaky:
            _leak_stage_samples()
        kind, when = args.child
        answer = child_offline(float(when)) if kind == "offline" else child_soak([int(h) for h in when.split(",")])
        print(json.dumps(answer))
        return 0
    durations = [60.0, 600.0] if args.quick else [60.0, 600.0, 3600.0]
    print_offline(durations)
    print_soak([2, 8] if args.quick else [8, 48])
    return 0


if __name__ == "__main__":
    sys.exit(main())
