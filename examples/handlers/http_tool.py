"""An example chaosd stage handler: a tool call to a local HTTP service (``echo_service.py`` beside it).

The URL comes from the environment (``ECHO_URL``), else from the stage's ``params.url``. The call gets the
stage's timeout as its own, so the client gives up when chaosd would; chaosd cuts it at the deadline anyway.
"""

from __future__ import annotations

import os

import aiohttp

from chaosd.handlers import StageContext
from chaosd.pipeline import Task

DEFAULT_URL = "http://127.0.0.1:8099/echo"


async def call(task: Task, context: StageContext) -> dict[str, object]:
    url = os.environ.get("ECHO_URL") or str(context.params.get("url") or DEFAULT_URL)
    sent = {"task": task.id, "stage": context.stage, "attempt": context.attempt, "faults": list(context.faults)}
    timeout = aiohttp.ClientTimeout(total=context.timeout)
    # A session per call keeps the example short; a real client would keep one session for the process.
    async with aiohttp.ClientSession(timeout=timeout) as session, session.post(url, json=sent) as response:
        response.raise_for_status()  # a 5xx is a failed attempt: chaosd retries it per the stage's policy
        answer: dict[str, object] = await response.json()
    if answer.get("echo") != sent:
        raise ValueError(f"the service answered {answer!r} to {sent!r}")
    return answer
