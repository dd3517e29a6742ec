"""Real-time timer accuracy: how late asyncio.sleep(d) wakes on epoll vs on the select() loop chaosd uses.

Prints the mean and p95 lateness per loop and their ratio (measured in the same run).
"""

from __future__ import annotations

import argparse
import asyncio
import selectors
import statistics
import time


async def _lateness(delays: list[float]) -> list[float]:
    late = []
    for d in delays:
        t0 = time.perf_counter()
        await asyncio.sleep(d)
        late.append(time.perf_counter() - t0 - d)
    return late


def _measure(selector: selectors.BaseSelector, delays: list[float]) -> list[float]:
    loop = asyncio.SelectorEventLoop(selector)
    try:
        return loop.run_until_complete(_lateness(delays))
    finally:
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n = 200 if args.quick else 1000
    delays = [0.0005 + 0.002 * (i % 7) / 7 for i in range(n)]  # 0.5–2.5 ms, like 10 ms-scale service draws
    results: dict[str, list[float]] = {"epoll": [], "select": []}
    for _ in range(3):  # interleaved: the machine is shared and noisy
        results["epoll"] += _measure(selectors.EpollSelector(), delays)
        results["select"] += _measure(selectors.SelectSelector(), delays)
    for name, late in results.items():
        late.sort()
        p95 = late[int(0.95 * len(late))]
        print(f"{name:6s} mean lateness {statistics.fmean(late) * 1e3:.3f} ms · p95 {p95 * 1e3:.3f} ms")
    ratio = statistics.fmean(results["epoll"]) / statistics.fmean(results["select"])
    print(f"ratio epoll/select mean lateness: {ratio:.1f}× (chaosd's real-time loop uses select)")


if __name__ == "__main__":
    main()
