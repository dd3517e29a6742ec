"""The worked example's stages: a planner, a tool call and an LLM call, the last two over real HTTP.

Each stage opens one HTTP session at start (``setup``) and closes it at stop (``teardown``); every call reads it
as ``context.state``. The calls go to ``context.dependencies[...]``: chaosd's fault proxy in front of each
service (``[dependencies]`` in chaosd.toml), so the ``dependency_*`` faults act on these very calls.
"""

from __future__ import annotations

import asyncio
import json
import random

import aiohttp

from chaosd.handlers import StageContext, StageInfo
from chaosd.pipeline import Task


class RateLimited(Exception):
    """The provider answered 429: a failed attempt, retried after the stage's backoff."""


async def open_session(stage: StageInfo) -> aiohttp.ClientSession:
    # One connection pool per stage for the whole run, not one per call.
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))


async def close_session(session: object, stage: StageInfo) -> None:
    if isinstance(session, aiohttp.ClientSession):
        await session.close()


async def plan(task: Task, context: StageContext) -> str:
    """A simulated planner: picks the query the tool will run; thinks a little first."""
    rng = random.Random(task.id)
    await asyncio.sleep(rng.uniform(0.0005, 0.002))
    return f"topic-{task.id % 97}"


def _session(context: StageContext) -> aiohttp.ClientSession:
    session = context.state
    if not isinstance(session, aiohttp.ClientSession):
        raise RuntimeError(f"stage {context.stage}: setup opened no session")
    return session


async def search(task: Task, context: StageContext) -> dict[str, object]:
    """The tool call: a real GET to the search service, with the stage's timeout as the client's own."""
    url = context.dependencies["search"] + "/search"
    timeout = aiohttp.ClientTimeout(total=context.timeout)
    async with _session(context).get(url, params={"q": f"topic-{task.id % 97}"}, timeout=timeout) as response:
        response.raise_for_status()  # a 5xx is a failed attempt: chaosd retries it per the stage's policy
        answer: dict[str, object] = await response.json()
    if not answer.get("results"):
        raise ValueError(f"search answered no results: {answer!r}")
    return answer


async def complete(task: Task, context: StageContext) -> str:
    """The LLM call: a streamed completion read a line at a time; a 429 is the provider's rate limit."""
    url = context.dependencies["llm"] + "/v1/complete"
    timeout = aiohttp.ClientTimeout(total=context.timeout)
    tokens: list[str] = []
    async with _session(context).post(url, json={"prompt": f"answer {task.id}"}, timeout=timeout) as response:
        if response.status == 429:
            raise RateLimited(f"rate limited; retry after {response.headers.get('Retry-After', '?')} s")
        response.raise_for_status()
        async for line in response.content:  # the stream: a token per line, then a closing line
            message = json.loads(line)
            if message.get("done"):
                return " ".join(tokens)
            tokens.append(str(message["token"]))
    raise ValueError(f"the completion ended without its closing line after {len(tokens)} tokens")
