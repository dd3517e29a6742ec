"""Handlers the Redis dependency tests name in their configs (``redis_dependency_handlers:call`` …), and the HTTP
service they call (``python redis_dependency_handlers.py``: prints its port, answers ``GET /ok``).

The handlers run in the Redis worker processes: each writes one JSON line per event to the file named by
``$CHAOSD_TEST_CALLS`` (setup, teardown and the writer are tests/dependency_handlers.py's): every call with the
status and the latency its own aiohttp client measured, with the process id, so the test tells the workers apart.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time

import aiohttp
from aiohttp import web
from dependency_handlers import CALLS_VARIABLE, failing_setup, record, setup, teardown

from chaosd.handlers import StageContext
from chaosd.pipeline import Task

__all__ = ["CALLS_VARIABLE", "call", "failing_setup", "setup", "teardown"]


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
        record(event="call", task=task.id, status=status, latency=latency, faults=list(context.faults))


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
