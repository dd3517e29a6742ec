"""Handlers the Redis dependency tests name in their configs (``redis_dependency_handlers:call`` …), and the HTTP
service they call (``python redis_dependency_handlers.py``: prints its port, answers ``GET /ok``).

The handlers run in the Redis worker processes: each writes one JSON line per event to the file named by
``$CHAOSD_REDIS_DEP_CALLS`` — setup and teardown, and every call with the status and the latency its own aiohttp
client measured — with the process id, so the test tells the workers apart.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from typing import Any

import aiohttp
from aiohttp import web

from chaosd.handlers import StageContext, StageInfo
from chaosd.pipeline import Task

CALLS_VARIABLE = "CHAOSD_REDIS_DEP_CALLS"


def _write(**line: Any) -> None:
    path = os.environ.get(CALLS_VARIABLE)
    if path:
        with open(path, "a", encoding="utf-8") as fh:  # one short append per line: whole lines across processes
            fh.write(json.dumps({"t": time.time(), "pid": os.getpid(), **line}) + "\n")


async def setup(stage: StageInfo) -> aiohttp.ClientSession:
    _write(event="setup", stage=stage.stage, dependencies=dict(stage.dependencies))
    return aiohttp.ClientSession()


async def teardown(session: object, stage: StageInfo) -> None:
    assert isinstance(session, aiohttp.ClientSession)
    await session.close()
    _write(event="teardown", stage=stage.stage)


async def failing_setup(stage: StageInfo) -> None:
    raise ConnectionRefusedError(f"cannot reach the model for {stage.stage}")


async def call(task: Task, context: StageContext) -> None:
    """One GET through the ``svc`` dependency (chaosd's proxy); an error status raises (a handler error)."""
    session = context.state
    assert isinstance(session, aiohttp.ClientSession), "setup's session is the state"
    started = time.monotonic()
    status = 0
    try:
        async with session.get(context.dependencies["svc"] + "/ok", params={"task": str(task.id)}) as response:
            status = response.status
            await response.read()
            response.raise_for_status()
    finally:
        latency = time.monotonic() - started
        _write(event="call", task=task.id, status=status, latency=latency, faults=list(context.faults))


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "task": request.query.get("task")})


async def _serve() -> None:
    app = web.Application()
    app.router.add_get("/ok", _ok)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    print(f"listening {sock.getsockname()[1]}", flush=True)
    try:
        await asyncio.Event().wait()  # until SIGTERM ends the process
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    sys.exit(asyncio.run(_serve()))
