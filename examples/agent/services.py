"""The worked example's two dependencies, real HTTP services on loopback: a search tool and a simulated LLM.

- **search** (``GET /search?q=…``): answers JSON after a heavy-tailed delay, a Pareto draw (shape 1.6, 4 ms at
  least, capped at 2 s): most calls take a few milliseconds, one in a hundred takes ten times the median.
- **llm** (``POST /v1/complete``): a provider with a rate limit, a token bucket (``--llm-rate`` requests per
  second, bursts of ``--llm-burst``); over it, ``429 Too Many Requests`` with ``Retry-After``, as providers
  answer. Within it, the completion streams back a word at a time (chunked), after a short think.
- **an outage nobody injected** (``POST /outage?service=search&seconds=15``): the service answers 503 to every
  call for that long. chaosd does not know of it; it finds it on its own (an unplanned incident).

    python examples/agent/services.py                       # search on 127.0.0.1:8099, llm on :8098
    python examples/agent/services.py --search-port 0 --llm-port 0   # any free ports; printed on stdout

Prints one line per service, ``search listening on http://127.0.0.1:PORT``, then serves until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import time

from aiohttp import web

_PARETO_SHAPE = 1.6
_SEARCH_MIN = 0.004  # seconds: the fastest answer
_SEARCH_CAP = 2.0
_WORDS = ("the", "pipeline", "recovered", "because", "the", "breaker", "opened", "and", "the", "retries", "found")


class Outages:
    """Until when each service answers 503 (the loop's clock)."""

    def __init__(self) -> None:
        self.until: dict[str, float] = {}

    def down(self, service: str) -> bool:
        return time.monotonic() < self.until.get(service, 0.0)


class TokenBucket:
    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def _unavailable() -> web.Response:
    return web.json_response({"error": "service unavailable"}, status=503, headers={"Retry-After": "1"})


def search_app(outages: Outages, rng: random.Random) -> web.Application:
    async def search(request: web.Request) -> web.Response:
        if outages.down("search"):
            return _unavailable()
        delay = min(_SEARCH_CAP, _SEARCH_MIN * rng.paretovariate(_PARETO_SHAPE))
        await asyncio.sleep(delay)
        query = request.query.get("q", "")
        return web.json_response({"query": query, "results": [f"{query}-{i}" for i in range(3)], "took_s": delay})

    app = web.Application()
    app.router.add_get("/search", search)
    return app


def llm_app(outages: Outages, bucket: TokenBucket, rng: random.Random) -> web.Application:
    async def complete(request: web.Request) -> web.StreamResponse:
        if outages.down("llm"):
            return _unavailable()
        if not bucket.take():
            retry = max(1, round(1.0 / bucket.rate))
            return web.json_response({"error": "rate limit exceeded"}, status=429, headers={"Retry-After": str(retry)})
        prompt = await request.json()
        await asyncio.sleep(rng.uniform(0.002, 0.008))  # the model thinks
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        words = _WORDS[: 4 + len(str(prompt.get("prompt", ""))) % 8]
        for word in words:  # a token at a time, as a streaming completion comes
            await response.write(json.dumps({"token": word}).encode() + b"\n")
        await response.write(json.dumps({"done": True, "tokens": len(words)}).encode() + b"\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/complete", complete)
    return app


def control_app(outages: Outages) -> web.Application:
    async def outage(request: web.Request) -> web.Response:
        service = request.query.get("service", "search")
        if service not in ("search", "llm"):
            return web.json_response({"error": "service must be search or llm"}, status=400)
        try:
            seconds = float(request.query.get("seconds", "15"))
        except ValueError:
            return web.json_response({"error": "seconds must be a number"}, status=400)
        outages.until[service] = time.monotonic() + seconds
        return web.json_response({"service": service, "down_for_s": seconds})

    app = web.Application()
    app.router.add_post("/outage", outage)
    return app


async def serve(search_port: int, llm_port: int, llm_rate: float, llm_burst: float, seed: int) -> None:
    outages = Outages()
    rng = random.Random(seed)
    search = search_app(outages, rng)
    search.add_subapp("/control", control_app(outages))
    llm = llm_app(outages, TokenBucket(llm_rate, llm_burst), rng)
    llm.add_subapp("/control", control_app(outages))
    runners = []
    for name, app, port in (("search", search, search_port), ("llm", llm, llm_port)):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        runners.append(runner)
        bound = runner.addresses[0][1]
        print(f"{name} listening on http://127.0.0.1:{bound}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        for runner in runners:
            await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--search-port", type=int, default=8099)
    parser.add_argument("--llm-port", type=int, default=8098)
    parser.add_argument("--llm-rate", type=float, default=60.0, help="requests per second the llm allows (60)")
    parser.add_argument("--llm-burst", type=float, default=20.0, help="requests it allows at once (20)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.search_port, args.llm_port, args.llm_rate, args.llm_burst, args.seed))


if __name__ == "__main__":
    main()
