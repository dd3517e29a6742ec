"""The daemon: the pipeline in real time with its HTTP control plane, until SIGINT/SIGTERM.

Lifecycle as uvicorn's: capture signals → start (storage, streams, pipeline) → serve → on the first
signal refuse new faults, revert the active ones, end the event streams, stop the pipeline within
the grace period, write the final report, flush storage, exit 0. A second signal forces the exit.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid
from collections.abc import Callable

from aiohttp import web

from chaosd.api import build_app
from chaosd.api.keys import REPORT
from chaosd.clock import LoopClock, new_event_loop, unix_time
from chaosd.config import Settings, is_loopback
from chaosd.control import Controller
from chaosd.errors import ConfigError
from chaosd.exporters.tracing import Tracing, otlp_exporter_from_env
from chaosd.report import render_summary
from chaosd.runner import Experiment
from chaosd.telemetry.snapshot import Snapshot

__all__ = ["check_bind", "serve"]

log = logging.getLogger("chaosd")


def status_line(snap: Snapshot, state: str, factor: float) -> str:
    return (
        f"t={snap.t:8.1f}s λ={snap.arrival_rate:7.1f}/s μ={snap.service_rate:7.1f}/s "
        f"done={snap.throughput:7.1f}/s Q={snap.queue_depth}/{snap.capacity} "
        f"p95={snap.sojourn_p95 * 1000:.1f}ms util={snap.utilisation:.2f} state={state} throttle={factor:.2f}"
    )


def check_bind(settings: Settings) -> None:
    """Refuse to listen beyond loopback without a token: anyone could break the pipeline."""
    if not is_loopback(settings.api.host) and not settings.api.token:
        raise ConfigError(
            [("configuration", "api.token", f"required to bind {settings.api.host!r} (not a loopback address)")]
        )


async def _serve(settings: Settings, out: Callable[[str], None]) -> int:
    loop = asyncio.get_running_loop()
    clock = LoopClock(loop)
    stop = asyncio.Event()
    main = asyncio.current_task()
    experiment = Experiment(settings, clock, warmup=0.0, scenario=None, virtual=False)
    controller = Controller(experiment)
    run_id = uuid.uuid4().hex[:12]
    tracing = Tracing(clock, unix_time() - clock.now(), settings.tracing.sample_every, otlp_exporter_from_env())
    tracing.attach(experiment)
    if tracing.enabled:
        out(f"chaosd: tracing to OTLP, one task in {tracing.every} sampled, every fault traced")
    app = build_app(settings, controller, stop, run_id, tracing)
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            out(f"chaosd: {signal.Signals(signum).name} received, stopping (again to force)")
            controller.stopping = True
            stop.set()
        elif main is not None:
            main.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)

    interval = settings.daemon.status_interval
    next_status = [interval]

    def on_snapshot(snap: Snapshot) -> None:
        if snap.t >= next_status[0]:
            next_status[0] += interval
            out(status_line(snap, experiment.detector.state.value, experiment.throttle.factor))

    experiment.telemetry.listen(on_snapshot)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    try:
        await runner.setup()
        site = web.TCPSite(runner, settings.api.host, settings.api.port)
        await site.start()
        for address in runner.addresses:
            out(f"chaosd: listening on http://{address[0]}:{address[1]} (run {run_id})")
        out(f"chaosd: pipeline running in real time (offered {settings.load.rate:g} tasks/s); Ctrl-C stops")
        await stop.wait()
        reverted = len(experiment.injector.active())
        await runner.cleanup()
    except asyncio.CancelledError:
        out("chaosd: forced exit; active faults may not have been reverted, no report written")
        return 1
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await asyncio.to_thread(tracing.close)  # ends open fault spans, flushes the exporter
    report = app.get(REPORT)
    if report is None:
        out("chaosd: the pipeline did not stop cleanly; no report written")
        return 1
    out(render_summary(report))
    out(f"chaosd: reverted {reverted} active fault(s); report written to {settings.daemon.report}")
    return 0


def serve(settings: Settings, out: Callable[[str], None]) -> int:
    """Run the daemon on a real-time loop; returns the process exit code."""
    check_bind(settings)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    loop = new_event_loop(virtual=False)
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_serve(settings, out))
    finally:
        asyncio.set_event_loop(None)
        loop.close()
