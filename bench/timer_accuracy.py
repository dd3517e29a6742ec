"""Real-time timer accuracy: how late asyncio.sleep(d) wakes on epoll, poll(), select(), and on chaosd's loop.

chaosd's real-time loop uses ``PreciseEpollSelector`` (epoll for the descriptors, a select() on the
epoll descriptor for the timed wait) where there is epoll, else the platform's default selector: poll()
stands for one that, like epoll, takes its timeout in whole milliseconds. Prints mean and p95 lateness per
loop and the ratios against select() measured in the same run (the machine is shared and noisy, so the
loops are interleaved).
``--busy-fds N`` also opens N idle socket pairs (above descriptor 1024 when N > 512) that the loop
watches while it sleeps; select() cannot, so it is skipped then.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import selectors
import socket
import statistics
import time
from collections.abc import Callable

from chaosd.core.clock import PreciseEpollSelector


async def _lateness(delays: list[float], fds: int) -> list[float]:
    loop = asyncio.get_running_loop()
    pairs = [socket.socketpair() for _ in range(fds)]
    for a, _ in pairs:
        loop.add_reader(a.fileno(), a.recv, 1)
    try:
        late = []
        for d in delays:
            t0 = time.perf_counter()
            await asyncio.sleep(d)
            late.append(time.perf_counter() - t0 - d)
        return late
    finally:
        for a, b in pairs:
            loop.remove_reader(a.fileno())
            a.close()
            b.close()


def _measure(make: Callable[[], selectors.BaseSelector], delays: list[float], fds: int) -> list[float]:
    loop = asyncio.SelectorEventLoop(make())
    try:
        return loop.run_until_complete(_lateness(delays, fds))
    finally:
        loop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--busy-fds", type=int, default=0, help="idle socket pairs the loop watches meanwhile")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2 * args.busy_fds + 256)), hard))
    n = 200 if args.quick else 1000
    delays = [0.0005 + 0.002 * (i % 7) / 7 for i in range(n)]  # 0.5–2.5 ms, like 10 ms-scale service draws
    makers: dict[str, Callable[[], selectors.BaseSelector]] = {
        "epoll": selectors.EpollSelector,
        "chaosd": PreciseEpollSelector,
        "poll": selectors.PollSelector,  # what chaosd's loop runs on where there is neither epoll nor kqueue
    }
    if args.busy_fds <= 400:
        makers["select"] = selectors.SelectSelector
    results: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(3):  # interleaved: the machine is shared and noisy
        for name, make in makers.items():
            results[name] += _measure(make, delays, args.busy_fds)
    means = {}
    for name, late in results.items():
        late.sort()
        means[name] = statistics.fmean(late)
        p95 = late[int(0.95 * len(late))]
        print(f"{name:6s} mean lateness {means[name] * 1e3:.3f} ms · p95 {p95 * 1e3:.3f} ms ({args.busy_fds} idle fds)")
    base = "select" if "select" in means else "epoll"
    for name in makers:
        if name != base:
            print(f"ratio {name}/{base} mean lateness: {means[name] / means[base]:.2f}×")


if __name__ == "__main__":
    main()
