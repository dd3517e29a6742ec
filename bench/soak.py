"""Soak: the daemon's pipeline in survival mode for a simulated week; does its memory stay flat?

The daemon's Experiment + Controller (as ``chaosd.cli.serve._serve`` builds them, with its telemetry listeners but
without the HTTP server) run on the virtual clock with survival mode on. Every simulated hour, after
``gc.collect()``: the process RSS and ``controller.board.sizes()`` (entries held by each long-lived structure).
Targets (issue 12): RSS grows ≤ 1 MB per simulated day after the first day, and no structure grows with run
time; in a run of two days or more, RSS grows ≤ 8 MB from 8 h to 48 h (issue 39). Then, with all that history
held, the answers the daemon gives are timed: a telemetry tick, /metrics, the report and the survival status
(targets: tick ≤ 1 ms, /metrics ≤ 10 ms, any API answer ≤ 50 ms).

    python bench/soak.py                # 7 simulated days at 2 tasks/s, 5 s tick, a fault every 60 s
    python bench/soak.py --quick        # 1 simulated day (a smoke run)
    python bench/soak.py --days 3 --tick 1 --rate 5
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from _virtual_daemon import VirtualDaemon

from chaosd.config.settings import load_settings
from chaosd.exporters.metrics import make_registry

HOUR = 3600.0
DAY = 86400.0
RSS_TARGET = 1.0  # MB per simulated day
GROWTH_TARGET = 8.0  # MB from 8 h to 48 h
TICK_TARGET = 1.0  # ms
METRICS_TARGET = 10.0  # ms
API_TARGET = 50.0  # ms


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 with fewer than two points)."""
    if len(xs) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def overlay(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "seed": 1,
        "load": {"rate": args.rate},
        # A 5 s tick (default 0.1 s; the telemetry window follows it) and a 1 s lease heartbeat (default 0.125 s):
        # at this light load the virtual loop's time goes to these timers, not to tasks, and with a 0.1 s tick
        # a simulated week takes hours of wall time. The report timeline (5 s) and the score event
        # (5 s) keep their pace, so what accumulates per simulated day does not depend on the tick.
        "telemetry": {"tick": args.tick, "window": max(1.0, args.tick)},
        "orchestrator": {"lease_ttl": 4.0, "renew_interval": 1.0},
    }


