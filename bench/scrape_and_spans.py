"""`/metrics` scrape latency while the pipeline is saturated (idle daemon as the baseline, same run),
and spans dropped at the default sampling rate at maximum throughput (an OTLP/HTTP sink on loopback).

    python bench/scrape_and_spans.py [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _daemon import start_daemon

ROOT = Path(__file__).resolve().parent.parent


def _scrape(base: str) -> tuple[float, str]:
    started = time.perf_counter()
    with urllib.request.urlopen(base + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return time.perf_counter() - started, text


def _value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    n = 100 if quick else 400
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        idle, idle_base = start_daemon(Path(a), {"CHAOSD_LOAD__RATE": "200"})
        busy, busy_base = start_daemon(Path(b), {"CHAOSD_LOAD__RATE": "900", "CHAOSD_QUEUE__CAPACITY": "5000"})
        try:
            time.sleep(5)  # let the saturated queue fill (a benchmark, not a test)
            times = {"idle": [], "saturated": []}  # type: dict[str, list[float]]
            for _ in range(n):
                times["idle"].append(_scrape(idle_base)[0])
                times["saturated"].append(_scrape(busy_base)[0])
            depth = _value(_scrape(busy_base)[1], "chaosd_queue_depth")
        finally:
            for proc in (idle, busy):
                proc.terminate()
                proc.wait(timeout=30)
    for name, xs in times.items():
        xs.sort()
        print(f"/metrics {name:9s} p50 {xs[len(xs) // 2] * 1000:6.2f} ms  p95 {xs[int(0.95 * len(xs))] * 1000:6.2f} ms")
    ratio = sorted(times["saturated"])[int(0.95 * n)] / sorted(times["idle"])[int(0.95 * n)]
    print(f"saturated queue depth {depth:.0f}; p95 ratio saturated/idle {ratio:.2f} (budget: p95 ≤ 10 ms)")

    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as c:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_address[1]}",
            "CHAOSD_LOAD__ARRIVAL": "constant",
            "CHAOSD_LOAD__RATE": "1e7",
            "CHAOSD_QUEUE__WHEN_FULL": "block",
            "CHAOSD_STAGES": '[{"name": "work", "service": {"distribution": "constant", "mean": 0}}]',
        }
        proc, base = start_daemon(Path(c), env)
        try:
            time.sleep(5 if quick else 15)
            text = _scrape(base)[1]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    sink.shutdown()
    completed = _value(text, 'chaosd_tasks_total{outcome="completed"}')
    print(
        f"max throughput, default sampling (1 in 1000): {completed:,.0f} tasks, "
        f"spans exported {_value(text, 'chaosd_spans_exported_total'):,.0f}, "
        f"dropped {_value(text, 'chaosd_spans_dropped_total'):,.0f} (target 0)"
    )


if __name__ == "__main__":
    main()
