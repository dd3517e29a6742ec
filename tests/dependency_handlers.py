"""Handlers the dependency and lifecycle tests name in their configs (``dependency_handlers:get`` …).

Each writes one JSON line per event to the file named by ``$CHAOSD_TEST_CALLS`` (the daemon, or a Redis worker,
runs in another process): setup and teardown with their stage, and every call with what the handler's real client
saw, with the process id, so a test tells the workers apart. tests/redis_dependency_handlers.py shares them.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import aiohttp

from chaosd.handlers import StageContext, StageInfo
from chaosd.pipeline import Task

CALLS_VARIABLE = "CHAOSD_TEST_CALLS"


def recorded(path: Path) -> list[dict[str, Any]]:
    """Every line written so far to the file at ``path`` (none before the first)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def record(**line: Any) -> None:
    path = os.environ.get(CALLS_VARIABLE)
    if path:
        with open(path, "a", encoding="utf-8") as fh:  # one short append per line: whole lines across processes
            fh.write(json.dumps({"t": time.time(), "pid": os.getpid(), **line}) + "\n")


async def setup(stage: StageInfo) -> aiohttp.ClientSession:
    record(event="setup", stage=stage.stage, dependencies=dict(stage.dependencies))
    return aiohttp.ClientSession()


async def teardown(session: object, stage: StageInfo) -> None:
    assert isinstance(session, aiohttp.ClientSession)
    await session.close()
    record(event="teardown", stage=stage.stage)


async def failing_setup(stage: StageInfo) -> None:
    raise ConnectionRefusedError(f"cannot reach the model for {stage.stage}")


async def get(task: Task, context: StageContext) -> None:
    """One GET through the stage's ``svc`` dependency; the line says the status or the error, and the time."""
    session = context.state
    assert isinstance(session, aiohttp.ClientSession), "setup's session is the state"
    url = context.dependencies["svc"] + "/search"
    started = time.monotonic()
    try:
        async with session.get(url, params={"q": str(task.id)}) as response:
            body = await response.read()
            status = response.status
    except (TimeoutError, aiohttp.ClientError, OSError, asyncio.CancelledError) as exc:
        # CancelledError: chaosd cut the call at the stage's timeout.
        record(
            event="call",
            stage=context.stage,
            error=type(exc).__name__,
            dt=time.monotonic() - started,
            faults=list(context.faults),
        )
        raise
    record(
        event="call",
        stage=context.stage,
        status=status,
        bytes=len(body),
        dt=time.monotonic() - started,
        faults=list(context.faults),
    )
    if status >= 400:
        raise RuntimeError(f"the service answered {status}")


async def echo(task: Task, context: StageContext) -> None:
    """One round trip over raw TCP through the stage's ``echo`` dependency (``tcp://host:port``)."""
    host, _, port = context.dependencies["echo"].removeprefix("tcp://").rpartition(":")
    started = time.monotonic()
    message = f"task {task.id}\n".encode()
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(message)
            await writer.drain()
            answer = await reader.readexactly(len(message))
        finally:
            writer.close()
    except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError) as exc:
        record(
            event="call",
            stage=context.stage,
            error=type(exc).__name__,
            dt=time.monotonic() - started,
            faults=list(context.faults),
        )
        raise
    record(
        event="call",
        stage=context.stage,
        ok=answer == message,
        dt=time.monotonic() - started,
        faults=list(context.faults),
    )


async def traced_get(task: Task, context: StageContext) -> None:
    """GET through ``svc`` as a traced client would: even task ids send a sampled ``traceparent`` whose ids the
    task's id gives (trace ``<id>``, span ``<id + 1>``), odd ones send none; the line says the header and status."""
    session = context.state
    assert isinstance(session, aiohttp.ClientSession), "setup's session is the state"
    headers = {}
    if task.id % 2 == 0:
        headers["traceparent"] = f"00-{task.id + 1:032x}-{task.id + 2:016x}-01"
    async with session.get(context.dependencies["svc"] + "/search", params={"q": "x"}, headers=headers) as response:
        await response.read()
        record(event="call", stage=context.stage, status=response.status, traceparent=headers.get("traceparent"))
