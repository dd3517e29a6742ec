"""A tiny local HTTP service for the example handler: ``POST /echo`` answers with the JSON it was sent.

    python examples/handlers/echo_service.py [--host 127.0.0.1] [--port 8099] [--delay SECONDS]

``GET /stats`` tells how many requests it served. Port 0 picks a free port; the first line printed gives
the URL. SIGINT or SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from aiohttp import web

SERVED = web.AppKey("served", list)
DELAY = web.AppKey("delay", float)


async def echo(request: web.Request) -> web.Response:
    body = await request.json()
    request.app[SERVED].append(1)
    if request.app[DELAY]:
        await asyncio.sleep(request.app[DELAY])  # a slow tool, on demand
    return web.json_response({"echo": body, "served": len(request.app[SERVED])})


async def stats(request: web.Request) -> web.Response:
    return web.json_response({"requests": len(request.app[SERVED])})


async def serve(host: str, port: int, delay: float) -> None:
    app = web.Application()
    app[SERVED] = []
    app[DELAY] = delay
    app.router.add_post("/echo", echo)
    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound = runner.addresses[0][1]
    print(f"echo service listening on http://{host}:{bound}/echo", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099, help="0 picks a free port")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait before answering")
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port, args.delay))


if __name__ == "__main__":
    main()
