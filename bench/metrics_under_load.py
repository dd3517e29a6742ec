"""`/metrics` under load: the scrape served from the last tick's render against the same build rendering at each
scrape, in the same run.

1. Two real daemons offered 1,000 tasks/s: one as shipped (the pipeline's series rendered once a telemetry tick),
   one with the tick render taken out (``MetricsRegistry.follow`` a no-op, so each scrape renders everything, as
   the route did before). Scraped in turn over HTTP from this process (keep-alive, as Prometheus does): p50, p95,
   max per daemon, and the daemons' CPU.
2. The history: a real daemon cannot be given a week in bounded time, so the daemon's parts run a simulated week of
   survival on the virtual clock (as ``bench/soak.py``: 2 tasks/s, 5 s tick, a fault every 60 s) with the registry
   following the tick; the tick's render (in situ, every tick of an hour) and a scrape are timed after the first
   simulated hour and after the week, with a full garbage collection's pause, which a scrape can wait behind.

    python bench/metrics_under_load.py            # 400 scrapes of each daemon; a simulated week
    python bench/metrics_under_load.py --quick    # 100 scrapes; a simulated day
"""

from __future__ import annotations

import argparse
import gc
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from _virtual_daemon import VirtualDaemon
from prometheus_client.parser import text_string_to_metric_families

from chaosd.config.settings import load_settings
from chaosd.exporters.metrics import MetricsRegistry, make_registry

ROOT = Path(__file__).resolve().parent.parent
RATE = 1000.0
WORKERS = 12  # the default DAG serves about 100 tasks/s a worker: ρ ≈ 0.83, every offered task served
TARGET_MS = 10.0
HOUR = 3600.0
DAEMON_TICK = 0.1  # telemetry.tick's default: the real daemon renders this often
DAY = 86400.0
# The daemon with the tick render taken out: every scrape renders everything (the baseline).
PER_SCRAPE = (
    "from chaosd.exporters.metrics import MetricsRegistry\n"
    "MetricsRegistry.follow = lambda self, telemetry: None\n"
    "import runpy\n"
    "runpy.run_module('chaosd', run_name='__main__', alter_sys=True)\n"
)


def _start(tmp: Path, per_scrape: bool) -> tuple[subprocess.Popen[str], str, int]:
    """A real daemon at RATE tasks/s: the process, its host and port, once it listens."""
    env = {
        **os.environ,
        "CHAOSD_API__PORT": "0",
        "CHAOSD_LOAD__RATE": str(RATE),
        "CHAOSD_WORKERS__COUNT": str(WORKERS),
        "CHAOSD_STORAGE__PATH": str(tmp / "db"),
        "CHAOSD_DAEMON__REPORT": str(tmp / "report.json"),
        "PYTHONPATH": str(ROOT),
    }
    argv = [sys.executable, "-c", PER_SCRAPE] if per_scrape else [sys.executable, "-m", "chaosd"]
    proc = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    out = proc.stdout
    for line in out:
        if "listening on " in line:
            # Keep reading, or status lines fill the pipe and stall the daemon mid-benchmark.
            threading.Thread(target=lambda: [None for _ in out], daemon=True).start()
            host, port = line.split("listening on http://")[1].split()[0].rsplit(":", 1)
            return proc, host, int(port)
    raise RuntimeError("daemon did not start")