class _Timed:
    """Wraps a callable in place to time each call (wall ms) while ``on`` is set."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.on = False
        self.ms: list[float] = []

    def __call__(self, *args: Any) -> Any:
        if not self.on:
            return self.fn(*args)
        start = time.perf_counter()
        try:
            return self.fn(*args)
        finally:
            self.ms.append((time.perf_counter() - start) * 1000)


def _ms(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Median and max wall ms of ``repeats`` calls."""
    took = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        took.append((time.perf_counter() - start) * 1000)
    return statistics.median(took), max(took)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0, help="simulated days (default 7)")
    parser.add_argument("--quick", action="store_true", help="1 simulated day, for a smoke run")
    parser.add_argument("--rate", type=float, default=2.0, help="offered tasks/s (default 2)")
    parser.add_argument("--tick", type=float, default=5.0, help="telemetry tick, s (default 5; the daemon's is 0.1)")
    parser.add_argument("--interval", type=float, default=60.0, help="survival interval, s (default 60)")
    args = parser.parse_args()
    days = 1.0 if args.quick else args.days
    hours = round(days * 24)
    # Warm-up excluded from the slopes: the first day (the first quarter of a shorter run).
    warm_h = 24 if days >= 2 else max(1, hours // 4)

    settings = load_settings(overlay=overlay(args))
    survival_s = days * DAY + HOUR  # an hour beyond the soak, so it is still running when the answers are timed
    print(f"settings overlay: {json.dumps(overlay(args))} (everything else: chaosd defaults)")
    print(
        f"survival: start_survival(interval={args.interval:g} s, duration={survival_s:g} s, every action, "
        f"no overlap); {days:g} simulated days sampled hourly; warm-up excluded from slopes: {warm_h} h"
    )

    gc.collect()
    rss0 = rss_mb()
    wall0 = time.perf_counter()
    daemon = VirtualDaemon(settings)
    daemon.call(daemon.controller.plans.start_survival, args.interval, survival_s, None)
    samples: list[tuple[float, float, dict[str, int]]] = [(0.0, rss_mb(), daemon.controller.board.sizes())]

    tick = _Timed(daemon.exp.telemetry.tick)
    daemon.exp.telemetry.tick = tick  # type: ignore[method-assign]  # the ticker reads the attribute each tick
    on_tick = _Timed(daemon.exp._on_tick) if hasattr(daemon.exp, "_on_tick") else None
    if on_tick is not None:
        daemon.exp._on_tick = on_tick  # type: ignore[method-assign]

    for h in range(1, hours + 1):
        if h == hours:  # the last simulated hour: time every tick as it happens
            tick.on = True
            if on_tick is not None:
                on_tick.on = True
        daemon.advance_to(h * HOUR)
        gc.collect()
        samples.append((h / 24, rss_mb(), daemon.controller.board.sizes()))
        if h % 24 == 0:
            print(f"  day {h // 24}: rss {samples[-1][1]:.1f} MB, wall {time.perf_counter() - wall0:.0f} s", flush=True)
    wall = time.perf_counter() - wall0
    tick.on = False
    if on_tick is not None:
        on_tick.on = False
    completed = daemon.exp.pipeline.ledger.total.completed

    names: list[str] = []
    for _, _, sizes in samples:
        names += [n for n in sizes if n not in names]
    day_rows = [s for s in samples if round(s[0] * 24) % 24 == 0 or s is samples[-1]]
    post = [s for s in samples if s[0] * 24 >= warm_h]
    late = post[len(post) // 2 :]  # the second half after warm-up: is it still growing at the end?

    print()
    print(f"baseline RSS before the daemon was built: {rss0:.1f} MB")
    header = ["simulated day"] + [f"{s[0]:g}" for s in day_rows] + ["growth/day", "late/day", "verdict"]
    rows: list[list[str]] = [header]
    rss_slope = slope([s[0] for s in post], [s[1] for s in post])
    rss_ok = rss_slope <= RSS_TARGET
    rows.append(
        ["RSS MB", *(f"{s[1]:.1f}" for s in day_rows), f"{rss_slope:+.2f}", f"{slope_of(late):+.2f}", verdict(rss_ok)]
    )
    growing = []
    early = post[: len(post) // 2]
    for name in names:
        g = slope([s[0] for s in post if name in s[2]], [float(s[2][name]) for s in post if name in s[2]])
        lg = slope([s[0] for s in late if name in s[2]], [float(s[2][name]) for s in late if name in s[2]])
        top_early = max((s[2][name] for s in early if name in s[2]), default=0)
        top_late = max((s[2][name] for s in late if name in s[2]), default=0)
        # Growing: the second half after warm-up goes above anything the first half held, and still rises.
        # A structure that reaches a fixed bound early flattens; one that swings (a log truncated at each
        # checkpoint) stays within its range: 10 entries or 5 % of slack for that.
        grows = top_late > top_early + max(10, 0.05 * top_early) and lg > 0
        if grows:
            growing.append(name)
        cells = [str(s[2].get(name, "-")) for s in day_rows]
        rows.append([name, *cells, f"{g:+.1f}", f"{lg:+.1f}", verdict(not grows)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for n, row in enumerate(rows):
        print("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)))
        if n == 0:
            print("  ".join("-" * w for w in widths))
    print(
        "(growth/day: least-squares slope over the hourly samples after warm-up; late/day: the same over the "
        "second half of them; RSS in MB/day, structures in entries/day. A structure FAILs when its second half "
        "after warm-up rises above the first half's maximum by more than max(10, 5 %) and is still rising)"
    )
    print()
    print(
        f"wall {wall:.1f} s for {days * DAY:g} simulated s: {days * DAY / wall:.0f} simulated s per wall s; "
        f"{completed} tasks completed, {daemon.exp.injector.injected} faults injected"
    )
    if days < 2:
        print(
            "(a run shorter than 2 days: a structure still filling a fixed bound, and the RSS that goes with it, "
            "shows as growing; the verdicts need the full run)"
        )
    print(f"target RSS slope ≤ {RSS_TARGET:g} MB/simulated day: {rss_slope:+.2f} MB/day [{verdict(rss_ok)}]")
    by_hour = {round(s[0] * 24): s[1] for s in samples}
    if 48 in by_hour:
        grew = by_hour[48] - by_hour[8]
        print(
            f"target RSS growth ≤ {GROWTH_TARGET:g} MB from 8 h to 48 h: {by_hour[8]:.1f} → {by_hour[48]:.1f} MB, "
            f"{grew:+.1f} MB [{verdict(grew <= GROWTH_TARGET)}]"
        )
    print(
        f"target no structure growing with run time: "
        f"{'none grows' if not growing else 'growing: ' + ', '.join(growing)} [{verdict(not growing)}]"
    )

    print()
    print("answers with all that history held (wall ms; median / max):")
    exp, ctl = daemon.exp, daemon.controller
    results: list[tuple[str, float, float, float]] = []
    if tick.ms:
        results.append(
            (
                f"telemetry tick + listeners, in situ (last hour, {len(tick.ms)})",
                statistics.median(tick.ms),
                max(tick.ms),
                TICK_TARGET,
            )
        )
    if on_tick is not None and on_tick.ms:
        both = [a + b for a, b in zip(tick.ms, on_tick.ms, strict=False)]
        results.append(
            (
                "tick: detector, throttle, injector, timeline, in situ",
                statistics.median(on_tick.ms),
                max(on_tick.ms),
                TICK_TARGET,
            )
        )
        results.append(("whole tick (the two above)", statistics.median(both), max(both), TICK_TARGET))
    results.append(("exp.live_score()", *daemon.call(_ms, exp.live_score, 20), TICK_TARGET))
    start = time.perf_counter()
    registry = make_registry(exp)
    results.append(("make_registry(exp) (once, at start-up)", (time.perf_counter() - start) * 1000, 0.0, API_TARGET))
    results.append(
        (
            "registry.exposition()  (GET /metrics)",
            *daemon.call(_ms, registry.exposition, 10),
            METRICS_TARGET,
        )
    )
    listed = settings.history.report

    def live_report() -> str:  # what GET /api/v1/report does: the live report, as JSON
        return json.dumps(exp.report(listed=listed))

    results.append(("GET /api/v1/report (report + JSON)", *daemon.call(_ms, live_report, 5), API_TARGET))
    final = daemon.call(_ms, lambda: json.dumps(exp.report()), 3)
    results.append(("final report (every kept fault) + JSON", *final, 0.0))
    results.append(
        (
            "controller.plan_status(survival)  (GET /api/v1/survival)",
            *daemon.call(_ms, lambda: ctl.plans.status(ctl.plans.survival), 20),
            API_TARGET,
        )
    )
    state = ctl.plans.survival.state if ctl.plans.survival is not None else "none"
    width = max(len(r[0]) for r in results)
    for label, med, top, target in results:
        top_s = f"{top:9.3f}" if top else " " * 9
        judged = f"target ≤ {target:g} ms [{verdict(med <= target)}]" if target else "no target: written once, at exit"
        print(f"  {label.ljust(width)}  {med:9.3f} {top_s}  {judged}")
    print(
        f"  (survival was {state!r} while timed; report JSON: live {len(live_report()) / 1e6:.2f} MB, "
        f"final {len(json.dumps(exp.report())) / 1e6:.2f} MB)"
    )
    daemon.close()


def slope_of(samples: list[tuple[float, float, dict[str, int]]]) -> float:
    return slope([s[0] for s in samples], [s[1] for s in samples])


if __name__ == "__main__":
    main()
