"""The daemon: the pipeline in real time until SIGINT/SIGTERM, a status line, health over HTTP.

Lifecycle as uvicorn's: capture signals → start → run → graceful stop (report written) →
a second signal forces the exit.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from chaosd.clock import LoopClock, new_event_loop
from chaosd.config import Settings
from chaosd.report import render_summary, write_report
from chaosd.runner import Experiment
from chaosd.telemetry.snapshot import Snapshot

__all__ = ["serve"]

log = logging.getLogger("chaosd")

EXPERIMENT: web.AppKey[Experiment] = web.AppKey("experiment", Experiment)


def status_line(snap: Snapshot, state: str, factor: float) -> str:
    return (
        f"t={snap.t:8.1f}s λ={snap.arrival_rate:7.1f}/s μ={snap.service_rate:7.1f}/s "
        f"done={snap.throughput:7.1f}/s Q={snap.queue_depth}/{snap.capacity} "
        f"p95={snap.sojourn_p95 * 1000:.1f}ms util={snap.utilisation:.2f} state={state} throttle={factor:.2f}"
    )


async def _healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def _readyz(request: web.Request) -> web.Response:
    experiment = request.app[EXPERIMENT]
    ready = experiment.telemetry.latest is not None
    return web.json_response({"ready": ready}, status=200 if ready else 503)


async def _status(request: web.Request) -> web.Response:
    experiment = request.app[EXPERIMENT]
    snap = experiment.telemetry.latest
    body: dict[str, Any] = {
        "detector": experiment.detector.state.value,
        "throttle_factor": experiment.throttle.factor,
        "telemetry": snap.as_dict() if snap is not None else None,
    }
    return web.json_response(body)


def _app(experiment: Experiment) -> web.Application:
    app = web.Application()
    app[EXPERIMENT] = experiment
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/api/v1/status", _status)
    return app


async def _serve(settings: Settings, out: Callable[[str], None]) -> int:
    loop = asyncio.get_running_loop()
    clock = LoopClock(loop)
    stop = asyncio.Event()
    main = asyncio.current_task()
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            out(f"chaosd: {signal.Signals(signum).name} received, stopping (again to force)")
            stop.set()
        elif main is not None:
            main.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)

    experiment = Experiment(settings, clock, warmup=0.0, scenario=None, virtual=False)
    interval = settings.daemon.status_interval
    next_status = interval

    def on_snapshot(snap: Snapshot) -> None:
        nonlocal next_status
        if snap.t >= next_status:
            next_status += interval
            out(status_line(snap, experiment.detector.state.value, experiment.throttle.factor))

    experiment.telemetry.listen(on_snapshot)
    runner = web.AppRunner(_app(experiment), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.api.host, settings.api.port)
        await site.start()
        for address in runner.addresses:
            out(f"chaosd: listening on http://{address[0]}:{address[1]}")
        out(f"chaosd: pipeline running in real time (offered {settings.load.rate:g} tasks/s); Ctrl-C stops")
        try:
            report = await experiment.run(None, stop)
        except asyncio.CancelledError:
            out("chaosd: forced exit, no report written")
            return 1
    finally:
        await runner.cleanup()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    path = Path(settings.daemon.report)
    write_report(report, path)
    out(render_summary(report))
    out(f"chaosd: report written to {path}")
    return 0


def serve(settings: Settings, out: Callable[[str], None]) -> int:
    """Run the daemon on a real-time loop; returns the process exit code."""
    loop = new_event_loop(virtual=False)
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_serve(settings, out))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