class _Scraper:
    """GET /metrics on one keep-alive connection; each scrape's wall time and the last body."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=10)
        self.ms: list[float] = []
        self.body = b""

    def scrape(self, timed: bool = True) -> bytes:
        started = time.perf_counter()
        self.conn.request("GET", "/metrics")
        resp = self.conn.getresponse()
        body = resp.read()
        took = (time.perf_counter() - started) * 1000
        assert resp.status == 200, resp.status
        if timed:
            self.ms.append(took)
        self.body = body
        return body

    def value(self, name: str, **labels: str) -> float:
        for family in text_string_to_metric_families(self.body.decode()):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return sample.value
        raise KeyError(name)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def real_daemons(n: int) -> None:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        started = {"cached": _start(Path(a), per_scrape=False), "per scrape": _start(Path(b), per_scrape=True)}
        try:
            scrapers = {name: _Scraper(host, port) for name, (_, host, port) in started.items()}
            deadline = time.monotonic() + 60
            for s in scrapers.values():  # warm: 5 s of tasks through each pipeline
                while s.scrape(timed=False) and s.value("chaosd_tasks_total", outcome="completed") < 5 * RATE:
                    assert time.monotonic() < deadline, "the daemon did not complete 5 s of tasks within 60 s"
            first = {name: (time.perf_counter(), _counts(s)) for name, s in scrapers.items() if s.scrape(timed=False)}
            for _ in range(n):  # in turn, so the machine's load falls on both alike
                for s in scrapers.values():
                    s.scrape()
                    time.sleep(0.01)  # a scrape is periodic, not back to back (a benchmark, not a test)
            for s in scrapers.values():
                s.scrape(timed=False)
            print(
                f"{n} scrapes of each daemon over HTTP (keep-alive), in turn; both offered {RATE:,.0f} tasks/s, "
                f"{WORKERS} workers, the default DAG"
            )
            for name, s in scrapers.items():
                t0, (done0, cpu0) = first[name]
                done, cpu = _counts(s)
                wall = time.perf_counter() - t0
                print(
                    f"  {name:10s} p50 {_pct(s.ms, 0.5):6.2f} ms  p95 {_pct(s.ms, 0.95):6.2f} ms  "
                    f"max {max(s.ms):7.2f} ms  · {(done - done0) / wall:6.0f} tasks/s completed, daemon CPU "
                    f"{(cpu - cpu0) / wall:4.0%}, {len(s.body) / 1e3:.0f} kB"
                )
            ratio = _pct(scrapers["per scrape"].ms, 0.95) / _pct(scrapers["cached"].ms, 0.95)
            p95 = _pct(scrapers["cached"].ms, 0.95)
            verdict = "PASS" if p95 <= TARGET_MS else "FAIL"
            print(
                f"  p95 per scrape / cached: {ratio:.2f}×; "
                f"cached p95 {p95:.2f} ms, target ≤ {TARGET_MS:g} ms [{verdict}]"
            )
        finally:
            for proc, _, _ in started.values():
                proc.terminate()
                proc.wait(timeout=30)


def _counts(s: _Scraper) -> tuple[float, float]:
    """(tasks completed, the daemon's CPU seconds) as of the last scrape."""
    return s.value("chaosd_tasks_total", outcome="completed"), s.value("process_cpu_seconds_total")


class _Timed:
    """The registry's render of the pipeline's series, timed in place (wall ms) while ``on``."""

    def __init__(self, registry: MetricsRegistry) -> None:
        self.render = registry._pipeline
        self.on = False
        self.ms: list[float] = []
        registry._pipeline = self  # type: ignore[method-assign]  # called through the attribute at each tick

    def __call__(self) -> tuple[bytes, bytes]:
        if not self.on:
            return self.render()
        started = time.perf_counter()
        try:
            return self.render()
        finally:
            self.ms.append((time.perf_counter() - started) * 1000)


def _ms(fn: Callable[[], object], repeats: int) -> list[float]:
    took = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        took.append((time.perf_counter() - started) * 1000)
    return took


def history(days: float) -> None:
    overlay = {
        "seed": 1,
        "load": {"rate": 2.0},
        "telemetry": {"tick": 5.0, "window": 5.0},
        "orchestrator": {"lease_ttl": 4.0, "renew_interval": 1.0},
    }
    daemon = VirtualDaemon(load_settings(overlay=overlay))
    registry = daemon.call(make_registry, daemon.exp)
    daemon.call(registry.follow, daemon.exp.telemetry)  # as the daemon does (chaosd/cli/serve.py)
    daemon.call(daemon.controller.plans.start_survival, 60.0, days * DAY + HOUR, None)
    timed = _Timed(registry)
    rows: list[tuple[str, list[float], list[float], float, int, dict[str, int]]] = []
    wall = time.perf_counter()
    for label, until in (("after the first simulated hour", HOUR), (f"after {days:g} simulated days", days * DAY)):
        daemon.advance_to(until - HOUR)
        timed.on, timed.ms = True, []
        daemon.advance_to(until)  # an hour of ticks, each render timed as it happens
        timed.on = False
        scrapes = daemon.call(_ms, registry.scrape, 200)
        started = time.perf_counter()
        gc.collect()
        pause = (time.perf_counter() - started) * 1000
        rows.append((label, timed.ms, scrapes, pause, len(registry.scrape()), daemon.controller.board.sizes()))
    wall = time.perf_counter() - wall
    print()
    print(
        f"history: the daemon's parts in survival mode on the virtual clock ({overlay}), the registry following "
        f"the tick; {days:g} simulated days in {wall:.0f} s wall, {daemon.exp.injector.injected} faults injected"
    )
    for label, renders, scrapes, pause, size, sizes in rows:
        held = ", ".join(f"{k} {sizes[k]}" for k in ("events", "faults", "incidents", "timeline", "plan_log"))
        print(f"  {label} (holding {held}):")
        print(
            f"    tick render, in situ ({len(renders)} ticks): median {statistics.median(renders):6.3f} ms, "
            f"p95 {_pct(renders, 0.95):6.3f} ms, max {max(renders):6.3f} ms"
        )
        print(
            f"    scrape (200, between ticks):      median {statistics.median(scrapes):6.3f} ms, "
            f"p95 {_pct(scrapes, 0.95):6.3f} ms, max {max(scrapes):6.3f} ms; {size / 1e3:.0f} kB"
        )
        print(f"    gc.collect(), the pause a scrape may wait behind: {pause:.1f} ms")
    (_, first, _, _, _, _), (_, last, _, _, _, _) = rows
    ratio = statistics.median(last) / statistics.median(first)
    share = statistics.median(last) / 1000 / DAEMON_TICK
    print(
        f"  tick render after the history / after the first hour: {ratio:.2f}×; at the daemon's {DAEMON_TICK:g} s "
        f"tick the render takes {share:.1%} of the loop"
    )
    daemon.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 scrapes and a simulated day")
    args = parser.parse_args()
    real_daemons(100 if args.quick else 400)
    history(1.0 if args.quick else 7.0)


if __name__ == "__main__":
    main()
