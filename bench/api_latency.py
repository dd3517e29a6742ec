"""API latency while the pipeline is saturated, against the same daemon build idle, in one run.

Starts two real daemons on loopback (one offered ~0.5 ρ, one ~2× capacity so the queue stays full),
then times GET /api/v1/status and POST /api/v1/faults (+ DELETE) sequentially against each.
Prints p50/p99 per route and the saturated/idle ratio.

    python bench/api_latency.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from _daemon import start_daemon

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-token-0123456789"


def _start(tmp: Path, rate: float) -> tuple[subprocess.Popen[str], str]:
    return start_daemon(
        tmp, {"CHAOSD_API__TOKEN": TOKEN, "CHAOSD_LOAD__RATE": str(rate), "CHAOSD_QUEUE__CAPACITY": "5000"}
    )


def _call(method: str, url: str, body: dict[str, object] | None = None) -> tuple[float, dict[str, object]]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    )
    started = time.perf_counter()
    with urllib.request.urlopen(req, timeout=10) as resp:
        payload = json.loads(resp.read())
    return time.perf_counter() - started, payload


def _measure(base: str, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"status": [], "inject": []}
    for _ in range(n):
        out["status"].append(_call("GET", base + "/api/v1/status")[0])
        took, fault = _call("POST", base + "/api/v1/faults", {"action": "slow_agent", "ttl": 30})
        out["inject"].append(took)
        _call("DELETE", f"{base}/api/v1/faults/{fault['id']}")
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    n = 100 if parser.parse_args().quick else 500
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        idle, idle_base = _start(Path(a), 200)
        busy, busy_base = _start(Path(b), 900)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # saturated: wait for the queue to build
                _, status = _call("GET", busy_base + "/api/v1/status")
                if status["queue"]["depth"] > 2000:  # type: ignore[index]
                    break
            results = {"idle": _measure(idle_base, n), "saturated": _measure(busy_base, n)}
            _, status = _call("GET", busy_base + "/api/v1/status")
        finally:
            for proc in (idle, busy):
                proc.terminate()
                proc.wait(timeout=30)
    print(f"{n} sequential requests per route; saturated daemon queue depth {status['queue']['depth']}")
    for route in ("status", "inject"):
        i, s = results["idle"][route], results["saturated"][route]
        ratio = statistics.median(s) / statistics.median(i)
        print(
            f"{route:7s} idle p50 {_pct(i, 0.5):6.2f} ms p99 {_pct(i, 0.99):6.2f} ms · saturated p50 "
            f"{_pct(s, 0.5):6.2f} ms p99 {_pct(s, 0.99):6.2f} ms · ratio p50 {ratio:.2f}"
        )


if __name__ == "__main__":
    main()
