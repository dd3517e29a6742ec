"""The dependency fault proxy's cost with no fault: per call through it against the same local service called
directly, in the same run.

A small JSON GET and a 64 KiB GET with aiohttp's client (one pooled session), and a 64-byte echo round trip over a
kept-open TCP connection, each direct and through a ``FaultProxy``, in interleaved rounds (the machine is shared and
noisy). Prints the per-call µs of each, what the proxy adds and the ratio (medians over the rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from chaosd.core.clock import wall_time
from chaosd.faults.proxy import FaultProxy, parse_upstream

BIG = b"x" * 65536


async def _small(_: web.Request) -> web.Response:
    return web.json_response({"ok": True, "items": [1, 2, 3]})


async def _big(_: web.Request) -> web.Response:
    return web.Response(body=BIG)


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


def _http_call(session: aiohttp.ClientSession, url: str) -> Callable[[], Awaitable[None]]:
    async def call() -> None:
        async with session.get(url) as resp:
            await resp.read()

    return call


async def _tcp_call(port: int) -> tuple[Callable[[], Awaitable[None]], asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    message = b"m" * 64

    async def call() -> None:
        writer.write(message)
        await reader.readexactly(len(message))

    return call, writer


async def _per_call(call: Callable[[], Awaitable[None]], n: int) -> float:
    began = wall_time()
    for _ in range(n):
        await call()
    return (wall_time() - began) / n


async def _run(rounds: int, calls: int) -> list[str]:
    app = web.Application()
    app.router.add_get("/api/small", _small)
    app.router.add_get("/api/big", _big)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    http_port = runner.addresses[0][1]
    echo = await asyncio.start_server(_echo, "127.0.0.1", 0)
    tcp_port = echo.sockets[0].getsockname()[1]
    http_proxy = FaultProxy("bench", parse_upstream(f"http://127.0.0.1:{http_port}/api"), rng=random.Random(1))
    tcp_proxy = FaultProxy("bench_tcp", parse_upstream(f"tcp://127.0.0.1:{tcp_port}"), rng=random.Random(1))
    await http_proxy.start()
    await tcp_proxy.start()
    writers: list[asyncio.StreamWriter] = []
    try:
        async with aiohttp.ClientSession() as session:
            direct_tcp, w1 = await _tcp_call(tcp_port)
            through_tcp, w2 = await _tcp_call(tcp_proxy.port)
            writers += [w1, w2]
            cases: dict[str, tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]] = {
                "HTTP small GET": (
                    _http_call(session, f"http://127.0.0.1:{http_port}/api/small"),
                    _http_call(session, f"{http_proxy.url}/small"),
                ),
                "HTTP 64 KiB GET": (
                    _http_call(session, f"http://127.0.0.1:{http_port}/api/big"),
                    _http_call(session, f"{http_proxy.url}/big"),
                ),
                "TCP 64 B echo": (direct_tcp, through_tcp),
            }
            for direct, through in cases.values():  # warm the pools and the code paths
                await _per_call(direct, 50)
                await _per_call(through, 50)
            measured: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in cases}
            for r in range(rounds):
                for name, (direct, through) in cases.items():
                    first, second = (direct, through) if r % 2 == 0 else (through, direct)
                    a = await _per_call(first, calls)
                    b = await _per_call(second, calls)
                    d, t = (a, b) if r % 2 == 0 else (b, a)
                    measured[name][0].append(d)
                    measured[name][1].append(t)
    finally:
        for w in writers:
            w.close()
        await http_proxy.stop()
        await tcp_proxy.stop()
        echo.close()
        await echo.wait_closed()
        await runner.cleanup()
    lines = [f"{'case':16s} {'direct µs':>10s} {'through µs':>11s} {'added µs':>9s} {'ratio':>6s}"]
    for name, (direct_s, through_s) in measured.items():
        d = statistics.median(direct_s) * 1e6
        t = statistics.median(through_s) * 1e6
        lines.append(f"{name:16s} {d:10.1f} {t:11.1f} {t - d:9.1f} {t / d:5.2f}×")
    lines.append(f"calls seen by the proxies: HTTP {http_proxy.calls}, TCP connections {tcp_proxy.calls}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (a few seconds)")
    args = parser.parse_args()
    rounds, calls = (6, 200) if args.quick else (20, 500)
    print("$ python bench/dependency_proxy.py" + (" --quick" if args.quick else ""))
    print(f"{rounds} interleaved rounds of {calls} sequential calls per case; medians over the rounds")
    print()
    for line in asyncio.run(_run(rounds, calls)):
        print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
